"""A running attempt's own writes outside its outcome and its heartbeat: what
``job.flush_progress()``, ``job.register_callback()`` and ``job.wait_for_callback()`` do.

The runtime builds one ``AttemptWrites`` on its pool and engine and gives it to every
``JobContext`` (as its ``AttemptIO``), so the context names neither the runtime nor the
callbacks module, which imports the recording points that name the outcomes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa import recording
from awa.job import CallbackToken
from awa.runtime.context import JobContext
from awa.storage.engine import AttemptWrite, Engine

if TYPE_CHECKING:  # pragma: no cover
    from psycopg_pool import AsyncConnectionPool


class AttemptWrites:
    """``AttemptIO`` on ``pool`` and ``engine``."""

    def __init__(self, pool: AsyncConnectionPool, engine: Engine) -> None:
        self.pool = pool
        self.engine = engine

    async def flush_progress(self, ctx: JobContext) -> None:
        """One attempt's buffered progress and metadata now (the heartbeat's write, out of
        turn); an attempt no longer ours has its cancel flag flipped."""
        progress, patch = ctx.take_buffered()
        if progress is None and patch is None:
            return
        job = ctx.job
        try:
            async with self.pool.connection() as conn:
                matched = await self.engine.flush_progress_batch(
                    conn, [AttemptWrite(job.id, job.run_lease, progress, patch)])
        except BaseException:
            ctx.restore_buffered(progress, patch)
            raise
        if not matched:
            ctx.cancel("attempt no longer owned by this worker")
            recording.stale_heartbeats(job.queue, 1)  # a stale write, counted

    async def register_callback(self, ctx: JobContext, timeout_seconds: float,
                                filter: str | None, on_complete: str | None,
                                on_fail: str | None, transform: str | None) -> CallbackToken:
        from awa import callbacks  # the callbacks module is optional at import time
        return await callbacks.register_callback(
            self.pool, ctx.job.id, ctx.job.run_lease, timeout_seconds,
            filter, on_complete, on_fail, transform)

    async def wait_for_callback(self, ctx: JobContext, callback_id: str) -> Any:
        from awa import callbacks
        return await callbacks.wait_for_resume(
            self.pool, ctx.job.id, ctx.job.run_lease, callback_id, ctx.is_cancelled)
