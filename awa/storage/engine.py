"""The storage-engine seam: one typed async method per operation.

Everything above this module (runtime, maintenance, admin, callbacks,
``awa_ops``, ``awa_tui``) talks to job storage only through ``Engine``; only
``awa/storage/`` runs job-table SQL.  The shape follows River's driver
``Executor`` and Oban's ``Engine`` behaviour: methods take a connection (the
caller owns the transaction, so enqueue stays transactional with the user's
writes) plus dataclasses, and return dataclasses or ``awa.Job`` -- never a
cursor, a SQL string or a bare tuple row.

The protocol is split into groups, one per concern, composed into ``Engine``
at the bottom.  Each engine implements every group; ``tests/storage/`` is the
conformance suite every engine must pass unchanged.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID

import psycopg

from awa.job import Job, JobState


# ============================================================================
# enqueue: insert batch, COPY batch, unique-holder lookup
# ============================================================================
@dataclass
class EnqueueBatch:
    """Validated, encoded columns of the rows one statement writes.

    Built by ``awa.storage.common.enqueue.build_batch`` before anything is
    written, so bad input fails with one line; every engine writes the same
    columns.  ``originals`` are the caller's own args objects, handed back in
    the returned jobs.
    """

    kind: list[str] = field(default_factory=list)
    queue: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)  # JSON text, exactly as stored
    priority: list[int] = field(default_factory=list)
    max_attempts: list[int] = field(default_factory=list)
    run_at: list[datetime | None] = field(default_factory=list)
    metadata: list[str] = field(default_factory=list)  # JSON text
    tags: list[str] = field(default_factory=list)  # text[] literals
    unique_key: list[bytes | None] = field(default_factory=list)
    unique_states: list[str | None] = field(default_factory=list)  # bit(8) text
    originals: list[Any] = field(default_factory=list)
    metadata_dicts: list[dict[str, Any]] = field(default_factory=list)
    tag_lists: list[list[str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def needs_general(self) -> bool:
        """Unique keys or explicit run_at need the general statement."""
        return self.has_unique or any(r is not None for r in self.run_at)

    @property
    def has_unique(self) -> bool:
        return any(k is not None for k in self.unique_key)

    def chunks(self, size: int) -> list[EnqueueBatch]:
        """Slices of at most ``size`` rows, each written by one statement."""
        if len(self) <= size:
            return [self]
        names = [f.name for f in dataclasses.fields(self)]
        return [EnqueueBatch(**{n: getattr(self, n)[i:i + size] for n in names})
                for i in range(0, len(self), size)]


@dataclass
class InsertOutcome:
    """What one insert wrote: the jobs (when asked to return them) and the duplicates left out."""

    jobs: list[Job[Any]]
    """The inserted jobs in input order (empty when ``returning=False``)."""
    inserted: int
    skipped: int
    """Unique duplicates left out (their key was already claimed, or earlier in the batch)."""


@dataclass(frozen=True)
class UniqueHolder:
    """The job holding a unique key's claim."""

    job_id: int
    state: JobState | None
    """``None`` when the claim names a job that no longer exists (a wedged claim)."""


class EnqueueOps(Protocol):
    """Producer side: appends jobs in the caller's transaction.

    A lost race with a concurrent producer on a unique key is retried inside
    the engine; only a key that stays taken is reported, and only for inserts
    that must report it (a single insert raises ``UniqueConflict`` from the
    ``skipped`` count, a bulk insert just skips).
    """

    async def insert_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                           returning: bool = True) -> InsertOutcome:
        """One statement per batch; duplicates of a claimed unique key are skipped."""
        ...

    def insert_batch_sync(self, conn: psycopg.Connection[Any], batch: EnqueueBatch,
                          returning: bool = True) -> InsertOutcome:
        """``insert_batch`` on a user's blocking connection (``awa.bridge.insert_job_sync``)."""
        ...

    async def copy_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                         returning: bool = True) -> InsertOutcome:
        """The same rows written through ``COPY``: the bulk path."""
        ...

    async def unique_holder(self, conn: psycopg.AsyncConnection[Any],
                            key: bytes) -> UniqueHolder | None:
        """Who holds ``key``'s unique claim; ``None`` when nobody does."""
        ...

    def unique_holder_sync(self, conn: psycopg.Connection[Any],
                           key: bytes) -> UniqueHolder | None:
        ...


# ============================================================================
# execution: claim, outcome batches guarded by (id, run_lease), heartbeat,
# progress, runtime snapshot
# ============================================================================
@dataclass(slots=True)
class AttemptWrite:
    """One attempt's write, guarded by ``(id, run_lease)``: an outcome, a heartbeat or a
    progress flush.

    ``progress`` and ``metadata`` are what the handler buffered since the last
    write (``None`` keeps the stored value; ``metadata`` is a patch merged into
    it).  The other fields matter only to the outcomes that use them.
    """

    id: int
    run_lease: int
    progress: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    """Appended to ``errors`` (retry, snooze, cancel, fail, dead-letter)."""
    delay_s: float = 0.0
    """Retry and snooze: runnable again after this many seconds."""
    reason: str | None = None
    """Dead-letter: the DLQ reason."""
    callback_id: str | None = None
    """Park: the callback the handler registered (a different one means it was resolved)."""
    attempt: int = 0
    """The attempt number, for the ``rescued as duplicate`` entry of a superseded retry."""


