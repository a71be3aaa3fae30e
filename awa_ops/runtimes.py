"""Runtime liveness as the database sees it (awa.runtime_instances).

Several checks need "which runtimes are alive, which serve this queue": a
runtime is live while its ``last_seen_at`` is within a few of its own
snapshot intervals.  Running attempts carry no owner column, so the runtime
that held a stale attempt is inferred: a dead runtime serving the attempt's
queue whose last report is closest to the attempt's last heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from awa import config
from awa_ops.session import OpsSession
from awa_ops.storage import render

RUNTIMES = f"""
WITH seed AS ({render("runtime_instances", as_subquery=True)})
SELECT s.*, r.snapshot_interval_ms, r.started_at, r.queues,
       EXTRACT(EPOCH FROM (now() - s.last_seen_at))::float8 AS last_seen_age_s,
       EXTRACT(EPOCH FROM (now() - r.started_at))::float8 AS uptime_s
FROM seed s JOIN awa.runtime_instances r USING (instance_id)
"""


@dataclass
class Runtime:
    row: dict[str, Any]
    queues: set[str] = field(default_factory=set)

    @property
    def instance_id(self) -> str:
        return str(self.row["instance_id"])

    @property
    def age_s(self) -> float:
        return float(self.row["last_seen_age_s"])

    @property
    def window_s(self) -> float:
        return max(config.OPS_RUNTIME_LIVE_FACTOR * int(self.row["snapshot_interval_ms"]) / 1000,
                   config.OPS_RUNTIME_LIVE_MIN_S)

    @property
    def live(self) -> bool:
        return self.age_s <= self.window_s

    @property
    def recently_gone(self) -> bool:
        return not self.live and self.age_s <= config.OPS_RUNTIME_GONE_S

    @property
    def leader(self) -> bool:
        return bool(self.row["leader"])

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues

    def label(self) -> str:
        return f"{self.row['hostname']}:{self.row['pid']} ({self.instance_id[:8]})"

    def evidence(self) -> dict[str, Any]:
        keep = ("instance_id", "hostname", "pid", "last_seen_at", "healthy", "postgres_connected",
                "poll_loop_alive", "heartbeat_alive", "maintenance_alive", "leader",
                "shutting_down")
        out = {k: self.row[k] for k in keep}
        out["last_seen_age_s"] = round(self.age_s, 1)
        out["live"] = self.live
        return out


def queue_names(value: Any) -> set[str]:
    """Queue names from a runtime's ``queues`` json, whatever shape a runtime wrote."""
    names: set[str] = set()
    if isinstance(value, dict):
        value = [{"name": k, **(v if isinstance(v, dict) else {})} for k, v in value.items()]
    for item in value or []:
        if isinstance(item, str):
            names.add(item)
        elif isinstance(item, (list, tuple)) and item:
            names.add(str(item[0]))
        elif isinstance(item, dict):
            name = item.get("name") or item.get("queue")
            if name:
                names.add(str(name))
    return names


async def load_runtimes(session: OpsSession) -> list[Runtime]:
    rows = await session.fetch_all(RUNTIMES)
    runtimes = [Runtime(r, queue_names(r["queues"])) for r in rows]
    runtimes.sort(key=lambda r: (not r.leader, r.age_s))
    return runtimes


def inferred_owner(runtimes: list[Runtime], queue: str,
                   heartbeat_age_s: float | None) -> Runtime | None:
    """The dead runtime most likely to have held an attempt whose heartbeats stopped."""
    dead = [r for r in runtimes if not r.live and r.serves(queue)]
    if not dead:
        return None
    if heartbeat_age_s is None:
        return min(dead, key=lambda r: r.age_s)
    return min(dead, key=lambda r: abs(r.age_s - heartbeat_age_s))


def live_servers(runtimes: list[Runtime], queue: str) -> list[Runtime]:
    return [r for r in runtimes if r.live and not r.row["shutting_down"] and r.serves(queue)]
