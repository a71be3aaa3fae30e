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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg

from awa.job import Job, JobState


# ============================================================================
# enqueue: insert batch, COPY batch, unique-holder lookup
# ============================================================================
@dataclass
class EnqueueBatch:
    """Validated, encoded columns of the rows one statement writes.

    Built by ``awa.storage.canonical.enqueue.build_batch`` before anything is
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
class ExecutionOps(Protocol):
    """The worker runtime's hot path; every method is one statement per batch."""


# ============================================================================
# maintenance: rescues, promotion, retention, aging, cron CAS, descriptors,
# queue depth / lag
# ============================================================================
class MaintenanceOps(Protocol):
    """What the elected leader runs; every write is guarded against a second leader."""


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
    where they were (``awa.storage.canonical.collisions.apply_batch_or_each``).
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
                        limit: int = 100) -> list[Job[Any]]:
        """Newest first."""
        ...

    async def cancel(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        """Cancel a job that has not finished; ``None`` when none or already finished.

        A running or waiting_external attempt is told at commit through
        ``NOTIFY "awa:cancel"`` with ``{"job_id", "run_lease"}``.
        """
        ...

    async def retry(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        """A failed or cancelled job back to available with a fresh attempt budget."""
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
        """Cancel every job of the queue still waiting to run; running ones finish."""
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


# ============================================================================
# callbacks: register, resolve, complete / fail / retry / resume / heartbeat
# ============================================================================
class CallbackOps(Protocol):
    """External-wait jobs: the attempt parks until a callback resolves it."""


# ============================================================================
# ops read side: what awa_ops and awa_tui show
# ============================================================================
class OpsReads(Protocol):
    """Bounded, index-backed reads for operators; never a write."""


# ============================================================================
class Engine(EnqueueOps, ExecutionOps, MaintenanceOps, AdminOps, CallbackOps, OpsReads, Protocol):
    """A storage engine: every group above."""

    name: str
    """``canonical`` or ``queue_storage``: what ``awa.runtime_storage_backends`` names."""