@dataclass(slots=True)
class AppliedBatch:
    """What an outcome batch wrote.

    Attempts in neither list were stale (cancelled, rescued or re-claimed
    meanwhile): ignored, for the caller to count.
    """

    applied: list[int] = field(default_factory=list)
    """Ids whose write committed."""
    superseded: list[int] = field(default_factory=list)
    """Ids whose move collided with a newer holder of their unique key and
    were cancelled instead (``rescued as duplicate``)."""


@dataclass(slots=True)
class RuntimeSnapshot:
    """One runtime's row for operators: who runs, what it serves, is it healthy."""

    instance_id: uuid.UUID
    hostname: str
    pid: int
    version: str
    started_at: datetime
    snapshot_interval_ms: int
    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    maintenance_alive: bool
    leader: bool
    shutting_down: bool
    global_max_workers: int | None
    queues: list[dict[str, Any]]
    """One description per queue served (limits, in flight, rate limit, DLQ)."""


class ExecutionOps(Protocol):
    """The worker runtime's hot path; every method is one statement per batch.

    Every write after the claim is guarded by ``(id, run_lease)`` and the
    expected state: a write for an attempt that is no longer this one
    matches nothing and is left out of the returned ids (a stale write, never
    an error).  Batches may be in any order; callers sort by id to keep lock
    order stable between concurrent flushers.
    """

    async def claim_batch(self, conn: psycopg.AsyncConnection[Any], queue: str, limit: int,
                          deadline_ms: int | None, instance_id: uuid.UUID | None = None,
                          aging_interval_ms: int = 0) -> list[Job[Any]]:
        """Claim up to ``limit`` available jobs of ``queue`` (none when it is paused) in
        dispatch order (priority, run_at, id), skipping rows other claimers hold.

        Each claimed job is ``running`` with ``attempt`` and ``run_lease`` one
        higher, a fresh heartbeat and ``deadline_at = now() + deadline_ms`` (NULL when
        ``deadline_ms`` is None: no deadline).
        ``instance_id`` (the claiming runtime, ``awa.runtime_instances``) is
        recorded with the attempt: ``claimed_by`` of ``awa.jobs`` and of the
        running-attempt reads.  The jobs come back with raw (undecoded) args.

        ``aging_interval_ms`` (> 0): an engine that can, orders by priority aged at
        claim time (one step per interval waited since run_at, as the maintenance
        leader's aging).  Queue storage does; canonical claims in its index order
        and relies on the leader's aging pass, which rewrites the priority.
        """
        ...

    async def complete_batch(self, conn: psycopg.AsyncConnection[Any],
                             attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> completed."""
        ...

    async def warm_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Run the claim and the plain completion on nothing, so that this connection has
        read what they need (and, where an engine caches plans per session, planned them)
        before the first real claim: that first call costs milliseconds.  Claims, ends and
        writes nothing."""
        ...

    async def retry_batch(self, conn: psycopg.AsyncConnection[Any],
                          attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> retryable at now()+delay_s, the error appended, the attempt spent.

        A row colliding with a newer holder of its unique key is cancelled
        (``rescued as duplicate``, in ``superseded``) while the rest applies.
        """
        ...

    async def snooze_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> scheduled at now()+delay_s; the attempt is given back.
        Collisions as in ``retry_batch``."""
        ...

    async def cancel_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> cancelled (the handler's ``Cancel``), the error appended."""
        ...

    async def fail_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> failed in place (no DLQ), the error appended."""
        ...

    async def dead_letter_batch(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> the DLQ as failed, with ``reason``.  Collisions as in ``retry_batch``."""
        ...

    async def park_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> waiting_external, only while ``callback_id`` is still the job's
        callback (one resolved early or re-registered wins)."""
        ...

    async def cancel_superseded(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> list[int]:
        """running -> cancelled with a ``rescued as duplicate`` error: the attempt
        lost its unique key to a newer job.  Returns the ids cancelled."""
        ...

    async def heartbeat_batch(self, conn: psycopg.AsyncConnection[Any],
                              attempts: Sequence[AttemptWrite]) -> list[int]:
        """Refresh the heartbeat of running / waiting_external attempts and write their
        buffered progress and metadata.  Returns the ids matched; the others are
        no longer these attempts."""
        ...

    async def flush_progress_batch(self, conn: psycopg.AsyncConnection[Any],
                                   attempts: Sequence[AttemptWrite]) -> list[int]:
        """Write buffered progress and metadata now (``job.flush_progress()``), without
        touching the heartbeat.  Returns the ids matched."""
        ...

    async def upsert_runtime_snapshot(self, conn: psycopg.AsyncConnection[Any],
                                      snapshot: RuntimeSnapshot) -> None:
        """Insert or refresh this runtime's row (``last_seen_at = now()``)."""
        ...

    async def available_counts(self, conn: psycopg.AsyncConnection[Any],
                               queues: Sequence[str]) -> dict[str, int]:
        """Available jobs per queue, for the queues that have any."""
        ...


# ============================================================================
# maintenance: rescues, promotion, retention, aging, cron CAS, descriptors,
# queue depth / lag
# ============================================================================
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
class CronSchedule:
    """One declared schedule as stored (the ``awa.cron_jobs`` definition columns)."""

    name: str
    cron_expr: str
    timezone: str
    kind: str
    queue: str
    args: dict[str, Any]
    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    missed_fire_policy: str


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


@dataclass(frozen=True)
class RingState:
    """A partition ring as the database holds it (queue storage; ops read side).

    ``rotated_age_s``: seconds since it last rotated; ``occupied``: the
    slots holding any row (the current one included).
    """

    ring: str
    current_slot: int
    slot_count: int
    generation: int
    rotated_age_s: float
    occupied: tuple[int, ...]


class MaintenanceOps(Protocol):
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
    async def list_active_cron_jobs(
            self, conn: psycopg.AsyncConnection[Any]) -> list[ActiveCronSchedule]:
        """Unpaused schedules, by name."""
        ...

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

    async def queue_depths(self, conn: psycopg.AsyncConnection[Any], *,
                           cap: int | None = None) -> list[QueueDepth]:
        """Every queue with a job in a ``DEPTH_STATES`` state or in the DLQ, by name.

        Index-backed: one probe per (state, queue) pair, never a scan of
        terminal history.  ``cap`` bounds each count (the ops console's cheap
        "1000+"); None counts exactly.
        """
        ...


# ============================================================================
# admin: jobs, queues, DLQ
# ============================================================================
@dataclass(frozen=True)
class JobDump:
    """A job as ``dump_job`` shows it: the job, and its DLQ entry's reason when it is there."""

    job: Job[Any]
    dlq_reason: str | None = None
    dlq_at: datetime | None = None


@dataclass(frozen=True)
class QueueStat:
    queue: str
    available: int = 0
    running: int = 0
    failed: int = 0
    completed_last_hour: int = 0
    lag_seconds: float | None = None
    paused: bool = False
    scheduled: int = 0
    retryable: int = 0
    waiting_external: int = 0

    @property
    def total_queued(self) -> int:
        """Work not yet finished or started: available + scheduled + retryable."""
        return self.available + self.scheduled + self.retryable

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "total_queued": self.total_queued}


@dataclass(frozen=True)
class DlqEntry:
    job: Job[dict[str, Any]]
    reason: str
    dlq_at: datetime
    original_run_lease: int

    def __repr__(self) -> str:
        return (f"DlqEntry(job_id={self.job.id}, kind={self.job.kind!r}, "
                f"queue={self.job.queue!r}, reason={self.reason!r})")


@dataclass(frozen=True)
class RetryFailedResult:
    jobs: list[Job[dict[str, Any]]] = field(default_factory=list)
    matched: int = 0
    pruned_failed_count: int | None = None
    skipped: int = 0  # matched, but a live duplicate holds their unique key

    def __repr__(self) -> str:
        return f"RetryFailedResult(matched={self.matched}, retried={len(self.jobs)})"


@dataclass(frozen=True)
class QueueCount:
    """How many rows of one queue an operation saw or changed."""

    queue: str
    count: int


@dataclass(frozen=True)
class KindQueueCount:
    """How many rows of one (kind, queue) an operation changed (for the per-kind metrics)."""

    kind: str
    queue: str
    count: int


@dataclass(frozen=True)
class DlqFilter:
    """Which DLQ entries an operation applies to; ``None`` fields do not filter.

    ``before_id`` / ``before_dlq_at`` page newest-first lists: together they
    are the cursor ``(dlq_at, job_id) < (before_dlq_at, before_id)``.
    """

    kind: str | None = None
    queue: str | None = None
    tag: str | None = None
    before_id: int | None = None
    before_dlq_at: datetime | None = None

    @property
    def is_empty(self) -> bool:
        return all(v is None for v in (self.kind, self.queue, self.tag, self.before_id,
                                       self.before_dlq_at))


class AdminOps(Protocol):
    """Operator actions and lookups behind the client's admin API and the CLI.

    Validation and metrics stay with the caller (``awa.admin``); a method
    that makes several statements runs them in one transaction (a savepoint
    when the caller holds one), so it applies all or nothing.  A move into a
    state of a job's unique mask that collides with a live holder raises
    ``UniqueConflict`` for a single job; bulk moves leave the colliding jobs
    where they were (``awa.storage.common.collisions.apply_batch_or_each``).
    """

    # -- jobs --
    async def get_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        """The job by id, from the live tables or the DLQ."""
        ...

    async def dump_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> JobDump | None:
        ...

    async def list_jobs(self, conn: psycopg.AsyncConnection[Any], *,
                        state: JobState | None = None, kind: str | None = None,
                        queue: str | None = None, tag: str | None = None,
                        limit: int = 100, before_id: int | None = None) -> list[Job[Any]]:
        """Newest first; ``before_id`` pages on: only ids below it (keyset)."""
        ...

    async def cancel(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        """Cancel a job that has not finished; ``None`` when none or already finished.

        A running or waiting_external attempt is told at commit through
        ``NOTIFY "awa:cancel"`` with ``{"job_id", "run_lease"}``.
        """
        ...

    async def retry(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        """A failed, cancelled or ``waiting_external`` job (its callback dropped) back to
        available with a fresh attempt budget; None for any other state."""
        ...

    async def retry_failed(self, conn: psycopg.AsyncConnection[Any], *, kind: str | None = None,
                           queue: str | None = None) -> RetryFailedResult:
        """Every failed job of a kind and/or queue; unique collisions stay failed."""
        ...

    async def discard_failed(self, conn: psycopg.AsyncConnection[Any], kind: str) -> int:
        ...

    # -- queues --
    async def pause_queue(self, conn: psycopg.AsyncConnection[Any], queue: str,
                          paused_by: str | None = None) -> None:
        ...

    async def resume_queue(self, conn: psycopg.AsyncConnection[Any], queue: str) -> None:
        """Unpause and wake the queue's dispatchers."""
        ...

    async def drain_queue(self, conn: psycopg.AsyncConnection[Any],
                          queue: str) -> list[KindQueueCount]:
        """Cancel every job of the queue still waiting to run or parked for a callback;
        running ones finish."""
        ...

    async def queue_stats(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueStat]:
        ...

    # -- dead-letter queue --
    async def dlq_depth(self, conn: psycopg.AsyncConnection[Any], *,
                        queue: str | None = None) -> int:
        ...

    async def dlq_depth_by_queue(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueCount]:
        ...

    async def get_dlq_job(self, conn: psycopg.AsyncConnection[Any],
                          job_id: int) -> DlqEntry | None:
        ...

    async def list_dlq(self, conn: psycopg.AsyncConnection[Any], where: DlqFilter,
                       limit: int = 100) -> list[DlqEntry]:
        """Newest first (``dlq_at``, then job id)."""
        ...

    async def purge_dlq(self, conn: psycopg.AsyncConnection[Any],
                        where: DlqFilter) -> list[QueueCount]:
        """Delete the matching entries (an empty filter: all of them); counts per queue."""
        ...

    async def purge_dlq_job(self, conn: psycopg.AsyncConnection[Any],
                            job_id: int) -> list[QueueCount]:
        """Delete one entry: its queue counted once, or nothing when it is not in the DLQ."""
        ...

    async def retry_from_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                             run_at: datetime | None = None, priority: int | None = None,
                             queue: str | None = None) -> Job[Any] | None:
        """Out of the DLQ, same id: available (or scheduled at ``run_at``), fresh attempts."""
        ...

    async def bulk_retry_from_dlq(self, conn: psycopg.AsyncConnection[Any],
                                  where: DlqFilter) -> list[QueueCount]:
        """``retry_from_dlq`` for every match (kind/queue/tag); collisions stay in the DLQ."""
        ...

    async def move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                 reason: str) -> DlqEntry | None:
        """``None`` when it is not a failed job."""
        ...

    async def bulk_move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], *,
                                      kind: str | None = None, queue: str | None = None,
                                      reason: str) -> list[KindQueueCount]:
        """Every failed job of a kind and/or queue (neither: all of them)."""
        ...

    # -- test isolation --------------------------------------------------------------
    async def clean_for_tests(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Test helpers only (``awa.testing``): every job (live, deferred, finished, in the
        DLQ), unique claim, queue setting and runtime snapshot goes; the engine stays."""
        ...


# ============================================================================
# callbacks: register, resolve, complete / fail / retry / resume / heartbeat
# ============================================================================
CALLBACK_RESULT_KEY = "_awa_callback_result"
"""Where resume and complete store ``{callback_id, action, payload, at}`` in the job's metadata."""

CALLBACK_RESUME_CHANNEL = "awa:callback_resolved"
"""A resume notifies here (payload: the job id), waking the handler in ``wait_for_callback``."""


@dataclass(frozen=True)
class CallbackSpec:
    """What a running attempt registers: a fresh id, its timeout and its CEL rules."""

    callback_id: uuid.UUID
    timeout_s: float
    filter: str | None = None
    on_complete: str | None = None
    on_fail: str | None = None
    transform: str | None = None


@dataclass(frozen=True)
class CallbackWait:
    """One poll of a handler waiting in ``wait_for_callback``: the row's current owner."""

    state: str
    run_lease: int
    callback_id: uuid.UUID | None
    result: Any
    """The payload stored under ``CALLBACK_RESULT_KEY`` (bare, as awa-pg 0.6.9), if any."""


@dataclass(frozen=True)
class CallbackHolder:
    """The job a callback id belongs to, whatever its state (for "already resolved")."""

    job_id: int
    state: str


class CallbackOps(Protocol):
    """External-wait jobs: the attempt parks until a callback resolves it.

    Every resolution matches the job by ``callback_id`` AND an open state
    (``running`` or ``waiting_external``) in one guarded statement and
    returns ``None`` when nothing matched (unknown or already resolved:
    ``find_callback`` tells which), so a second resolution never transitions
    twice.  A unique-key collision surfaces as ``psycopg.errors.UniqueViolation``
    with nothing written.
    """

    async def register_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, spec: CallbackSpec) -> bool:
        """Store the callback on the running attempt ``(job_id, run_lease)``; False if stale."""
        ...

    async def park_for_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, callback_id: uuid.UUID) -> bool:
        """``running → waiting_external`` for the attempt still holding ``callback_id``."""
        ...

    async def poll_callback_wait(self, conn: psycopg.AsyncConnection[Any],
                                 job_id: int) -> CallbackWait | None:
        """The waiting handler's view of its job; None once the job left the live rows."""
        ...

    async def complete_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                                result: Any) -> Job[Any] | None:
        """``open → completed``, storing ``result`` (any JSON value) under
        ``CALLBACK_RESULT_KEY``."""
        ...

    async def fail_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                            error: dict[str, Any]) -> Job[Any] | None:
        """``open → failed``, appending ``error`` (its ``attempt`` filled in) to the errors."""
        ...

    async def retry_external(self, conn: psycopg.AsyncConnection[Any],
                             callback_id: uuid.UUID) -> Job[Any] | None:
        """``open → available``, attempt 0, callback cleared; wakes the queue at commit."""
        ...

    async def resume_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                              result: Any) -> Job[Any] | None:
        """``open → running``, storing ``result``, clearing the callback and notifying
        ``CALLBACK_RESUME_CHANNEL`` with the job id."""
        ...

    async def heartbeat_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID, timeout_s: float) -> Job[Any] | None:
        """Push the open callback's timeout to now + ``timeout_s``."""
        ...

    async def lock_open_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID) -> Job[Any] | None:
        """The open job of ``callback_id``, locked for the caller's transaction (CEL resolve)."""
        ...

    async def find_callback(self, conn: psycopg.AsyncConnection[Any],
                            callback_id: uuid.UUID) -> CallbackHolder | None:
        """The job holding ``callback_id`` in any state; None for an unknown id."""
        ...


