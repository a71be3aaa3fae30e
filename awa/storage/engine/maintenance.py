"""The maintenance group: rescues, promotion, retention, aging, cron CAS, descriptors,
ring rotation and prune, queue depth and lag."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID

import psycopg

from awa.storage.engine.shared import CronSchedule

ORIGINAL_PRIORITY_KEY = "_awa_original_priority"
"""Metadata key where priority aging keeps a job's priority from before its first step."""

RescueAction = Literal["retry", "fail", "dlq", "cancel"]


@dataclass(frozen=True)
class RescuedAttempt:
    """One attempt a rescue ended, guarded by ``(id, run_lease)`` and the state it was in.

    ``action``: ``retry`` (retryable with backoff), ``fail`` (``failed``),
    ``dlq`` (moved to the DLQ with ``dlq_reason``) or ``cancel`` (``rescued as
    duplicate``: a newer job holds its unique key).
    """

    id: int
    run_lease: int
    kind: str
    queue: str
    action: RescueAction
    dlq_reason: str | None = None


@dataclass
class RescueBatch:
    """What one rescue batch did: the attempts it ended, once committed."""

    found: int = 0
    """Candidates locked; fewer than the limit means nothing more is due now."""
    rescued: list[RescuedAttempt] = field(default_factory=list)
    left: int = 0
    """Candidates neither moved nor cancelled (a mask that includes ``cancelled``)."""
    statements: int = 0

    def _count(self, action: RescueAction) -> int:
        return sum(1 for r in self.rescued if r.action == action)

    @property
    def retried(self) -> int:
        return self._count("retry")

    @property
    def failed(self) -> int:
        return self._count("fail")

    @property
    def dead_lettered(self) -> int:
        return self._count("dlq")

    @property
    def duplicates(self) -> int:
        """Attempts cancelled as ``rescued as duplicate``."""
        return self._count("cancel")

    @property
    def ended(self) -> list[tuple[int, int]]:
        """``(id, run_lease)`` of every attempt ended, for the local cancel flags."""
        return [(r.id, r.run_lease) for r in self.rescued]


@dataclass(frozen=True)
class PromotedJob:
    """A due job promotion made ``available`` (``cancelled=True``: superseded instead)."""

    id: int
    kind: str
    queue: str
    cancelled: bool = False


