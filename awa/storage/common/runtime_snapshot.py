"""The runtime's snapshot row in ``awa.runtime_instances``: written the same by every engine,
since the table is part of the control surface both layouts share."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa.schema.catalogue import current_migration_version
from awa.statements import named_statements
from awa.storage.engine import RuntimeSnapshot

# Every snapshot interval, and at start and shutdown.
UPSERT_RUNTIME_INSTANCE = named_statements("awa.storage.common",
                                           "sql/runtime_snapshot.sql")["upsert_runtime_instance"]


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