# ============================================================================
# cron admin: the stored schedules behind the client's cron API and the CLI
# ============================================================================
# CronSchedule, the stored definition, is declared with ActiveCronSchedule above.
@dataclass(frozen=True)
class CronJobInfo(CronSchedule):
    """A stored schedule with its firing and pause state, for ``awa cron list``."""

    last_enqueued_at: datetime | None
    paused_at: datetime | None
    paused_by: str | None
    created_at: datetime
    updated_at: datetime


class CronAdminOps(Protocol):
    """Schedule storage for declarations and operators; firing is the leader's (maintenance)."""

    async def upsert_cron_jobs(self, conn: psycopg.AsyncConnection[Any],
                               schedules: list[CronSchedule]) -> int:
        """Insert or update the schedules; rows changed.  Firing and pause state are kept."""
        ...

    async def list_cron_jobs(self, conn: psycopg.AsyncConnection[Any]) -> list[CronJobInfo]:
        """Every stored schedule, by name."""
        ...

    async def get_cron_job(self, conn: psycopg.AsyncConnection[Any],
                           name: str) -> CronJobInfo | None:
        ...

    async def delete_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        ...

    async def pause_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str,
                             paused_by: str | None) -> bool:
        """Stop firing (an already paused schedule keeps its ``paused_at``); False if unknown."""
        ...

    async def resume_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        ...

    async def trigger_cron_job(self, conn: psycopg.AsyncConnection[Any],
                               name: str) -> Job[Any] | None:
        """Enqueue one available run of the schedule now; the schedule is untouched."""
        ...


