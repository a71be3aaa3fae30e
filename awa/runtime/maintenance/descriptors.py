"""Descriptor sync: every runtime upserts the descriptors it declares and
refreshes their ``last_seen_at`` each snapshot tick, so the catalogue shows
which ones live code still declares (retention drops the unseen ones); and it
records their hashes in its ``runtime_instances`` row, so runtimes that
disagree about a descriptor show up as drift.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from awa.descriptors import descriptor_hashes
from awa.runtime.maintenance import recording
from awa.storage.canonical import maintenance as sql


async def sync_descriptors(pool: AsyncConnectionPool, client: Any,
                           instance_id: UUID | None = None) -> int:
    """Upsert the client's declared descriptors (and this runtime's hashes when
    ``instance_id`` is given); returns how many descriptors were written."""
    queues = list(client._queue_descriptors.values())
    kinds = list(client._kind_descriptors.values())
    async with pool.connection() as conn:
        async with conn.transaction():
            if queues:
                await conn.execute(sql.UPSERT_QUEUE_DESCRIPTORS,
                                   {"descriptors": json.dumps(queues)})
            if kinds:
                await conn.execute(sql.UPSERT_KIND_DESCRIPTORS,
                                   {"descriptors": json.dumps(kinds)})
            if instance_id is not None:
                await conn.execute(sql.SET_RUNTIME_DESCRIPTOR_HASHES, {
                    "instance_id": instance_id,
                    "hashes": json.dumps(descriptor_hashes(client))})
    recording.record_descriptors(queues, kinds)
    return len(queues) + len(kinds)
