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

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, Sequence

import psycopg

from awa.job import Job


# ============================================================================
# enqueue: insert batch, COPY batch, unique-holder lookup
# ============================================================================
class EnqueueOps(Protocol):
    """Producer side: appends jobs in the caller's transaction."""


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
class AdminOps(Protocol):
    """Operator actions and lookups behind the client's admin API and the CLI."""


# ============================================================================
# callbacks: register, resolve, complete / fail / retry / resume / heartbeat
# ============================================================================
class CallbackOps(Protocol):
    """External-wait jobs: the attempt parks until a callback resolves it."""


# ============================================================================
# ops read side: what awa_ops and awa_tui show
# ============================================================================
READ_DEPTH_STATES: tuple[str, ...] = ("available", "scheduled", "retryable", "running",
                                      "waiting_external")
"""The non-terminal states: what a queue's depth counts (terminal rows are history)."""


@dataclass(frozen=True)
class QueueDepth:
    """Rows of one (queue, state) pair, counted up to a cap."""

    queue: str
    state: str
    count: int | None
    """None when the pair exists but its state was not asked for."""
    capped: bool = False
    """The count reached the cap: at least this many."""


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
class JobListQuery:
    """The console's job screen filter; ``window`` bounds the rows kind/tag filters search."""

    state: str | None = None
    queue: str | None = None
    kind: str | None = None
    tag: str | None = None
    page: int = 100
    window: int = 5_000
    max_pairs: int = 4_000

    @property
    def post_filtered(self) -> bool:
        """Kind and tag have no index of their own: they filter within the window."""
        return bool(self.kind or self.tag)


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


@dataclass(frozen=True)
class JobRecord:
    """One job, from the live tables or from the DLQ (``dlq_reason`` set)."""

    job: Job[Any]
    dlq_reason: str | None = None
    dlq_at: datetime | None = None

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


@dataclass(frozen=True)
class Descriptor:
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


class OpsReads(Protocol):
    """Bounded, index-backed reads for operators; never a write.

    Every method runs on the connection of the caller's short read-only
    transaction (``awa_ops.session.OpsSession.read``), so one refresh is one
    snapshot and none outlives it.
    """

    async def queue_depths(self, conn: psycopg.AsyncConnection[Any], *,
                           states: Sequence[str] = READ_DEPTH_STATES, cap: int,
                           max_pairs: int) -> list[QueueDepth]:
        """Every (queue, state) pair with rows; those of ``states`` counted up to ``cap``."""
        ...

    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Sequence[str], *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        """``queues`` and every queue_meta queue: lag, completions in the window, pause."""
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

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        """Newest jobs first matching the filter, at most ``query.page``."""
        ...

    async def job_record(self, conn: psycopg.AsyncConnection[Any],
                         job_id: int) -> JobRecord | None:
        """The job, or its DLQ entry, or None."""
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

    async def descriptors(self, conn: psycopg.AsyncConnection[Any]) -> list[Descriptor]:
        """Every queue and kind descriptor, by type and key."""
        ...

    async def runtime_descriptor_hashes(
            self, conn: psycopg.AsyncConnection[Any]) -> list[RuntimeDescriptorHashes]:
        """The descriptor hashes each runtime last reported."""
        ...


# ============================================================================
class Engine(EnqueueOps, ExecutionOps, MaintenanceOps, AdminOps, CallbackOps, OpsReads, Protocol):
    """A storage engine: every group above."""

    name: str
    """``canonical`` or ``queue_storage``: what ``awa.runtime_storage_backends`` names."""