# ============================================================================
# ops read side: what awa_ops and awa_tui show
# ============================================================================
@dataclass(frozen=True)
class QueueDetail:
    """One queue's oldest runnable job, recent completions and pause flag."""

    queue: str
    oldest_available: datetime | None
    lag_s: float | None
    """Database ``now()`` minus ``oldest_available`` (never negative); None when nothing waits."""
    completed: int
    """Completions finalized in ``(since, until]``, up to the cap (0 when no window was asked)."""
    paused: bool
    paused_at: datetime | None
    paused_by: str | None


@dataclass(frozen=True)
class DlqDepth:
    """DLQ entries of one queue (and reason, when counted per reason)."""

    queue: str
    reason: str | None
    count: int
    capped: bool = False
    newest: datetime | None = None
    recent: int = 0
    """Entries younger than the ``recent_s`` asked for."""


@dataclass(frozen=True)
class RuntimeInstance:
    """One row of the runtime registry, with its age on the database clock."""

    instance_id: str
    hostname: str | None
    pid: int | None
    version: str | None
    started_at: datetime | None
    last_seen_at: datetime
    snapshot_interval_ms: int
    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    maintenance_alive: bool
    leader: bool
    shutting_down: bool
    queues: list[str]
    """Names of the queues it serves (empty: it did not say, so any)."""
    last_seen_age_s: float
    uptime_s: float | None
    heartbeat_interval_ms: int | None = None
    heartbeat_staleness_ms: int | None = None
    """The runtime's own heartbeat timing, as its snapshot published it (None: it did not,
    e.g. an older runtime or awa-pg 0.6.9)."""
    schema_version: int | None = None
    layout_version: int | None = None
    """The schema version and engine layout its code speaks (None: a release from before
    runtimes recorded them, or canonical's layout)."""


