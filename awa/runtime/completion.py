"""The completion batcher: attempt outcomes written in batches.

Handlers hand their outcome to ``submit`` and return at once; one flusher
writes everything pending with one statement per outcome kind (``unnest``
of arrays), guarded by ``(id, run_lease)`` and ``state = 'running'``.  Rows
the guard rejects are stale (the attempt was cancelled, rescued or
re-claimed meanwhile): counted and ignored.  Hooks and metrics fire only
for rows whose write committed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from awa import config, lifecycle
from awa.job import JobState
from awa.runtime import recording
from awa.runtime.loops import stop_tasks
from awa.storage.canonical import execution as sql

if TYPE_CHECKING:  # pragma: no cover
    from awa.runtime.context import JobContext
    from awa.runtime.runtime import Runtime

log = logging.getLogger("awa.runtime.completion")

FLUSHERS = 2


class Outcome(enum.Enum):
    # value: (event name for hooks, state the job ends in)
    COMPLETED = ("completed", JobState.Completed)
    RETRY = ("retried", JobState.Retryable)
    SNOOZE = ("snoozed", JobState.Scheduled)
    CANCEL = ("cancelled", JobState.Cancelled)
    FAIL = ("failed", JobState.Failed)
    DLQ = ("dead_lettered", JobState.Failed)
    WAIT = ("waiting", JobState.WaitingExternal)

    @property
    def event(self) -> str:
        return self.value[0]

    @property
    def state(self) -> JobState:
        return self.value[1]


class Finished:
    """One attempt's outcome waiting to be written."""

    __slots__ = ("ctx", "outcome", "delay_s", "error", "reason", "callback_id", "result")

    def __init__(self, ctx: "JobContext", outcome: Outcome, *, delay_s: float = 0.0,
                 error: dict[str, Any] | None = None, reason: str | None = None,
                 callback_id: str | None = None, result: Any = None) -> None:
        self.ctx = ctx
        self.outcome = outcome
        self.delay_s = delay_s
        self.error = error
        self.reason = reason
        self.callback_id = callback_id
        self.result = result


def _job_id(f: Finished) -> int:
    return f.ctx.job.id


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


