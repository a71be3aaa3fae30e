"""This runtime's row in ``awa.runtime_instances``, upserted every snapshot interval.

Operators (``awa-ops``, the TUI, the troubleshooting guide's health query)
read these rows to see which workers are alive, what they serve and who
leads maintenance.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from awa.runtime.loops import BackgroundLoop, every
from awa.storage.engine import RuntimeSnapshot
from awa.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from awa.runtime.runtime import Runtime

log = logging.getLogger("awa.runtime.snapshot")


# The runtime's own heartbeat timing, published with each queue it serves (the registry's
# ``queues`` json), so awa-ops and the console judge staleness by this runtime's values.
TIMING_KEYS = ("heartbeat_interval_ms", "heartbeat_staleness_ms", "heartbeat_rescue_interval_ms",
               "deadline_rescue_interval_ms")


def runtime_timing(runtime: Runtime) -> dict[str, int]:
    return {key: int(getattr(runtime.settings, key)) for key in TIMING_KEYS
            if getattr(runtime.settings, key, None) is not None}


def queue_descriptions(runtime: Runtime) -> list[dict[str, Any]]:
    out = []
    for name, q in runtime.queues.items():
        permits = runtime.permits[name]
        out.append({
            "queue": name,
            "max_workers": q.max_workers,
            "min_workers": q.min_workers,
            "weight": q.weight if q.min_workers is not None else None,
            "in_flight": permits.in_use,
            "capacity": permits.capacity,
            "rate_limit": ({"max_rate": q.rate_limit.max_rate, "burst": q.rate_limit.burst}
                           if q.rate_limit else None),
            "deadline_duration_ms": q.deadline_duration_ms,
            "dlq_enabled": runtime.dlq_enabled(name),
            # The runtime's server-connection budget by use (``Runtime.connections``); the
            # same on every queue of the runtime (the row has no column of its own for it).
            "server_connections": runtime.connections,
            **runtime_timing(runtime),
        })
    return out


class Snapshot(BackgroundLoop):
    task_name = "awa-snapshot"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.interval = runtime.settings.snapshot_interval_ms / 1000.0
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = datetime.now(UTC)
        self.written = False

    async def _run(self) -> None:
        await every(self.interval, self.write, log=log, failed="runtime snapshot failed (%s)")

    async def write(self) -> None:
        rt = self.runtime
        h = rt.health
        h.refresh(rt)
        snapshot = RuntimeSnapshot(
            instance_id=rt.instance_id, hostname=self.hostname, pid=self.pid,
            version=__version__, started_at=self.started_at,
            snapshot_interval_ms=int(rt.settings.snapshot_interval_ms), healthy=h.healthy,
            postgres_connected=h.postgres_connected, poll_loop_alive=h.poll_loop_alive,
            heartbeat_alive=h.heartbeat_alive, maintenance_alive=h.maintenance_alive,
            leader=h.leader, shutting_down=h.shutting_down,
            global_max_workers=rt.settings.global_max_workers,
            queues=queue_descriptions(rt))
        async with rt.pool.connection() as conn:
            await rt.engine.upsert_runtime_snapshot(conn, snapshot)
        self.written = True
