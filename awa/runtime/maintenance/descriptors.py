"""Descriptor sync: every runtime upserts its catalogue -- the descriptors it declares
and a bare one for each queue it runs and kind it handles, as awa-pg 0.6.9 did --
when it starts and again each snapshot tick, refreshing ``last_seen_at`` (so the
catalogue shows which ones live code still declares; retention drops the unseen
ones; ``updated_at`` moves only when a descriptor changed); and it records their
hashes in its ``runtime_instances`` row, so runtimes that disagree about a
descriptor show up as drift.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from awa import config, recording
from awa.descriptors import hashes_of
from awa.storage import open_engine
from awa.storage.engine import Descriptor, Engine

# The queue and kind descriptors a client publishes (``awa.descriptors.catalogue``).
Catalogue = tuple[list[dict[str, Any]], list[dict[str, Any]]]


async def sync_descriptors(pool: AsyncConnectionPool, declared: Catalogue,
                           instance_id: UUID | None = None, *, engine: Engine | None = None,
                           sync_interval_ms: int = config.SNAPSHOT_INTERVAL_MS) -> int:
    """Upsert a catalogue (``declared``: queue and kind descriptors; and this runtime's
    hashes when ``instance_id`` is given), each stamped with the ``sync_interval_ms`` it is
    refreshed at; returns how many descriptors were written."""
    declared_queues, declared_kinds = declared
    queues = [Descriptor(**d, sync_interval_ms=sync_interval_ms) for d in declared_queues]
    kinds = [Descriptor(**d, sync_interval_ms=sync_interval_ms) for d in declared_kinds]
    engine = engine or await open_engine(pool)
    async with pool.connection() as conn:
        async with conn.transaction():
            written = await engine.upsert_descriptors(conn, queues=queues, kinds=kinds)
            if instance_id is not None:
                await engine.set_runtime_descriptor_hashes(
                    conn, instance_id, hashes_of(declared_queues, declared_kinds))
    recording.descriptors_synced(declared_queues, declared_kinds)
    return written