@dataclass(frozen=True)
class RunningAttemptRead:
    """A running attempt: who claimed it when, and its ages on the database clock."""

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    run_lease: int
    priority: int
    attempted_at: datetime | None
    heartbeat_at: datetime | None
    deadline_at: datetime | None
    tags: list[str]
    heartbeat_age_s: float | None
    deadline_remaining_s: float | None
    running_for_s: float | None
    claimed_by: str | None = None
    """The instance id of the runtime that claimed it (None: claimed before it was
    recorded, or a layout that does not record it)."""


@dataclass(frozen=True)
class RunningCounts:
    """Per queue: running attempts, the oldest heartbeat, how many are stale or overdue."""

    queue: str
    running: int
    oldest_heartbeat_s: float | None
    stale: int
    overdue: int


@dataclass(frozen=True)
class CancelledAttempt:
    """A job cancelled while running whose handler may still hold its slot."""

    job_id: int
    kind: str
    queue: str
    attempt: int
    run_lease: int
    heartbeat_at: datetime | None
    finalized_at: datetime | None
    deadline_at: datetime | None
    cancelled_age_s: float
    heartbeat_after_cancel: bool


@dataclass(frozen=True)
class UniqueClaimHolder:
    """Who holds a unique key: the job, its state (None: gone), whether it sits in the DLQ."""

    unique_key: bytes
    job_id: int
    state: str | None
    in_dlq: bool