@dataclass
class PromoteBatch:
    """One promotion batch: due jobs made available, superseded ones cancelled."""

    found: int = 0
    """Due rows locked; fewer than the limit means nothing more is due now."""
    promoted: list[PromotedJob] = field(default_factory=list)
    duplicates: list[PromotedJob] = field(default_factory=list)
    """Retryable attempts whose unique key a newer job took: ``rescued as duplicate``."""
    statements: int = 0

    def promoted_by_queue(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for job in self.promoted:
            out[job.queue] = out.get(job.queue, 0) + 1
        return out


@dataclass(frozen=True)
class PurgedBatch:
    """One bounded retention delete: how many rows went, per queue where rows have one."""

    deleted: int = 0
    by_queue: dict[str, int] = field(default_factory=dict)



@dataclass(frozen=True)
class ActiveCronSchedule(CronSchedule):
    """An active (unpaused) cron schedule as stored, with the database clock it was read at."""

    last_enqueued_at: datetime | None
    created_at: datetime
    db_now: datetime
    """``now()`` of the listing: due slots are computed against the database clock."""


@dataclass(frozen=True)
class CronFired:
    """A cron advance: ``advanced`` False when another evaluator already took the slot."""

    advanced: bool
    job_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Descriptor:
    """A declared queue or job-kind descriptor (``name`` is the queue or the kind)."""

    name: str
    descriptor_hash: str
    display_name: str | None = None
    description: str | None = None
    owner: str | None = None
    docs_url: str | None = None
    tags: list[str] = field(default_factory=list)
    extra: Any = field(default_factory=dict)  # JSON; awa-pg 0.6.9 took any value
    sync_interval_ms: int | None = None  # how often its runtime re-publishes it


@dataclass(frozen=True)
class QueueDepth:
    """THE queue-depth read: one queue's backlog, lag and DLQ depth.

    ``depth`` maps each state of ``awa.lifecycle.DEPTH_STATES`` that has jobs
    in this queue to its count (absent means 0; terminal history is never
    depth).  With a ``cap``, each count stops at the cap (``capped`` names the
    states, and ``"dlq"``, whose counts reached it).  ``oldest_available_at`` /
    ``lag_s``: the run_at of the queue's oldest ``available`` job and how long
    it has waited (>= 0, by the database clock), None when nothing waits.
    ``dlq_depth``: the queue's DLQ entries (capped likewise).
    """

    queue: str
    depth: dict[str, int] = field(default_factory=dict)
    oldest_available_at: datetime | None = None
    lag_s: float | None = None
    dlq_depth: int = 0
    capped: frozenset[str] = frozenset()

    def count(self, state: str) -> int:
        return self.depth.get(state, 0)

    @property
    def total(self) -> int:
        """Jobs of this queue in any depth state (the DLQ not included)."""
        return sum(self.depth.values())


@dataclass
class RingPass:
    """One ring in one rotate-and-prune tick, for metrics and the ops console.

    ``prune_s`` / ``rotate_s``: how long its prune and its rotation took;
    ``due``: whether a rotation was due at all (the queue ring moves once per
    slot span, hours apart; a tick before that is no attempt); ``rotated``:
    whether the rotation moved the ring on (due and not rotated: the next slot
    still held rows).  ``current_slot`` / ``generation`` / ``slot_count``: the
    ring after the tick; ``occupied``: its slots holding any row after the
    tick (the current one included).
    """

    ring: str
    current_slot: int
    slot_count: int
    generation: int
    prune_s: float = 0.0
    rotate_s: float = 0.0
    due: bool = True
    rotated: bool = False
    occupied: tuple[int, ...] = ()


@dataclass
class PruneReport:
    """One ring prune pass: which (ring, slot) were truncated, skipped as busy or still live.

    ``attempted``: the sealed slots holding rows that prune tried to reclaim;
    ``blockers``: for each one it could not, what held it (``PRUNE_BLOCKERS``:
    a claimable ready entry, an open receipt, a lease, terminal rows inside
    their retention, or a lock another session held); ``rings``: one
    ``RingPass`` per ring, in ring order.  Empty on an engine without rings
    (canonical reclaims history by row retention).
    """

    truncated: list[tuple[str, int]] = field(default_factory=list)
    busy: list[tuple[str, int]] = field(default_factory=list)
    live: list[tuple[str, int]] = field(default_factory=list)
    carried_failed: int = 0
    attempted: list[tuple[str, int]] = field(default_factory=list)
    blockers: dict[tuple[str, int], str] = field(default_factory=dict)
    rings: list[RingPass] = field(default_factory=list)


# What keeps a sealed ring slot from being truncated (PruneReport.blockers).
PRUNE_BLOCKER_READY = "ready"  # a ready entry still claimable
PRUNE_BLOCKER_RECEIPT = "receipt"  # an open claim receipt
PRUNE_BLOCKER_LEASE = "lease"  # a materialized attempt (lease row)
PRUNE_BLOCKER_RETENTION = "retention"  # terminal rows younger than their retention
PRUNE_BLOCKER_LOCK = "lock"  # another session held the partition past lock_timeout
PRUNE_BLOCKERS = (PRUNE_BLOCKER_READY, PRUNE_BLOCKER_RECEIPT, PRUNE_BLOCKER_LEASE,
                  PRUNE_BLOCKER_RETENTION, PRUNE_BLOCKER_LOCK)


class MaintenanceReads(Protocol):
    """The maintenance group's reads that operators share (part of ``ReadEngine``): the
    queue-depth read and the active schedules, whose lateness the ops tools judge."""

    async def list_active_cron_jobs(
            self, conn: psycopg.AsyncConnection[Any]) -> list[ActiveCronSchedule]:
        """Unpaused schedules, by name."""
        ...

    async def queue_depths(self, conn: psycopg.AsyncConnection[Any], *,
                           cap: int | None = None) -> list[QueueDepth]:
        """Every queue with a job in a ``DEPTH_STATES`` state or in the DLQ, by name.

        Index-backed: one probe per (state, queue) pair, never a scan of
        terminal history.  ``cap`` bounds each count (the ops console's cheap
        "1000+"); None counts exactly.
        """
        ...


class MaintenanceOps(MaintenanceReads, Protocol):
    """What the elected leader runs; every write is guarded against a second leader.

    Each method does one bounded batch in its own transaction (a savepoint
    when the caller has one open); the caller loops and records metrics after
    commit from what is returned.  Moves that can collide on a unique key
    degrade row by row and cancel the superseded attempt (``rescued as
    duplicate``), so one wedged row never stops the batch.
    """

    # -- rescue: retry while attempts remain, else failed or the DLQ ------------
    async def rescue_stale_heartbeats(
            self, conn: psycopg.AsyncConnection[Any], *, staleness_s: float, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        """Running attempts whose heartbeat is older than ``staleness_s``
        (``heartbeat stale: worker presumed dead``, DLQ reason ``heartbeat_stale``)."""
        ...

    async def rescue_expired_deadlines(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        """Running attempts past their ``deadline_at`` (``hard deadline exceeded``)."""
        ...

    async def rescue_callback_timeouts(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        """``waiting_external`` attempts past their callback timeout (``callback timed out``)."""
        ...

    # -- promotion -----------------------------------------------------------------
    async def promote_due(self, conn: psycopg.AsyncConnection[Any], *,
                          limit: int) -> PromoteBatch:
        """Due ``scheduled`` / ``retryable`` jobs of unpaused queues become ``available``
        (workers of the queue are woken at commit); ids, attempts and leases are kept."""
        ...

    # -- retention: one bounded batch each ----------------------------------------------
    async def purge_finalized(self, conn: psycopg.AsyncConnection[Any], *, state: str,
                              older_than_s: float, limit: int, queue: str | None = None,
                              exclude_queues: Sequence[str] = ()) -> int:
        """Delete ``state`` (terminal) jobs finalized more than ``older_than_s`` ago:
        of ``queue`` only, or of every queue but ``exclude_queues``."""
        ...

    async def purge_aged_dlq(self, conn: psycopg.AsyncConnection[Any], *, older_than_s: float,
                        limit: int, queue: str | None = None,
                        exclude_queues: Sequence[str] = ()) -> PurgedBatch:
        """Delete DLQ entries dead-lettered more than ``older_than_s`` ago."""
        ...

    async def purge_unseen_runtimes(self, conn: psycopg.AsyncConnection[Any], *,
                                    older_than_s: float, limit: int) -> int:
        """Delete runtime rows whose last snapshot is older than ``older_than_s``."""
        ...

    async def purge_unseen_descriptors(self, conn: psycopg.AsyncConnection[Any], *,
                                       catalogue: Literal["queues", "kinds"],
                                       older_than_s: float, limit: int) -> int:
        """Delete queue or job-kind descriptors no runtime declared for ``older_than_s``."""
        ...

    # -- priority aging ----------------------------------------------------------------
    async def age_priorities(self, conn: psycopg.AsyncConnection[Any], *,
                             default_interval_ms: int, queue_intervals_ms: Mapping[str, int],
                             limit: int) -> int:
        """Raise waiting ``available`` jobs one priority step per aging interval waited
        (from their original priority, kept under ``ORIGINAL_PRIORITY_KEY``); an interval
        of 0 disables aging for that queue.  Returns how many jobs changed."""
        ...

    # -- cron ----------------------------------------------------------------------------
    async def fire_cron(self, conn: psycopg.AsyncConnection[Any], schedule: ActiveCronSchedule,
                        slots: Sequence[datetime]) -> CronFired:
        """Compare-and-set ``last_enqueued_at`` from ``schedule.last_enqueued_at`` to the
        last slot and, only if that matched, insert one job per slot, atomically: two
        evaluators of the same slot (overlapping leaders) fire it once."""
        ...

    # -- descriptors -----------------------------------------------------------------
    async def upsert_descriptors(self, conn: psycopg.AsyncConnection[Any], *,
                                 queues: Sequence[Descriptor],
                                 kinds: Sequence[Descriptor]) -> int:
        """Insert or refresh the declared descriptors (``last_seen_at`` = now)."""
        ...

    async def set_runtime_descriptor_hashes(self, conn: psycopg.AsyncConnection[Any],
                                            instance_id: UUID,
                                            hashes: Mapping[str, Any]) -> bool:
        """Record a runtime's descriptor hashes; False when unchanged (or no such runtime)."""
        ...

    # -- queue health -----------------------------------------------------------------
    async def rotate_and_prune(self, conn: psycopg.AsyncConnection[Any], *,
                               completed_retention_s: float,
                               failed_retention_s: float) -> PruneReport:
        """Reclaim history by rotating partition rings and TRUNCATE of sealed, provably
        empty partitions under a short lock_timeout (queue storage); canonical: nothing."""
        ...
