"""One batched heartbeat per interval for every attempt this process runs.

The heartbeat keeps each claim alive (rescue treats a heartbeat older than
``heartbeat_staleness`` as a dead worker) and carries the progress and
metadata handlers buffered since the last one.  An attempt the update no
longer matches is not ours any more (cancelled or rescued): its handler's
cancel flag is flipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg

from awa import config, recording
from awa.runtime.context import JobContext
from awa.runtime.health import Health
from awa.runtime.loops import BackgroundLoop, every
from awa.storage.engine import AttemptWrite, Engine

if TYPE_CHECKING:  # pragma: no cover
    from psycopg_pool import AsyncConnectionPool

log = logging.getLogger("awa.runtime.heartbeat")


class Heartbeat(BackgroundLoop):
    """The heartbeat of the attempts in ``in_flight`` and of those in ``unflushed`` (outcomes
    the completion batcher has not written yet)."""

    task_name = "awa-heartbeat"

    def __init__(self, *, pool: AsyncConnectionPool, engine: Engine, health: Health,
                 in_flight: dict[tuple[int, int], JobContext],
                 unflushed: Callable[[], list[tuple[int, int]]], interval_ms: float) -> None:
        self.pool = pool
        self.engine = engine
        self.health = health
        self.in_flight = in_flight
        self.unflushed = unflushed
        self.interval = interval_ms / 1000.0
        self.last_beat_at = time.monotonic()

    def alive(self) -> bool:
        """Running, and beat within three intervals (plus a second)."""
        return (self.task is not None and not self.task.done()
                and time.monotonic() - self.last_beat_at < 3 * self.interval + 1.0)

    async def _run(self) -> None:
        # After a failed beat, retry at the pool's reconnect pace: the first
        # write once the database is back is the held-back heartbeat.
        await every(self.interval, self._beat_and_mark, log=log, on_error=self._failed,
                    failed="heartbeat failed (%s); retrying",
                    retry_s=config.POOL_RECONNECT_DELAY_MS / 1000)

    async def _beat_and_mark(self) -> None:
        await self.beat()
        self.health.heartbeat_alive = True
        self.health.postgres_connected = True

    def _failed(self, exc: psycopg.Error) -> None:
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            self.health.postgres_connected = False

    async def beat(self) -> int:
        """Write one heartbeat for all in-flight attempts, and for those whose outcomes
        wait to be written; returns rows matched."""
        self.last_beat_at = time.monotonic()
        contexts = sorted(self.in_flight.values(), key=lambda c: c.job.id)
        running = {c.key for c in contexts}
        finished = sorted(a for a in self.unflushed() if a not in running)
        if not contexts and not finished:
            return 0
        handlers: list[AttemptWrite] = []
        for c in contexts:
            progress, meta = c.take_buffered()
            handlers.append(AttemptWrite(c.job.id, c.job.run_lease, progress, meta))
        # An outcome's own write ends the attempt: a beat that finds it ended matches nothing.
        # One order by job id for all, as the heartbeat always took its rows.
        beats = sorted([*handlers, *(AttemptWrite(job_id, lease, None, None)
                                     for job_id, lease in finished)], key=lambda b: b.id)
        try:
            async with self.pool.connection() as conn:
                matched = set(await self.engine.heartbeat_batch(conn, beats))
        except BaseException:
            for c, b in zip(contexts, handlers):
                c.restore_buffered(b.progress, b.metadata)
            raise
        recording.heartbeat_batch()
        for c in contexts:
            # Still in flight (not finished meanwhile) and no longer matched: lost.
            if c.job.id not in matched and self.in_flight.get(c.key) is c:
                c.cancel("attempt no longer owned by this worker")
                recording.stale_heartbeats(c.job.queue, 1)
        return len(matched)
