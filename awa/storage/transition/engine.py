"""The engine of a database that may be in a transition: one small composing layer.

``TransitionEngine`` owns no SQL of its own on job tables: it delegates every operation to
canonical's engine or queue storage's, or to both, by the state it keeps
(``awa.storage_transition``, read again at most every ``STORAGE_TRANSITION_REFRESH_S`` on the
connection of the next enqueue, claim or maintenance pass) and by where each attempt was
claimed:

- enqueue goes to one engine: canonical while ``canonical``, ``prepared`` or ``aborting``;
  queue storage while ``mixed_transition`` or ``active``;
- a claim, in the two-engine states, takes from the draining engine first and fills the
  batch from the other (``storage_transition_role`` may pin a runtime to one of them); a
  queue the draining engine had nothing for is not asked again until the next refresh;
- every write for an attempt (outcomes, heartbeats, progress, callbacks) goes to the engine
  that claimed it, so an attempt started in canonical completes, retries or snoozes there;
  attempts this engine never saw claimed were claimed before queue storage came into play,
  so canonical has them;
- maintenance (rescues, promotion, retention, aging, depths) runs on both while both hold
  live jobs; the admin functions that name one job ask both.

A database in no transition keeps its engine's statements: ``open_engine`` returns this layer
only for canonical databases (where it delegates to canonical, plus the one-row state read per
refresh interval) and while a transition is in progress; a database on queue storage gets
queue storage's engine itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import psycopg

from awa import config
from awa.job import Job, JobState
from awa.statements import run_async, run_sync
from awa.storage.engine import (
    ActiveCronSchedule,
    AppliedBatch,
    AttemptWrite,
    BatchOperation,
    BatchPreview,
    CallbackHolder,
    CallbackSpec,
    CallbackWait,
    CancelledAttempt,
    ChunkOutcome,
    CronFired,
    CronJobInfo,
    CronSchedule,
    Descriptor,
    DlqDepth,
    DlqEntriesPage,
    DlqEntry,
    DlqFilter,
    DlqPageQuery,
    Engine,
    EnqueueBatch,
    InsertOutcome,
    JobDump,
    JobListQuery,
    JobRecord,
    JobSummary,
    KindCount,
    KindQueueCount,
    PromoteBatch,
    PruneReport,
    PurgedBatch,
    QueueCount,
    QueueDepth,
    QueueDetail,
    QueueStat,
    RepeatedError,
    RescueBatch,
    RetryFailedResult,
    RingState,
    RunningAttemptRead,
    RunningCounts,
    RuntimeDescriptorHashes,
    RuntimeInstance,
    RuntimeSnapshot,
    ScanCursor,
    StateBucket,
    StoredDescriptor,
    SupersededAttempt,
    UniqueClaimHolder,
    UniqueHolder,
    WedgedClaims,
)
from awa.storage.transition.sql import load
from awa.storage.transition.state import (
    ABORTING,
    ACTIVE,
    MIXED,
    ROLES,
    TWO_ENGINES,
    TransitionState,
    refresh_steps,
)

if TYPE_CHECKING:
    from awa.storage.rust_core.adopt import AdoptTarget

T = TypeVar("T")
# An engine's write of a batch of attempts (complete_batch, heartbeat_batch, ...).
_AttemptsWrite = Callable[[psycopg.AsyncConnection[Any], Sequence[AttemptWrite]], Awaitable[T]]

class TransitionEngine:
    """An ``Engine`` that delegates to canonical and queue storage (module docstring)."""

    def __init__(self, canonical: Engine, state: TransitionState,
                 queue_loader: Callable[[str], Engine]) -> None:
        self.canonical = canonical
        self._load_queue = queue_loader
        self.queue: Engine | None = None
        self.state = state
        self.role = "auto"
        self._checked = time.monotonic()
        self._origin: dict[int, Engine] = {}
        self._drained_until: dict[str, float] = {}
        self._role_recorded: set[uuid.UUID] = set()
        self._apply(state)

    # --- the state -------------------------------------------------------------------
    def _apply(self, state: TransitionState | None) -> None:
        self._checked = time.monotonic()
        if state is None:
            return
        if state.state != self.state.state:
            self._drained_until.clear()
        self.state = state
        if self.queue is None and state.state in (MIXED, ABORTING, ACTIVE):
            self.queue = self._load_queue(state.queue_schema)

    def _stale(self) -> bool:
        return time.monotonic() - self._checked >= config.STORAGE_TRANSITION_REFRESH_S

    async def _fresh(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._stale():
            self._apply(await run_async(conn, refresh_steps()))

    def _fresh_sync(self, conn: psycopg.Connection[Any]) -> None:
        if self._stale():
            self._apply(run_sync(conn, refresh_steps()))

    def set_transition_role(self, role: str) -> None:
        """``start(storage_transition_role=)``: which engines this runtime claims from while
        both hold live jobs (``auto``: both)."""
        if role not in ROLES:
            raise ValueError(f"unknown storage transition role {role!r}")
        self.role = role

    @property
    def primary(self) -> Engine:
        """The engine new jobs go to (and the one shared-table operations run through)."""
        if self.queue is not None and self.state.state in (MIXED, ACTIVE):
            return self.queue
        return self.canonical

    @property
    def draining(self) -> Engine | None:
        """The other engine while both hold live jobs."""
        if self.queue is None or self.state.state not in TWO_ENGINES:
            return None
        return self.canonical if self.primary is self.queue else self.queue

    def _live(self) -> list[Engine]:
        """Engines holding live jobs, the draining one first."""
        other = self.draining
        return [self.primary] if other is None else [other, self.primary]

    def _loaded(self) -> list[Engine]:
        return [self.canonical] if self.queue is None else [self.canonical, self.queue]

    @property
    def name(self) -> str:
        return self.primary.name

    @property
    def schema(self) -> str:
        return getattr(self.primary, "schema", "awa")

    @property
    def layout_version(self) -> int | None:
        return getattr(self.primary, "layout_version", None)

    # --- enqueue ---------------------------------------------------------------------
    async def insert_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                           returning: bool = True) -> InsertOutcome:
        await self._fresh(conn)
        return await self.primary.insert_batch(conn, batch, returning)

    def insert_batch_sync(self, conn: psycopg.Connection[Any], batch: EnqueueBatch,
                          returning: bool = True) -> InsertOutcome:
        self._fresh_sync(conn)
        return self.primary.insert_batch_sync(conn, batch, returning)

    async def copy_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                         returning: bool = True) -> InsertOutcome:
        await self._fresh(conn)
        return await self.primary.copy_batch(conn, batch, returning)

    # --- claims and the attempts' writes ---------------------------------------------
    def _claim_order(self, queue: str) -> list[Engine]:
        other = self.draining
        if other is None:
            return [self.primary]
        if self.role == "canonical_drain":
            return [self.canonical]
        if self.role == "queue_storage_target":
            return [self.queue] if self.queue is not None else []
        if self._drained_until.get(queue, 0.0) > time.monotonic():
            return [self.primary]
        return [other, self.primary]

    async def claim_batch(self, conn: psycopg.AsyncConnection[Any], queue: str, limit: int,
                          deadline_ms: int | None, instance_id: uuid.UUID | None = None,
                          aging_interval_ms: int = 0) -> list[Job[Any]]:
        await self._fresh(conn)
        if self.queue is None:  # canonical only, as ever: nothing to remember
            return await self.canonical.claim_batch(conn, queue, limit, deadline_ms,
                                                    instance_id, aging_interval_ms)
        other = self.draining
        jobs: list[Job[Any]] = []
        for engine in self._claim_order(queue):
            got = await engine.claim_batch(conn, queue, limit - len(jobs), deadline_ms,
                                           instance_id, aging_interval_ms)
            if engine is other and len(got) < limit - len(jobs):
                self._drained_until[queue] = (time.monotonic()
                                              + config.STORAGE_TRANSITION_REFRESH_S)
            for job in got:
                self._origin[job.id] = engine
            jobs.extend(got)
            if len(jobs) >= limit:
                break
        return jobs

    def _holder(self, job_id: int) -> Engine:
        # Not seen claimed here: claimed before queue storage came into play, so canonical.
        return self._origin.get(job_id, self.canonical)

    def _split(self, attempts: Sequence[AttemptWrite]) -> list[tuple[Engine, list[AttemptWrite]]]:
        groups: dict[int, tuple[Engine, list[AttemptWrite]]] = {}
        for a in attempts:
            engine = self._holder(a.id)
            groups.setdefault(id(engine), (engine, []))[1].append(a)
        return list(groups.values())

    async def _outcome(self, write: Callable[[Engine], _AttemptsWrite[AppliedBatch]],
                       conn: psycopg.AsyncConnection[Any], attempts: Sequence[AttemptWrite],
                       ends: bool = True) -> AppliedBatch:
        """``write`` (an engine's method) on each engine for the attempts it claimed."""
        out = AppliedBatch()
        for engine, group in self._split(attempts):
            done = await write(engine)(conn, group)
            out.applied.extend(done.applied)
            out.superseded.extend(done.superseded)
        if ends:
            for a in attempts:
                self._origin.pop(a.id, None)
        return out

    async def _ids(self, write: Callable[[Engine], _AttemptsWrite[list[int]]],
                   conn: psycopg.AsyncConnection[Any], attempts: Sequence[AttemptWrite],
                   ends: bool = False) -> list[int]:
        out: list[int] = []
        for engine, group in self._split(attempts):
            out.extend(await write(engine)(conn, group))
        if ends:
            for a in attempts:
                self._origin.pop(a.id, None)
        return out

    async def complete_batch(self, conn: psycopg.AsyncConnection[Any],
                             attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._outcome(lambda e: e.complete_batch, conn, attempts)

    async def retry_batch(self, conn: psycopg.AsyncConnection[Any],
                          attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._outcome(lambda e: e.retry_batch, conn, attempts)

    async def snooze_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._outcome(lambda e: e.snooze_batch, conn, attempts)

    async def cancel_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._outcome(lambda e: e.cancel_batch, conn, attempts)

    async def fail_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._outcome(lambda e: e.fail_batch, conn, attempts)

    async def dead_letter_batch(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._outcome(lambda e: e.dead_letter_batch, conn, attempts)

    async def park_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        # A parked attempt lives on (waiting_external): its engine is still asked for it.
        return await self._outcome(lambda e: e.park_batch, conn, attempts, ends=False)

    async def cancel_superseded(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> list[int]:
        return await self._ids(lambda e: e.cancel_superseded, conn, attempts, ends=True)

    async def heartbeat_batch(self, conn: psycopg.AsyncConnection[Any],
                              attempts: Sequence[AttemptWrite]) -> list[int]:
        return await self._ids(lambda e: e.heartbeat_batch, conn, attempts)

    async def flush_progress_batch(self, conn: psycopg.AsyncConnection[Any],
                                   attempts: Sequence[AttemptWrite]) -> list[int]:
        return await self._ids(lambda e: e.flush_progress_batch, conn, attempts)

    async def warm_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        for engine in self._live():
            await engine.warm_up(conn)

    async def available_counts(self, conn: psycopg.AsyncConnection[Any],
                               queues: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for engine in self._live():
            for queue, n in (await engine.available_counts(conn, queues)).items():
                out[queue] = out.get(queue, 0) + n
        return out

    async def upsert_runtime_snapshot(self, conn: psycopg.AsyncConnection[Any],
                                      snapshot: RuntimeSnapshot) -> None:
        await self.primary.upsert_runtime_snapshot(conn, snapshot)
        if snapshot.instance_id not in self._role_recorded:
            await conn.execute(load("record_role"), {"role": self.role,
                                                     "instance_id": snapshot.instance_id})
            self._role_recorded.add(snapshot.instance_id)

    # --- callbacks of one attempt ----------------------------------------------------
    async def register_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, spec: CallbackSpec) -> bool:
        return await self._holder(job_id).register_callback(conn, job_id, run_lease, spec)

    async def park_for_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, callback_id: uuid.UUID) -> bool:
        return await self._holder(job_id).park_for_callback(conn, job_id, run_lease,
                                                            callback_id)

    async def poll_callback_wait(self, conn: psycopg.AsyncConnection[Any],
                                 job_id: int) -> CallbackWait | None:
        return await self._holder(job_id).poll_callback_wait(conn, job_id)

    async def _first(self, conn: psycopg.AsyncConnection[Any],
                     call: Callable[[Engine], Awaitable[T | None]]) -> T | None:
        """The first engine's answer that is not None: canonical's statements touch only its
        own tables, so it is asked first; queue storage's then find the rest."""
        await self._fresh(conn)
        for engine in self._loaded():
            found = await call(engine)
            if found is not None:
                return found
        return None

    async def complete_external(self, conn: psycopg.AsyncConnection[Any],
                                callback_id: uuid.UUID, result: Any) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.complete_external(conn, callback_id, result))

    async def fail_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                            error: dict[str, Any]) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.fail_external(conn, callback_id, error))

    async def retry_external(self, conn: psycopg.AsyncConnection[Any],
                             callback_id: uuid.UUID) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.retry_external(conn, callback_id))

    async def resume_external(self, conn: psycopg.AsyncConnection[Any],
                              callback_id: uuid.UUID, result: Any) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.resume_external(conn, callback_id, result))

    async def heartbeat_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID, timeout_s: float) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.heartbeat_callback(conn, callback_id, timeout_s))

    async def lock_open_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.lock_open_callback(conn, callback_id))

    async def find_callback(self, conn: psycopg.AsyncConnection[Any],
                            callback_id: uuid.UUID) -> CallbackHolder | None:
        return await self._first(conn, lambda e: e.find_callback(conn, callback_id))

    # --- maintenance: on every engine holding live jobs ------------------------------
    async def _each(self, conn: psycopg.AsyncConnection[Any],
                    call: Callable[[Engine], Awaitable[T]]) -> list[T]:
        await self._fresh(conn)
        return [await call(engine) for engine in self._live()]

    @staticmethod
    def _rescues(parts: list[RescueBatch]) -> RescueBatch:
        out = RescueBatch()
        for p in parts:
            out.found += p.found
            out.rescued.extend(p.rescued)
            out.left += p.left
            out.statements += p.statements
        return out

    async def rescue_stale_heartbeats(
            self, conn: psycopg.AsyncConnection[Any], *, staleness_s: float, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return self._rescues(await self._each(conn, lambda e: e.rescue_stale_heartbeats(
            conn, staleness_s=staleness_s, limit=limit, dlq_enabled=dlq_enabled)))

    async def rescue_expired_deadlines(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return self._rescues(await self._each(conn, lambda e: e.rescue_expired_deadlines(
            conn, limit=limit, dlq_enabled=dlq_enabled)))

    async def rescue_callback_timeouts(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return self._rescues(await self._each(conn, lambda e: e.rescue_callback_timeouts(
            conn, limit=limit, dlq_enabled=dlq_enabled)))

    async def promote_due(self, conn: psycopg.AsyncConnection[Any], *,
                          limit: int) -> PromoteBatch:
        out = PromoteBatch()
        for p in await self._each(conn, lambda e: e.promote_due(conn, limit=limit)):
            out.found += p.found
            out.promoted.extend(p.promoted)
            out.duplicates.extend(p.duplicates)
            out.statements += p.statements
        return out

    async def purge_finalized(self, conn: psycopg.AsyncConnection[Any], *, state: str,
                              older_than_s: float, limit: int, queue: str | None = None,
                              exclude_queues: Sequence[str] = ()) -> int:
        return sum(await self._each(conn, lambda e: e.purge_finalized(
            conn, state=state, older_than_s=older_than_s, limit=limit, queue=queue,
            exclude_queues=exclude_queues)))

    async def age_priorities(self, conn: psycopg.AsyncConnection[Any], *,
                             default_interval_ms: int, queue_intervals_ms: Mapping[str, int],
                             limit: int) -> int:
        return sum(await self._each(conn, lambda e: e.age_priorities(
            conn, default_interval_ms=default_interval_ms,
            queue_intervals_ms=queue_intervals_ms, limit=limit)))

    async def rotate_and_prune(self, conn: psycopg.AsyncConnection[Any], *,
                               completed_retention_s: float,
                               failed_retention_s: float) -> PruneReport:
        # Queue storage's rings turn while it holds anything; canonical has none.
        return await (self.queue or self.canonical).rotate_and_prune(
            conn, completed_retention_s=completed_retention_s,
            failed_retention_s=failed_retention_s)

    async def fire_cron(self, conn: psycopg.AsyncConnection[Any], schedule: ActiveCronSchedule,
                        slots: Sequence[datetime]) -> CronFired:
        await self._fresh(conn)
        return await self.primary.fire_cron(conn, schedule, slots)

    async def queue_depths(self, conn: psycopg.AsyncConnection[Any], *,
                           cap: int | None = None) -> list[QueueDepth]:
        merged: dict[str, QueueDepth] = {}
        for depths in await self._each(conn, lambda e: e.queue_depths(conn, cap=cap)):
            for d in depths:
                seen = merged.get(d.queue)
                if seen is None:
                    merged[d.queue] = d
                    continue
                depth = dict(seen.depth)
                for state, n in d.depth.items():
                    depth[state] = depth.get(state, 0) + n
                oldest = [t for t in (seen.oldest_available_at, d.oldest_available_at) if t]
                lags = [x for x in (seen.lag_s, d.lag_s) if x is not None]
                merged[d.queue] = QueueDepth(
                    d.queue, depth, min(oldest) if oldest else None,
                    max(lags) if lags else None, max(seen.dlq_depth, d.dlq_depth),
                    seen.capped | d.capped)
        return [merged[q] for q in sorted(merged)]

    # --- admin and reads ---------------------------------------------------------------
    @property
    def reader(self) -> Engine:
        """Who answers reads: queue storage's reads cover canonical's tables too (its layout
        is laid over them, and its awa.jobs view has both), so once it is laid out it does."""
        return self.queue or self.canonical

    async def _reader(self, conn: psycopg.AsyncConnection[Any]) -> Engine:
        await self._fresh(conn)
        return self.reader

    async def get_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        return await (await self._reader(conn)).get_job(conn, job_id)

    async def dump_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> JobDump | None:
        return await (await self._reader(conn)).dump_job(conn, job_id)

    async def job_record(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                         cap_bytes: int | None = None) -> JobRecord | None:
        return await (await self._reader(conn)).job_record(conn, job_id, cap_bytes=cap_bytes)

    async def list_jobs(self, conn: psycopg.AsyncConnection[Any], *,
                        state: JobState | None = None, kind: str | None = None,
                        queue: str | None = None, tag: str | None = None,
                        limit: int = 100, before_id: int | None = None) -> list[Job[Any]]:
        return await (await self._reader(conn)).list_jobs(
            conn, state=state, kind=kind, queue=queue, tag=tag, limit=limit,
            before_id=before_id)

    async def queue_stats(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueStat]:
        return await (await self._reader(conn)).queue_stats(conn)

    async def state_counts(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
        return await (await self._reader(conn)).state_counts(conn)

    async def running_counts(self, conn: psycopg.AsyncConnection[Any], *, stale_after_s: float,
                             queue: str | None = None) -> list[RunningCounts]:
        return await (await self._reader(conn)).running_counts(
            conn, stale_after_s=stale_after_s, queue=queue)

    async def running_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                               started_before: datetime | None = None,
                               job_ids: Sequence[int] | None = None,
                               limit: int) -> list[RunningAttemptRead]:
        return await (await self._reader(conn)).running_attempts(
            conn, started_before=started_before, job_ids=job_ids, limit=limit)

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        return await (await self._reader(conn)).job_page(conn, query)

    # Writes to one job: wherever it is (each engine's statement touches its own tables).
    async def cancel(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.cancel(conn, job_id))

    async def retry(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        return await self._first(conn, lambda e: e.retry(conn, job_id))

    async def move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                 reason: str) -> DlqEntry | None:
        return await self._first(conn, lambda e: e.move_failed_to_dlq(conn, job_id, reason))

    async def retry_from_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                             run_at: datetime | None = None, priority: int | None = None,
                             queue: str | None = None) -> Job[Any] | None:
        await self._fresh(conn)
        return await self.primary.retry_from_dlq(conn, job_id, run_at=run_at,
                                                 priority=priority, queue=queue)

    async def trigger_cron_job(self, conn: psycopg.AsyncConnection[Any],
                               name: str) -> Job[Any] | None:
        await self._fresh(conn)
        return await self.primary.trigger_cron_job(conn, name)

    # Writes to many jobs: on each engine laid out.
    async def _all(self, conn: psycopg.AsyncConnection[Any],
                   call: Callable[[Engine], Awaitable[T]]) -> list[T]:
        await self._fresh(conn)
        return [await call(engine) for engine in self._loaded()]

    async def retry_failed(self, conn: psycopg.AsyncConnection[Any], *, kind: str | None = None,
                           queue: str | None = None) -> RetryFailedResult:
        parts = await self._all(conn, lambda e: e.retry_failed(conn, kind=kind, queue=queue))
        return RetryFailedResult(jobs=[j for r in parts for j in r.jobs],
                                 matched=sum(r.matched for r in parts),
                                 skipped=sum(r.skipped for r in parts))

    async def discard_failed(self, conn: psycopg.AsyncConnection[Any], kind: str) -> int:
        return sum(await self._all(conn, lambda e: e.discard_failed(conn, kind)))

    async def drain_queue(self, conn: psycopg.AsyncConnection[Any],
                          queue: str) -> list[KindQueueCount]:
        return [c for part in await self._all(conn, lambda e: e.drain_queue(conn, queue))
                for c in part]

    async def bulk_move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], *,
                                      kind: str | None = None, queue: str | None = None,
                                      reason: str) -> list[KindQueueCount]:
        return [c for part in await self._all(conn, lambda e: e.bulk_move_failed_to_dlq(
            conn, kind=kind, queue=queue, reason=reason)) for c in part]

    # --- the reads not composed above: the reader -------------------------------------
    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Sequence[str], *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        return await self.reader.queue_details(conn, queues, since=since, until=until, cap=cap)

    async def completed_totals(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int] | None:
        return await self.reader.completed_totals(conn)

    async def recently_completed_queues(self, conn: psycopg.AsyncConnection[Any], *,
                                        within_s: float, limit: int) -> list[str]:
        return await self.reader.recently_completed_queues(conn, within_s=within_s, limit=limit)

    async def dlq_depths_by_queue(self, conn: psycopg.AsyncConnection[Any], *, cap: int,
                                  max_queues: int) -> list[DlqDepth]:
        return await self.reader.dlq_depths_by_queue(conn, cap=cap, max_queues=max_queues)

    async def dlq_depths(self, conn: psycopg.AsyncConnection[Any], *, queue: str | None = None,
                         recent_s: float = 0.0) -> list[DlqDepth]:
        return await self.reader.dlq_depths(conn, queue=queue, recent_s=recent_s)

    async def runtime_instances(self, conn: psycopg.AsyncConnection[Any], *,
                                limit: int | None = None) -> list[RuntimeInstance]:
        return await self.reader.runtime_instances(conn, limit=limit)

    async def cancelled_while_running(self, conn: psycopg.AsyncConnection[Any], *, window_s: float,
                                      stale_after_s: float, queue: str | None = None,
                                      limit: int) -> list[CancelledAttempt]:
        return await self.reader.cancelled_while_running(conn, window_s=window_s,
                                                         stale_after_s=stale_after_s, queue=queue,
                                                         limit=limit)

    async def unique_claim_holders(self, conn: psycopg.AsyncConnection[Any],
                                   keys: Sequence[bytes]) -> list[UniqueClaimHolder]:
        return await self.reader.unique_claim_holders(conn, keys)

    async def wedged_claims(self, conn: psycopg.AsyncConnection[Any]) -> list[WedgedClaims]:
        return await self.reader.wedged_claims(conn)

    async def superseded_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                                  queue: str | None = None, limit: int) -> list[SupersededAttempt]:
        return await self.reader.superseded_attempts(conn, queue=queue, limit=limit)

    async def dlq_page(self, conn: psycopg.AsyncConnection[Any],
                       query: DlqPageQuery) -> DlqEntriesPage:
        return await self.reader.dlq_page(conn, query)

    async def repeated_errors(self, conn: psycopg.AsyncConnection[Any], *, queue: str | None = None,
                              sample: int, limit: int = 10) -> list[RepeatedError]:
        return await self.reader.repeated_errors(conn, queue=queue, sample=sample, limit=limit)

    async def descriptors(self, conn: psycopg.AsyncConnection[Any]) -> list[StoredDescriptor]:
        return await self.reader.descriptors(conn)

    async def runtime_descriptor_hashes(self, conn: psycopg.AsyncConnection[Any]
                                       ) -> list[RuntimeDescriptorHashes]:
        return await self.reader.runtime_descriptor_hashes(conn)

    async def ring_states(self, conn: psycopg.AsyncConnection[Any]) -> list[RingState]:
        return await self.reader.ring_states(conn)

    async def created_timeseries(self, conn: psycopg.AsyncConnection[Any], *, minutes: int,
                                 cap: int) -> list[StateBucket]:
        return await self.reader.created_timeseries(conn, minutes=minutes, cap=cap)

    async def kind_counts(self, conn: psycopg.AsyncConnection[Any], *, cap: int) -> list[KindCount]:
        return await self.reader.kind_counts(conn, cap=cap)

    async def dlq_depth(self, conn: psycopg.AsyncConnection[Any], *,
                        queue: str | None = None) -> int:
        return await self.reader.dlq_depth(conn, queue=queue)

    async def dlq_depth_by_queue(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueCount]:
        return await self.reader.dlq_depth_by_queue(conn)

    async def get_dlq_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> DlqEntry | None:
        return await self.reader.get_dlq_job(conn, job_id)

    async def list_dlq(self, conn: psycopg.AsyncConnection[Any], where: DlqFilter,
                       limit: int = 100) -> list[DlqEntry]:
        return await self.reader.list_dlq(conn, where, limit)

    async def batch_preview(self, conn: psycopg.AsyncConnection[Any], filter: dict[str, Any], *,
                            sample: int) -> BatchPreview:
        return await self.reader.batch_preview(conn, filter, sample=sample)

    # --- the rest: the primary engine --------------------------------------------------
    # Writes to the shared tables (queue_meta, the DLQ, cron, runtimes, descriptors), what
    # brings a job back to life (a DLQ retry, a batch operation's change) and the unique-key
    # lookups of enqueue go where new jobs go.
    async def pause_queue(self, conn: psycopg.AsyncConnection[Any], queue: str,
                          paused_by: str | None = None) -> None:
        return await self.primary.pause_queue(conn, queue, paused_by)

    async def resume_queue(self, conn: psycopg.AsyncConnection[Any], queue: str) -> None:
        return await self.primary.resume_queue(conn, queue)

    async def purge_dlq(self, conn: psycopg.AsyncConnection[Any],
                        where: DlqFilter) -> list[QueueCount]:
        return await self.primary.purge_dlq(conn, where)

    async def purge_dlq_job(self, conn: psycopg.AsyncConnection[Any],
                            job_id: int) -> list[QueueCount]:
        return await self.primary.purge_dlq_job(conn, job_id)

    async def bulk_retry_from_dlq(self, conn: psycopg.AsyncConnection[Any],
                                  where: DlqFilter) -> list[QueueCount]:
        return await self.primary.bulk_retry_from_dlq(conn, where)

    async def list_cron_jobs(self, conn: psycopg.AsyncConnection[Any]) -> list[CronJobInfo]:
        return await self.primary.list_cron_jobs(conn)

    async def get_cron_job(self, conn: psycopg.AsyncConnection[Any],
                           name: str) -> CronJobInfo | None:
        return await self.primary.get_cron_job(conn, name)

    async def upsert_cron_jobs(self, conn: psycopg.AsyncConnection[Any],
                               schedules: list[CronSchedule]) -> int:
        return await self.primary.upsert_cron_jobs(conn, schedules)

    async def delete_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        return await self.primary.delete_cron_job(conn, name)

    async def pause_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str,
                             paused_by: str | None) -> bool:
        return await self.primary.pause_cron_job(conn, name, paused_by)

    async def resume_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        return await self.primary.resume_cron_job(conn, name)

    async def list_active_cron_jobs(self,
                                    conn: psycopg.AsyncConnection[Any]) -> list[ActiveCronSchedule]:
        return await self.primary.list_active_cron_jobs(conn)

    async def purge_aged_dlq(self, conn: psycopg.AsyncConnection[Any], *, older_than_s: float,
                             limit: int, queue: str | None = None,
                             exclude_queues: Sequence[str] = ()) -> PurgedBatch:
        return await self.primary.purge_aged_dlq(conn, older_than_s=older_than_s, limit=limit,
                                                 queue=queue, exclude_queues=exclude_queues)

    async def purge_unseen_runtimes(self, conn: psycopg.AsyncConnection[Any], *,
                                    older_than_s: float, limit: int) -> int:
        return await self.primary.purge_unseen_runtimes(conn, older_than_s=older_than_s,
                                                        limit=limit)

    async def purge_unseen_descriptors(self, conn: psycopg.AsyncConnection[Any], *,
                                       catalogue: Literal["queues", "kinds"], older_than_s: float,
                                       limit: int) -> int:
        return await self.primary.purge_unseen_descriptors(conn, catalogue=catalogue,
                                                           older_than_s=older_than_s, limit=limit)

    async def upsert_descriptors(self, conn: psycopg.AsyncConnection[Any], *,
                                 queues: Sequence[Descriptor], kinds: Sequence[Descriptor]) -> int:
        return await self.primary.upsert_descriptors(conn, queues=queues, kinds=kinds)

    async def set_runtime_descriptor_hashes(self, conn: psycopg.AsyncConnection[Any],
                                            instance_id: uuid.UUID,
                                            hashes: Mapping[str, Any]) -> bool:
        return await self.primary.set_runtime_descriptor_hashes(conn, instance_id, hashes)

    async def unique_holder(self, conn: psycopg.AsyncConnection[Any],
                            key: bytes) -> UniqueHolder | None:
        return await self.primary.unique_holder(conn, key)

    def unique_holder_sync(self, conn: psycopg.Connection[Any], key: bytes) -> UniqueHolder | None:
        return self.primary.unique_holder_sync(conn, key)

    async def batch_insert(self, conn: psycopg.AsyncConnection[Any], *, op_kind: str,
                           filter: dict[str, Any], spec: dict[str, Any],
                           submitted_by: str | None) -> BatchOperation:
        return await self.primary.batch_insert(conn, op_kind=op_kind, filter=filter, spec=spec,
                                               submitted_by=submitted_by)

    async def batch_list(self, conn: psycopg.AsyncConnection[Any], *, state: str | None,
                         limit: int) -> list[BatchOperation]:
        return await self.primary.batch_list(conn, state=state, limit=limit)

    async def batch_get(self, conn: psycopg.AsyncConnection[Any],
                        op_id: uuid.UUID) -> BatchOperation | None:
        return await self.primary.batch_get(conn, op_id)

    async def batch_request_cancel(self, conn: psycopg.AsyncConnection[Any],
                                   op_id: uuid.UUID) -> BatchOperation | None:
        return await self.primary.batch_request_cancel(conn, op_id)

    async def batch_next_active(self, conn: psycopg.AsyncConnection[Any]) -> BatchOperation | None:
        return await self.primary.batch_next_active(conn)

    async def batch_start_scan(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                               runner: uuid.UUID) -> ScanCursor:
        return await self.primary.batch_start_scan(conn, op, runner)

    async def batch_scan_page(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                              cursor: ScanCursor, runner: uuid.UUID,
                              page: int) -> ScanCursor | None:
        return await self.primary.batch_scan_page(conn, op, cursor, runner, page)

    async def batch_scanned(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID) -> None:
        return await self.primary.batch_scanned(conn, op_id)

    async def batch_apply_chunk(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                                limit: int) -> ChunkOutcome | None:
        return await self.primary.batch_apply_chunk(conn, op, limit)

    async def batch_finish(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID, *,
                           cancelled: bool, retention_days: float) -> BatchOperation:
        return await self.primary.batch_finish(conn, op_id, cancelled=cancelled,
                                               retention_days=retention_days)

    # --- awa adopt ---------------------------------------------------------------------
    # ``awa adopt`` writes the staged rows through ``open_engine``'s engine, which on the
    # canonical database it lays out is this layer: canonical's engine is the target.
    async def adopt_staged(self, conn: psycopg.AsyncConnection[Any], staging: str,
                           next_id: int) -> None:
        await self._adopt_target().adopt_staged(conn, staging, next_id)

    async def adopted_counts(self, conn: psycopg.AsyncConnection[Any]
                             ) -> tuple[dict[str, int], dict[str, int]]:
        return await self._adopt_target().adopted_counts(conn)

    def _adopt_target(self) -> AdoptTarget:
        # Canonical's engine class is an AdoptTarget; the Engine protocol does not say so.
        return cast("AdoptTarget", self.primary)

    async def clean_for_tests(self, conn: psycopg.AsyncConnection[Any]) -> None:
        for engine in self._loaded():
            await engine.clean_for_tests(conn)


if TYPE_CHECKING:
    # The static check that the layer is every group of the seam (and what ``awa adopt``
    # needs of canonical's engine): mypy fails here when a member goes missing or drifts.
    _ENGINE: type[Engine] = TransitionEngine
    _ADOPT_TARGET: type[AdoptTarget] = TransitionEngine

__all__ = ["TransitionEngine"]
