"""The runtime's snapshot row in ``awa.runtime_instances``: written the same by every engine,
since the table is part of the control surface both layouts share."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa.schema.catalogue import current_migration_version
from awa.storage.engine import RuntimeSnapshot

# Every snapshot interval, and at start and shutdown.
UPSERT_RUNTIME_INSTANCE = """
INSERT INTO awa.runtime_instances (
    instance_id, hostname, pid, version, started_at, last_seen_at, snapshot_interval_ms,
    healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive,
    leader, shutting_down, global_max_workers, queues, schema_version, layout_version)
VALUES (%s, %s, %s, %s, %s, now(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (instance_id) DO UPDATE SET
    last_seen_at = now(),
    schema_version = EXCLUDED.schema_version,
    layout_version = EXCLUDED.layout_version,
    snapshot_interval_ms = EXCLUDED.snapshot_interval_ms,
    healthy = EXCLUDED.healthy,
    postgres_connected = EXCLUDED.postgres_connected,
    poll_loop_alive = EXCLUDED.poll_loop_alive,
    heartbeat_alive = EXCLUDED.heartbeat_alive,
    maintenance_alive = EXCLUDED.maintenance_alive,
    leader = EXCLUDED.leader,
    shutting_down = EXCLUDED.shutting_down,
    global_max_workers = EXCLUDED.global_max_workers,
    queues = EXCLUDED.queues
"""


class RuntimeSnapshotWrites:
    """``Engine.upsert_runtime_snapshot``, for an engine's execution group to inherit.

    The row says which schema version and engine layout this code speaks
    (``layout_version``: the engine's own, None for canonical), so ``awa migrate
    --contract`` knows whether an older runtime is still live."""

    layout_version: int | None = None

    async def upsert_runtime_snapshot(self, conn: psycopg.AsyncConnection[Any],
                                      snapshot: RuntimeSnapshot) -> None:
        s = snapshot
        await conn.execute(UPSERT_RUNTIME_INSTANCE, (
            s.instance_id, s.hostname, s.pid, s.version, s.started_at, s.snapshot_interval_ms,
            s.healthy, s.postgres_connected, s.poll_loop_alive, s.heartbeat_alive,
            s.maintenance_alive, s.leader, s.shutting_down, s.global_max_workers,
            Jsonb(s.queues), current_migration_version(), self.layout_version))
