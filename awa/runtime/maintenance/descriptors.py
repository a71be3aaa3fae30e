"""Descriptor sync: every runtime upserts the descriptors it declares and
refreshes their ``last_seen_at`` each snapshot tick, so the catalogue shows
which ones live code still declares (retention drops the unseen ones).
"""

from __future__ import annotations

import json
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.storage.canonical import maintenance as sql


async def sync_descriptors(pool: AsyncConnectionPool, client: Any) -> int:
    """Upsert the client's declared descriptors; returns how many were written."""
    queues = list(client._queue_descriptors.values())
    kinds = list(client._kind_descriptors.values())
    if not queues and not kinds:
        return 0
    async with pool.connection() as conn:
        async with conn.transaction():
            if queues:
                await conn.execute(sql.UPSERT_QUEUE_DESCRIPTORS,
                                   {"descriptors": json.dumps(queues)})
            if kinds:
                await conn.execute(sql.UPSERT_KIND_DESCRIPTORS,
                                   {"descriptors": json.dumps(kinds)})
    return len(queues) + len(kinds)
