"""The admin group: jobs, queues and the DLQ, behind the client's admin API and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg

from awa.job import Job, JobState


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


class AdminReads(Protocol):
    """The admin group's lookups: what an operator reads of jobs, queues and the DLQ.

    Part of ``ReadEngine``: the Rust-core reader answers them too.
    """

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

    async def queue_stats(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueStat]:
        ...

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


class AdminOps(AdminReads, Protocol):
    """Operator actions (and, from ``AdminReads``, lookups) behind the client's admin API
    and the CLI.

    Validation and metrics stay with the caller (``awa.admin``); a method
    that makes several statements runs them in one transaction (a savepoint
    when the caller holds one), so it applies all or nothing.  A move into a
    state of a job's unique mask that collides with a live holder raises
    ``UniqueConflict`` for a single job; bulk moves leave the colliding jobs
    where they were (``awa.storage.common.collisions.apply_batch_or_each``).
    """

    # -- jobs --
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

    # -- dead-letter queue --
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
