"""Descriptor sync: every runtime upserts the descriptors it declares and
refreshes their ``last_seen_at`` each snapshot tick, so the catalogue shows
which ones live code still declares (retention drops the unseen ones); and it
records their hashes in its ``runtime_instances`` row, so runtimes that
disagree about a descriptor show up as drift.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from awa.descriptors import descriptor_hashes
from awa.runtime.maintenance import recording
from awa.storage import open_engine
from awa.storage.engine import Descriptor, Engine


async def sync_descriptors(pool: AsyncConnectionPool, client: Any,
                           instance_id: UUID | None = None, *,
                           engine: Engine | None = None) -> int:
    """Upsert the client's declared descriptors (and this runtime's hashes when
    ``instance_id`` is given); returns how many descriptors were written."""
    queues = [Descriptor(**d) for d in client._queue_descriptors.values()]
    kinds = [Descriptor(**d) for d in client._kind_descriptors.values()]
    engine = engine or await open_engine(pool)
    async with pool.connection() as conn:
        async with conn.transaction():
            written = await engine.upsert_descriptors(conn, queues=queues, kinds=kinds)
            if instance_id is not None:
                await engine.set_runtime_descriptor_hashes(conn, instance_id,
                                                           descriptor_hashes(client))
    recording.record_descriptors(client._queue_descriptors.values(),
                                 client._kind_descriptors.values())
    return written
