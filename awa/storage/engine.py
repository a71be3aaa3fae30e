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

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

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
                          deadline_ms: int) -> list[Job[Any]]:
        """Claim up to ``limit`` available jobs of ``queue`` (none when it is paused) in
        dispatch order (priority, run_at, id), skipping rows other claimers hold.

        Each claimed job is ``running`` with ``attempt`` and ``run_lease`` one
        higher, a fresh heartbeat and ``deadline_at = now() + deadline_ms``.
        The jobs come back with raw (undecoded) args.
        """
        ...

    async def complete_batch(self, conn: psycopg.AsyncConnection[Any],
                             attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        """running -> completed."""
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
    result: dict[str, Any] | None
    """The stored ``CALLBACK_RESULT_KEY`` record, if any."""


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
        """Store the callback on the attempt ``(job_id, run_lease)`` while it runs; False if stale."""
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
                                result: dict[str, Any]) -> Job[Any] | None:
        """``open → completed``, storing ``result`` under ``CALLBACK_RESULT_KEY``."""
        ...

    async def fail_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                            error: dict[str, Any]) -> Job[Any] | None:
        """``open → failed``, appending ``error`` (its ``attempt`` filled in) to the errors."""
        ...

    async def retry_external(self, conn: psycopg.AsyncConnection[Any],
                             callback_id: uuid.UUID) -> Job[Any] | None:
        """``open → available`` with attempt 0 and the callback cleared; wakes the queue at commit."""
        ...

    async def resume_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                              result: dict[str, Any]) -> Job[Any] | None:
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
class CronJobInfo:
    """A stored schedule with its firing and pause state, for ``awa cron list``."""

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
class OpsReads(Protocol):
    """Bounded, index-backed reads for operators; never a write."""


# ============================================================================
class Engine(EnqueueOps, ExecutionOps, MaintenanceOps, AdminOps, CallbackOps, CronAdminOps,
             OpsReads, Protocol):
    """A storage engine: every group above."""

    name: str
    """``canonical`` or ``queue_storage``: what ``awa.runtime_storage_backends`` names."""