@dataclass(frozen=True)
class WedgedClaims:
    """Running jobs of a queue whose unique key another job holds."""

    queue: str
    wedged: int


@dataclass(frozen=True)
class SupersededAttempt:
    """A running attempt whose unique key another job holds (the guide's wedge query), and
    the holder's state (None: the holder is gone)."""

    stuck_job: int
    kind: str
    queue: str
    unique_key: bytes
    claim_holder: int
    holder_state: str | None


@dataclass(frozen=True)
class JobListQuery:
    """The console's job screen filter; ``window`` bounds the rows kind/tag/args filters
    search."""

    state: str | None = None
    queue: str | None = None
    kind: str | None = None
    tag: str | None = None
    page: int = 100
    window: int = 5_000
    max_pairs: int = 4_000
    args: str | None = None
    """Text the job's args (as JSON text) contain, case-insensitive."""

    @property
    def post_filtered(self) -> bool:
        """Kind, tag and args have no index of their own: they filter within the window."""
        return bool(self.kind or self.tag or self.args)


@dataclass(frozen=True)
class JobSummary:
    """A row of a job list."""

    id: int
    kind: str
    queue: str
    state: str
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime | None
    created_at: datetime | None
    attempted_at: datetime | None
    finalized_at: datetime | None
    tags: list[str]
    last_error: str | None = None
    """The newest error's message (its first 500 characters), if any."""


@dataclass(frozen=True)
class Oversized:
    """A value too big to fetch whole: its first ``len(head)`` characters as JSON text and
    its full size in bytes."""

    head: str
    total_bytes: int

    @property
    def more_bytes(self) -> int:
        return max(0, self.total_bytes - len(self.head.encode()))


# The job values a capped read may leave out (``JobRecord.oversized``).
CAPPED_VALUES = ("args", "metadata", "errors", "progress")


@dataclass(frozen=True)
class JobRecord:
    """One job, from the live tables or from the DLQ (``dlq_reason`` set)."""

    job: Job[Any]
    dlq_reason: str | None = None
    dlq_at: datetime | None = None
    claimed_by: str | None = None
    """The runtime instance that claimed its current (or last, once it ended in place)
    attempt; None when not recorded."""
    oversized: dict[str, Oversized] = field(default_factory=dict)
    """With ``job_record(cap_bytes=...)``: each of ``CAPPED_VALUES`` bigger than the cap,
    by name; the job's own value is then empty (``{}``, ``[]`` or None)."""

    @property
    def in_dlq(self) -> bool:
        return self.dlq_reason is not None


@dataclass(frozen=True)
class DlqCursor:
    """Where a DLQ page ended: the next page starts strictly before it."""

    dlq_at: datetime
    job_id: int


@dataclass(frozen=True)
class DlqPageQuery:
    """A DLQ page: filters, newest first; ``window`` bounds the rows non-index filters search."""

    queue: str | None = None
    kind: str | None = None
    reason: str | None = None
    page: int = 100
    window: int = 5_000
    before: DlqCursor | None = None


@dataclass(frozen=True)
class DlqSummary:
    """A row of a DLQ page."""

    job_id: int
    kind: str
    queue: str
    dlq_reason: str
    dlq_at: datetime
    attempt: int
    max_attempts: int
    last_error: str | None


@dataclass(frozen=True)
class DlqEntriesPage:
    entries: list[DlqSummary]
    next_before: DlqCursor | None
    """The cursor of the next page; None when this page was not full."""


