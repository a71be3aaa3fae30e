"""The completion batcher: attempt outcomes written in batches.

Handlers hand their outcome to ``submit`` and return at once; one flusher
writes everything pending with one engine call (one statement) per outcome
kind, guarded by ``(id, run_lease)`` and ``state = 'running'``.

An outcome not yet written is an attempt still open in the database, so the
outcomes waiting here are bounded: while a whole batch (``max_rows``) waits,
``backlogged`` holds the dispatchers' claims back (``wait_for_room``).  With
every slot busy and a batch waiting, a runtime holds at most its slots plus
one batch of attempts open, however far the flushers fall behind.  Rows the
guard rejects are stale (the attempt was cancelled, rescued or re-claimed
meanwhile): counted and ignored.  Hooks and metrics fire only
for rows whose write committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from awa import config, recording
from awa.outcome import Outcome
from awa.runtime.events import EventHooks
from awa.runtime.health import Health
from awa.runtime.loops import stop_tasks
from awa.runtime.outcome import Finished
from awa.storage.engine import AppliedBatch, AttemptWrite, Engine

if TYPE_CHECKING:  # pragma: no cover
    from psycopg_pool import AsyncConnectionPool

log = logging.getLogger("awa.runtime.completion")

FLUSHERS = 2


def _job_id(f: Finished) -> int:
    return f.ctx.job.id


class CompletionBatcher:
    """Writes the outcomes ``submit`` takes through ``engine`` on ``pool``; fires ``events``
    for the rows whose write committed; tells ``health`` whether the database answers."""

    def __init__(self, *, pool: AsyncConnectionPool, engine: Engine, health: Health,
                 events: EventHooks) -> None:
        self.pool = pool
        self.engine = engine
        self.health = health
        self.events = events
        self.max_rows = config.COMPLETION_FLUSH_MAX_ROWS
        self.flush_interval = config.COMPLETION_FLUSH_INTERVAL_MS / 1000.0
        self._pending: list[Finished] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._flushing = 0
        self._batches_in_write: list[list[Finished]] = []  # taken by a flusher, not yet committed
        self._room = asyncio.Event()
        self._room.set()

    # -- producer side -------------------------------------------------------
    def submit(self, finished: Finished) -> None:
        self._pending.append(finished)
        self._idle.clear()
        self._wake.set()
        if self.unflushed >= self.max_rows:
            self._room.clear()

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def unflushed(self) -> int:
        """Outcomes whose attempts are still open in the database: waiting or being written."""
        return len(self._pending) + sum(len(b) for b in self._batches_in_write)

    def unflushed_attempts(self) -> list[tuple[int, int]]:
        """(job id, run_lease) of every outcome not yet committed: its attempt is still
        open in the database, and the heartbeat keeps it alive until it is written (a
        flush that waits longer than the heartbeat staleness must not have its attempts
        rescued and run again)."""
        return [(f.ctx.job.id, f.ctx.job.run_lease)
                for batch in (self._pending, *self._batches_in_write) for f in batch]

    @property
    def backlogged(self) -> bool:
        """A whole batch waits unwritten: claim no more until it is written."""
        return self.unflushed >= self.max_rows

    async def wait_for_room(self, timeout: float) -> None:
        """Until fewer than a batch of outcomes wait (or ``timeout``)."""
        try:
            await asyncio.wait_for(self._room.wait(), timeout)
        except TimeoutError:
            pass

    def _update_room(self) -> None:
        if self.backlogged:
            self._room.clear()
        else:
            self._room.set()

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
        except TimeoutError:
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
            self._batches_in_write.append(batch)
            try:
                await self._flush(batch)
                failures = 0
                self.health.postgres_connected = True
            except (psycopg.OperationalError, psycopg.errors.DeadlockDetected,
                    psycopg.errors.SerializationFailure) as exc:
                failures += 1
                self.health.postgres_connected = not isinstance(
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
                self._batches_in_write.remove(batch)
                self._update_room()

    # -- the writes ----------------------------------------------------------
    async def _flush(self, batch: list[Finished]) -> None:
        started = time.perf_counter()
        groups: dict[Outcome, list[Finished]] = {}
        for item in batch:
            groups.setdefault(item.outcome, []).append(item)
        applied: list[tuple[Outcome, list[Finished]]] = []
        stale: list[Finished] = []
        async with self.pool.connection() as conn:
            for outcome, items in groups.items():
                if len(items) > 1:
                    items.sort(key=_job_id)
                result = await self._apply(conn, outcome, items)
                if len(result.applied) == len(items):
                    applied.append((outcome, items))
                    continue
                # Superseded attempts (cancelled as duplicates) count as stale,
                # like any other write of an attempt that is no longer current.
                done = set(result.applied)
                ok: list[Finished] = []
                for f in items:
                    (ok if f.ctx.job.id in done else stale).append(f)
                applied.append((outcome, ok))
        recording.flushed(len(batch), time.perf_counter() - started)
        if stale:
            recording.stale_ignored(stale)
            log.debug("%d stale outcome(s) ignored", len(stale))
        emit = self.events.emit
        for outcome, ok in applied:
            if not ok:
                continue
            recording.outcomes(outcome, ok)
            state = outcome.state
            event = outcome.event
            for item in ok:
                item.ctx.job.state = state
                emit(event, item.ctx.job, item.result)

    async def _apply(self, conn: psycopg.AsyncConnection[Any], outcome: Outcome,
                     items: list[Finished]) -> AppliedBatch:
        """One engine call for one outcome kind; the buffered progress and metadata
        ride along, and are put back when the write fails."""
        attempts: list[AttemptWrite] = []
        append = attempts.append
        for f in items:
            ctx = f.ctx
            job = ctx.job
            progress, meta = ctx.take_buffered()
            append(AttemptWrite(job.id, job.run_lease, progress, meta, f.error, f.delay_s,
                                f.reason, f.callback_id, job.attempt))
        try:
            return await _WRITES[outcome](self.engine, conn, attempts)
        except BaseException:
            for f, a in zip(items, attempts):
                f.ctx.restore_buffered(a.progress, a.metadata)
            raise


_Write = Callable[[Engine, "psycopg.AsyncConnection[Any]", Sequence[AttemptWrite]],
                  Awaitable[AppliedBatch]]

# The engine method that writes each outcome kind.
_WRITES: dict[Outcome, _Write] = {
    Outcome.COMPLETED: lambda e, c, a: e.complete_batch(c, a),
    Outcome.RETRY: lambda e, c, a: e.retry_batch(c, a),
    Outcome.SNOOZE: lambda e, c, a: e.snooze_batch(c, a),
    Outcome.CANCEL: lambda e, c, a: e.cancel_batch(c, a),
    Outcome.FAIL: lambda e, c, a: e.fail_batch(c, a),
    Outcome.DLQ: lambda e, c, a: e.dead_letter_batch(c, a),
    Outcome.WAIT: lambda e, c, a: e.park_batch(c, a),
}
