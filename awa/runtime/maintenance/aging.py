"""Priority aging: a job waiting in ``available`` rises one priority step per
aging interval (1 is the most urgent), so low priorities never starve behind
a steady stream of urgent work.

The interval is the queue's ``QueueConfig.priority_aging_interval_ms`` for
queues this runtime serves, else the runtime's ``priority_aging_interval_ms``;
0 disables aging.  The job's original priority is kept in its metadata under
``ORIGINAL_PRIORITY_KEY``.
"""

from __future__ import annotations

from collections.abc import Mapping

from psycopg_pool import AsyncConnectionPool

from awa import config
from awa.config import QueueConfig
from awa.storage import open_engine
from awa.storage.engine import ORIGINAL_PRIORITY_KEY, Engine

__all__ = ["ORIGINAL_PRIORITY_KEY", "age_priorities", "tick_interval_ms"]


def tick_interval_ms(default_interval_ms: int,
                     queues: Mapping[str, QueueConfig] | None = None) -> int:
    """Check at half the shortest interval, so a step is never late by more than that."""
    intervals = [default_interval_ms] + [q.priority_aging_interval_ms
                                         for q in (queues or {}).values()]
    positive = [i for i in intervals if i > 0]
    return max(min(positive) // 2, 50) if positive else 0


async def age_priorities(pool: AsyncConnectionPool, *, default_interval_ms: int,
                         queues: Mapping[str, QueueConfig] | None = None,
                         batch_size: int = config.CLEANUP_BATCH_SIZE,
                         max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK,
                         engine: Engine | None = None) -> int:
    """Lower the priority number of long-waiting jobs; returns how many changed."""
    intervals = {name: q.priority_aging_interval_ms for name, q in (queues or {}).items()}
    if not any(i > 0 for i in [*intervals.values(), default_interval_ms]):
        return 0
    engine = engine or await open_engine(pool)
    changed = 0
    async with pool.connection() as conn:
        for _ in range(max_batches):
            n = await engine.age_priorities(conn, default_interval_ms=default_interval_ms,
                                            queue_intervals_ms=intervals, limit=batch_size)
            changed += n
            if n < batch_size:
                break
    return changed
