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
from awa.storage.canonical import maintenance as sql

ORIGINAL_PRIORITY_KEY = "_awa_original_priority"


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
                         max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK) -> int:
    """Lower the priority number of long-waiting jobs; returns how many changed."""
    names = list(queues or {})
    intervals = [queues[n].priority_aging_interval_ms for n in names] if queues else []
    positive = [i for i in intervals + [default_interval_ms] if i > 0]
    if not positive:
        return 0
    params = {
        "queues": names, "intervals_ms": intervals,
        "default_interval_ms": default_interval_ms,
        "min_interval_s": min(positive) / 1000.0,
        "meta_key": ORIGINAL_PRIORITY_KEY, "limit": batch_size,
    }
    changed = 0
    async with pool.connection() as conn:
        for _ in range(max_batches):
            cur = await conn.execute(sql.AGE_PRIORITIES, params)
            n = cur.rowcount
            changed += n
            if n < batch_size:
                break
    return changed
