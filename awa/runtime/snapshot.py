"""This runtime's row in ``awa.runtime_instances``, upserted every snapshot interval.

Operators (``awa-ops``, the TUI, the troubleshooting guide's health query)
read these rows to see which workers are alive, what they serve and who
leads maintenance.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from awa.config import QueueConfig, RuntimeSettings
from awa.runtime.health import Health
from awa.runtime.loops import BackgroundLoop, every
from awa.runtime.permits import QueuePermits
from awa.storage.engine import Engine, RuntimeSnapshot
from awa.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from psycopg_pool import AsyncConnectionPool

log = logging.getLogger("awa.runtime.snapshot")


# The runtime's own heartbeat timing, published with each queue it serves (the registry's
# ``queues`` json), so awa-ops and the console judge staleness by this runtime's values.
TIMING_KEYS = ("heartbeat_interval_ms", "heartbeat_staleness_ms", "heartbeat_rescue_interval_ms",
               "deadline_rescue_interval_ms")


def runtime_timing(settings: RuntimeSettings) -> dict[str, int]:
    return {key: int(getattr(settings, key)) for key in TIMING_KEYS
            if getattr(settings, key, None) is not None}


def queue_descriptions(queues: dict[str, QueueConfig], permits: dict[str, QueuePermits],
                       dlq_enabled: Callable[[str], bool], connections: dict[str, int],
                       settings: RuntimeSettings) -> list[dict[str, Any]]:
    out = []
    for name, q in queues.items():
        queue_permits = permits[name]
        out.append({
            "queue": name,
            "max_workers": q.max_workers,
            "min_workers": q.min_workers,
            "weight": q.weight if q.min_workers is not None else None,
            "in_flight": queue_permits.in_use,
            "capacity": queue_permits.capacity,
            "rate_limit": ({"max_rate": q.rate_limit.max_rate, "burst": q.rate_limit.burst}
                           if q.rate_limit else None),
            "deadline_duration_ms": q.deadline_duration_ms,
            "dlq_enabled": dlq_enabled(name),
            # The runtime's server-connection budget by use (``Runtime.connections``); the
            # same on every queue of the runtime (the row has no column of its own for it).
            "server_connections": connections,
            **runtime_timing(settings),
        })
    return out


class Snapshot(BackgroundLoop):
    """Upserts ``instance_id``'s row through ``engine`` on ``pool``: ``health``'s flags (refreshed
    first), and per queue of ``queues`` its limits, ``permits`` in use, ``dlq_enabled`` and the
    ``connections`` budget (filled in by the runtime's start)."""

    task_name = "awa-snapshot"

    def __init__(self, *, pool: AsyncConnectionPool, engine: Engine, health: Health,
                 instance_id: UUID, settings: RuntimeSettings, queues: dict[str, QueueConfig],
                 permits: dict[str, QueuePermits], dlq_enabled: Callable[[str], bool],
                 connections: dict[str, int]) -> None:
        self.pool = pool
        self.engine = engine
        self.health = health
        self.instance_id = instance_id
        self.settings = settings
        self.queues = queues
        self.permits = permits
        self.dlq_enabled = dlq_enabled
        self.connections = connections
        self.interval = settings.snapshot_interval_ms / 1000.0
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = datetime.now(UTC)
        self.written = False

    async def _run(self) -> None:
        await every(self.interval, self.write, log=log, failed="runtime snapshot failed (%s)")

    async def write(self) -> None:
        h = self.health
        h.refresh()
        settings = self.settings
        snapshot = RuntimeSnapshot(
            instance_id=self.instance_id, hostname=self.hostname, pid=self.pid,
            version=__version__, started_at=self.started_at,
            snapshot_interval_ms=int(settings.snapshot_interval_ms), healthy=h.healthy,
            postgres_connected=h.postgres_connected, poll_loop_alive=h.poll_loop_alive,
            heartbeat_alive=h.heartbeat_alive, maintenance_alive=h.maintenance_alive,
            leader=h.leader, shutting_down=h.shutting_down,
            global_max_workers=settings.global_max_workers,
            queues=queue_descriptions(self.queues, self.permits, self.dlq_enabled,
                                      self.connections, settings))
        async with self.pool.connection() as conn:
            await self.engine.upsert_runtime_snapshot(conn, snapshot)
        self.written = True