@dataclass(frozen=True)
class RepeatedError:
    """One last-error message shared by recent DLQ entries / failed jobs of a kind and queue."""

    kind: str
    queue: str
    message: str | None
    jobs: int
    max_repeats_in_one_job: int
    sample_job_ids: list[int]
    places: list[str]
    """``dlq`` and/or ``failed``: where the sampled jobs sit."""
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    """When the oldest / newest sampled job of it reached the DLQ or failed."""


@dataclass(frozen=True)
class StoredDescriptor:
    """A queue or kind descriptor and how long ago a runtime last refreshed it."""

    type: str
    key: str
    descriptor_hash: str | None
    last_seen_at: datetime | None
    age_s: float | None


@dataclass(frozen=True)
class RuntimeDescriptorHashes:
    instance_id: str
    descriptor_hashes: Any
    """As the runtime wrote it (json)."""


@dataclass(frozen=True)
class StateBucket:
    """Jobs created in one minute that are now in one state."""

    bucket: datetime
    state: str
    count: int
    capped: bool = False
    """The read stopped at its cap inside this minute: this count (and the minutes before,
    which are left out) may be short."""


@dataclass(frozen=True)
class KindCount:
    """One job kind: its jobs, the queues they sit in, completions in the last hour."""

    kind: str
    job_count: int
    queue_count: int
    completed_last_hour: int
    capped: bool = False
    """A part of the read stopped at its cap for this kind: the counts are lower bounds."""


