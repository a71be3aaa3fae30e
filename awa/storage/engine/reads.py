"""The ops read group (``OpsReads``): the bounded, index-backed reads awa_ops and awa_tui show
(docs/architecture.md §10, §11), never a write."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg

from awa.job import Job


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
