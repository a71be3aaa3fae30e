"""The execution group: claim, outcome batches guarded by ``(id, run_lease)``,
heartbeat, progress, runtime snapshot."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg

from awa.job import Job


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