class OpsReads(Protocol):
    """Bounded, index-backed reads for operators; never a write.

    Every method runs on the connection of the caller's short read-only
    transaction (``awa_ops.session.OpsSession.read``), so one refresh is one
    snapshot and none outlives it.
    """

    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Sequence[str], *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        """``queues`` and every queue_meta queue: lag, completions in the window, pause."""
        ...

    async def completed_totals(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int] | None:
        """Completions per queue since the database began, where the engine keeps that count
        (a rate is then the difference of two reads, exact even for completions whose rows
        are gone between them); None where retention deletes rows uncounted."""
        ...

    async def recently_completed_queues(self, conn: psycopg.AsyncConnection[Any], *,
                                        within_s: float, limit: int) -> list[str]:
        """Queues that completed a job within the last ``within_s`` seconds (database
        clock), by name, at most ``limit``: a queue known only from its history has no other
        trace (``awa.known_queues``' ``recent``).  One probe per distinct queue of the
        completed rows' index, at most ``limit`` of them walked; never a scan of history."""
        ...

    async def dlq_depths_by_queue(self, conn: psycopg.AsyncConnection[Any], *, cap: int,
                                  max_queues: int) -> list[DlqDepth]:
        """DLQ entries per queue, each counted up to ``cap`` (``reason`` is None)."""
        ...

    async def dlq_depths(self, conn: psycopg.AsyncConnection[Any], *, queue: str | None = None,
                         recent_s: float = 0.0) -> list[DlqDepth]:
        """DLQ entries per queue and reason, with the newest and the recent count; deepest first."""
        ...

    async def runtime_instances(self, conn: psycopg.AsyncConnection[Any], *,
                                limit: int | None = None) -> list[RuntimeInstance]:
        """The runtime registry, leaders first, then most recently seen."""
        ...

    async def running_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                               started_before: datetime | None = None,
                               job_ids: Sequence[int] | None = None,
                               limit: int) -> list[RunningAttemptRead]:
        """Running attempts, oldest heartbeat first (only ``job_ids`` when given)."""
        ...

    async def running_counts(self, conn: psycopg.AsyncConnection[Any], *, stale_after_s: float,
                             queue: str | None = None) -> list[RunningCounts]:
        """Per queue with running attempts: counts, oldest heartbeat, stale and overdue."""
        ...

    async def cancelled_while_running(self, conn: psycopg.AsyncConnection[Any], *,
                                      window_s: float, stale_after_s: float,
                                      queue: str | None = None,
                                      limit: int) -> list[CancelledAttempt]:
        """Cancelled within ``window_s`` while running, deadline not yet passed."""
        ...

    async def unique_claim_holders(self, conn: psycopg.AsyncConnection[Any],
                                   keys: Sequence[bytes]) -> list[UniqueClaimHolder]:
        """Who holds each of these unique keys (keys nobody holds are absent)."""
        ...

    async def wedged_claims(self, conn: psycopg.AsyncConnection[Any]) -> list[WedgedClaims]:
        """Per queue: running jobs whose unique key another job holds."""
        ...

    async def superseded_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                                  queue: str | None = None,
                                  limit: int) -> list[SupersededAttempt]:
        """Running attempts whose unique key another job holds, each with its holder's state
        (the guide's unique-wedge query), at most ``limit``."""
        ...

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        """Newest jobs first matching the filter, at most ``query.page``."""
        ...

    async def job_record(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                         cap_bytes: int | None = None) -> JobRecord | None:
        """The job, or its DLQ entry, or None.  With ``cap_bytes``, args, metadata,
        errors and progress bigger than that (as JSON text) are not fetched: the record
        carries their head and size instead (``JobRecord.oversized``)."""
        ...

    async def dlq_page(self, conn: psycopg.AsyncConnection[Any],
                       query: DlqPageQuery) -> DlqEntriesPage:
        """DLQ entries newest first (``dlq_at``, ``job_id``), from the most selective index."""
        ...

    async def repeated_errors(self, conn: psycopg.AsyncConnection[Any], *,
                              queue: str | None = None, sample: int,
                              limit: int = 10) -> list[RepeatedError]:
        """Last errors shared by the newest DLQ entries and failed jobs: poison-job evidence."""
        ...

    async def descriptors(self, conn: psycopg.AsyncConnection[Any]) -> list[StoredDescriptor]:
        """Every queue and kind descriptor, by type and key."""
        ...

    async def runtime_descriptor_hashes(
            self, conn: psycopg.AsyncConnection[Any]) -> list[RuntimeDescriptorHashes]:
        """The descriptor hashes each runtime last reported."""
        ...

    async def ring_states(self, conn: psycopg.AsyncConnection[Any]) -> list[RingState]:
        """The partition rings (queue, claim, lease) and which slots hold rows; empty on an
        engine without rings.  One probe per partition (``LIMIT 1``), never a count."""
        ...

    async def state_counts(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
        """Jobs per state, DLQ entries counted as failed; a full count (cache it)."""
        ...

    async def created_timeseries(self, conn: psycopg.AsyncConnection[Any], *, minutes: int,
                                 cap: int) -> list[StateBucket]:
        """Jobs created in the last ``minutes``, per minute and current state, oldest first:
        of the newest ``cap`` jobs (by id, each table by its primary key), those created in
        the window; when the cap ends inside the window its oldest minute is ``capped``."""
        ...

    async def kind_counts(self, conn: psycopg.AsyncConnection[Any], *,
                          cap: int) -> list[KindCount]:
        """Per kind: jobs, distinct queues, completions in the last hour.  Kinds from a loose
        scan of the kind indexes; each kind's rows read up to ``cap`` a table, completed
        ones per queue up to ``cap`` (newest first); a count stopped there is ``capped``."""
        ...


# ============================================================================
# durable batch operations (awa.batch): set_priority / move_queue over a filter
# ============================================================================
class BatchOps(Protocol):
    """The operation rows, their items, and the chunked change of matched jobs.

    Only ``available`` and ``scheduled`` jobs are ever matched or changed.
    ``filter`` is the operation's filter document (kind, queue, tag, state, ids,
    created_at_gte, created_at_lt; absent or null = unset).  The caller owns
    every transaction: one scan page, or one chunk with its outcomes, per transaction.
    """

    async def batch_insert(self, conn: psycopg.AsyncConnection[Any], *, op_kind: str,
                           filter: dict[str, Any], spec: dict[str, Any],
                           submitted_by: str | None) -> dict[str, Any]:
        ...

    async def batch_list(self, conn: psycopg.AsyncConnection[Any], *, state: str | None,
                         limit: int) -> list[dict[str, Any]]:
        ...

    async def batch_get(self, conn: psycopg.AsyncConnection[Any],
                        op_id: uuid.UUID) -> dict[str, Any] | None:
        ...

    async def batch_request_cancel(self, conn: psycopg.AsyncConnection[Any],
                                   op_id: uuid.UUID) -> dict[str, Any] | None:
        """pending/scanning/running -> cancelling; None when not cancellable (or unknown)."""
        ...

    async def batch_preview(self, conn: psycopg.AsyncConnection[Any], filter: dict[str, Any],
                            *, sample: int) -> tuple[int, list[Job[Any]]]:
        """How many jobs match now, and the ``sample`` lowest ids of them."""
        ...

    async def batch_next_active(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, Any] | None:
        """The oldest active operation, locked (``SKIP LOCKED``) for the transaction."""
        ...

    async def batch_start_scan(self, conn: psycopg.AsyncConnection[Any], op: dict[str, Any],
                               runner: uuid.UUID) -> dict[str, int]:
        ...

    async def batch_scan_page(self, conn: psycopg.AsyncConnection[Any], op: dict[str, Any],
                              cursor: dict[str, int], runner: uuid.UUID,
                              page: int) -> dict[str, int] | None:
        ...

    async def batch_scanned(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID) -> None:
        ...

    async def batch_apply_chunk(self, conn: psycopg.AsyncConnection[Any], op: dict[str, Any],
                                limit: int) -> tuple[int, int, int] | None:
        """(processed, skipped, errored) of the next chunk; None when nothing is pending."""
        ...

    async def batch_finish(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID, *,
                           cancelled: bool, retention_days: float) -> dict[str, Any]:
        ...


# ============================================================================
class Engine(EnqueueOps, ExecutionOps, MaintenanceOps, AdminOps, CallbackOps, CronAdminOps,
             OpsReads, BatchOps, Protocol):
    """A storage engine: every group above."""

    name: str
    """``canonical`` or ``queue_storage``: what ``awa.runtime_storage_backends`` names."""
