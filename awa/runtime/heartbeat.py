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
from typing import TYPE_CHECKING

import psycopg

from awa import config, recording
from awa.runtime.loops import BackgroundLoop, every
from awa.storage.engine import AttemptWrite

if TYPE_CHECKING:  # pragma: no cover
    from awa.runtime.runtime import Runtime

log = logging.getLogger("awa.runtime.heartbeat")


class Heartbeat(BackgroundLoop):
    task_name = "awa-heartbeat"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.interval = runtime.settings.heartbeat_interval_ms / 1000.0
        self.last_beat_at = time.monotonic()

    async def _run(self) -> None:
        # After a failed beat, retry at the pool's reconnect pace: the first
        # write once the database is back is the held-back heartbeat.
        await every(self.interval, self._beat_and_mark, log=log, on_error=self._failed,
                    failed="heartbeat failed (%s); retrying",
                    retry_s=config.POOL_RECONNECT_DELAY_MS / 1000)

    async def _beat_and_mark(self) -> None:
        await self.beat()
        self.runtime.health.heartbeat_alive = True
        self.runtime.health.postgres_connected = True

    def _failed(self, exc: psycopg.Error) -> None:
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            self.runtime.health.postgres_connected = False

    async def beat(self) -> int:
        """Write one heartbeat for all in-flight attempts, and for those whose outcomes
        wait to be written; returns rows matched."""
        self.last_beat_at = time.monotonic()
        contexts = sorted(self.runtime.in_flight.values(), key=lambda c: c.job.id)
        running = {c.key for c in contexts}
        finished = sorted(a for a in self.runtime.completion.unflushed_attempts()
                          if a not in running)
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
            async with self.runtime.pool.connection() as conn:
                matched = set(await self.runtime.engine.heartbeat_batch(conn, beats))
        except BaseException:
            for c, b in zip(contexts, handlers):
                c.restore_buffered(b.progress, b.metadata)
            raise
        recording.heartbeat_batch()
        for c in contexts:
            # Still in flight (not finished meanwhile) and no longer matched: lost.
            if c.job.id not in matched and self.runtime.in_flight.get(c.key) is c:
                c.cancel("attempt no longer owned by this worker")
                recording.stale_heartbeats(c.job.queue, 1)
        return len(matched)