async def _execute(conn: psycopg.AsyncConnection, query: str, params: Any) -> psycopg.AsyncCursor:
    """Run on a tuple-row cursor: the hot path never builds dict rows."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(query, params)
    return cur


class CompletionBatcher:
    def __init__(self, runtime: "Runtime") -> None:
        self.runtime = runtime
        self.max_rows = config.COMPLETION_FLUSH_MAX_ROWS
        self.flush_interval = config.COMPLETION_FLUSH_INTERVAL_MS / 1000.0
        self._pending: list[Finished] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task] = []
        self._flushing = 0

    # -- producer side -------------------------------------------------------
    def submit(self, finished: Finished) -> None:
        self._pending.append(finished)
        self._idle.clear()
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        # Two flushers: one writes while the other's statement is in flight.
        self._tasks = [asyncio.create_task(self._run(), name=f"awa-completion-{i}")
                       for i in range(FLUSHERS)]

    async def drain(self, timeout: float) -> bool:
        """Wait until everything submitted so far is written (or ``timeout``)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def stop(self, timeout: float) -> None:
        await self.drain(timeout)
        await stop_tasks(self._tasks)
        if self._pending:
            log.warning("shutdown left %d outcome(s) unwritten; rescue will retry those jobs",
                        len(self._pending))

    async def _run(self) -> None:
        failures = 0
        while True:
            if not self._pending:
                if self._flushing == 0:
                    self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                # A short window lets the outcomes of a whole claim batch share
                # one statement (and one commit) instead of trickling out.
                if len(self._pending) < self.max_rows:
                    await asyncio.sleep(self.flush_interval)
                if not self._pending:
                    continue
            batch = self._pending[: self.max_rows]
            del self._pending[: len(batch)]
            self._flushing += 1
            try:
                await self._flush(batch)
                failures = 0
                self.runtime.health.postgres_connected = True
            except (psycopg.OperationalError, psycopg.errors.DeadlockDetected,
                    psycopg.errors.SerializationFailure) as exc:
                failures += 1
                self.runtime.health.postgres_connected = not isinstance(
                    exc, psycopg.OperationalError)
                log.warning("writing %d outcome(s) failed (%s); retrying", len(batch),
                            " ".join(str(exc).split()))
                self._pending[:0] = batch
                await asyncio.sleep(min(0.05 * 2 ** failures, 1.0))
            except Exception:  # a bug must not lose the flusher: log, drop, go on
                log.exception("writing %d outcome(s) failed; rescue will retry those jobs",
                              len(batch))
            finally:
                self._flushing -= 1

    # -- the writes ----------------------------------------------------------
    async def _flush(self, batch: list[Finished]) -> None:
        started = time.perf_counter()
        groups: dict[Outcome, list[Finished]] = {}
        for item in batch:
            groups.setdefault(item.outcome, []).append(item)
        applied: list[tuple[Outcome, list[Finished]]] = []
        stale: list[Finished] = []
        async with self.runtime.pool.connection() as conn:
            for outcome, items in groups.items():
                if len(items) > 1:
                    items.sort(key=_job_id)
                done = await self._apply(conn, outcome, items)
                if len(done) == len(items):
                    applied.append((outcome, items))
                    continue
                ok = []
                for f in items:
                    (ok if f.ctx.job.id in done else stale).append(f)
                applied.append((outcome, ok))
        recording.flushed(len(batch), time.perf_counter() - started)
        if stale:
            recording.stale_ignored(stale)
            log.debug("%d stale outcome(s) ignored", len(stale))
        emit = self.runtime.events.emit
        for outcome, ok in applied:
            if not ok:
                continue
            recording.outcomes(outcome, ok)
            state = outcome.state
            event = outcome.event
            for item in ok:
                item.ctx.job.state = state
                emit(event, item.ctx.job, item.result)

    async def _apply(self, conn: psycopg.AsyncConnection, outcome: Outcome,
                     items: list[Finished]) -> set[int]:
        ids = [f.ctx.job.id for f in items]
        leases = [f.ctx.job.run_lease for f in items]
        buffered = [f.ctx.take_buffered() for f in items]
        progress = [_jsonb(p) for p, _ in buffered]
        meta = [_jsonb(m) for _, m in buffered]
        anything_buffered = any(p is not None or m is not None for p, m in buffered)
        try:
            if outcome is Outcome.COMPLETED:
                if anything_buffered:
                    cur = await _execute(conn, sql.COMPLETE_JOBS_WITH_PROGRESS,
                                             (ids, leases, progress, meta))
                else:
                    cur = await _execute(conn, sql.COMPLETE_JOBS, (ids, leases))
            elif outcome in (Outcome.FAIL, Outcome.CANCEL):
                errors = [_jsonb(f.error) for f in items]
                cur = await _execute(conn, sql.FINALIZE_JOBS, (
                    outcome.state.value, ids, leases, errors, progress, meta))
            elif outcome is Outcome.WAIT:
                callback_ids = [f.callback_id for f in items]
                cur = await _execute(conn, sql.PARK_JOBS,
                                         (ids, leases, callback_ids, progress, meta))
            else:
                statement = {Outcome.RETRY: sql.RETRY_JOBS, Outcome.SNOOZE: sql.SNOOZE_JOBS,
                             Outcome.DLQ: sql.DEAD_LETTER_JOBS}[outcome]
                params = (ids, leases, [f.delay_s for f in items],
                          [_jsonb(f.error) for f in items], progress, meta,
                          [f.reason for f in items])
                try:
                    cur = await _execute(conn, statement, params)
                except psycopg.errors.UniqueViolation:
                    return await self._apply_one_by_one(conn, statement, items, buffered)
            return {row[0] for row in await cur.fetchall()}
        except BaseException:
            for f, (p, m) in zip(items, buffered):
                f.ctx.restore_buffered(p, m)
            raise

    async def _apply_one_by_one(self, conn: psycopg.AsyncConnection, statement: str,
                                items: list[Finished], buffered: list) -> set[int]:
        """A retry collided with a newer holder of a unique key: the rare path.

        Each row is moved on its own; a row that still collides is the
        superseded attempt and is cancelled (``rescued as duplicate``).
        """
        done: set[int] = set()
        for f, (p, m) in zip(items, buffered):
            job = f.ctx.job
            params = ([job.id], [job.run_lease], [f.delay_s], [_jsonb(f.error)],
                      [_jsonb(p)], [_jsonb(m)], [f.reason])
            try:
                async with conn.transaction():
                    cur = await _execute(conn, statement, params)
                    rows = await cur.fetchall()
            except psycopg.errors.UniqueViolation:
                entry = lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, job.attempt)
                cur = await _execute(conn, sql.CANCEL_SUPERSEDED,
                                         (Jsonb(entry), job.id, job.run_lease))
                if await cur.fetchall():
                    log.info("job %s: retry collided with a newer unique job; cancelled",
                             job.id)
                continue
            done.update(r[0] for r in rows)
        return done
