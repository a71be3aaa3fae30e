"""Queue health gauges, published by the leader only (a fleet would multiply
them otherwise): ``awa.queue.depth`` by queue and state, ``awa.queue.lag`` (age
of the oldest available job) and ``awa.job.dlq_depth``.

A series that disappears from the database (a drained queue) is set to 0
once, so dashboards do not freeze on its last value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from awa.runtime.maintenance import recording
from awa.storage.canonical import maintenance as sql


@dataclass
class QueueHealthPublisher:
    depth: dict[tuple[str, str], int] = field(default_factory=dict)
    lag: dict[str, float] = field(default_factory=dict)
    dlq_depth: dict[str, int] = field(default_factory=dict)

    async def publish(self, pool: AsyncConnectionPool) -> None:
        async with pool.connection() as conn:
            depth_rows = await (await conn.execute(sql.QUEUE_DEPTH)).fetchall()
            lag_rows = await (await conn.execute(sql.QUEUE_LAG)).fetchall()
            dlq_rows = await (await conn.execute(sql.DLQ_DEPTH)).fetchall()
        depth = {(r["queue"], r["state"]): r["depth"] for r in depth_rows}
        # Every queue with jobs has a lag: 0 when nothing waits to be claimed.
        lag = {queue: 0.0 for queue, _state in depth}
        lag.update({r["queue"]: max(r["lag_s"], 0.0) for r in lag_rows})
        dlq = {r["queue"]: r["depth"] for r in dlq_rows}
        # Zero what vanished since the previous pass.
        depth_out = {**{k: 0 for k in self.depth if k not in depth}, **depth}
        lag_out = {**{k: 0.0 for k in self.lag if k not in lag}, **lag}
        dlq_out = {**{k: 0 for k in self.dlq_depth if k not in dlq}, **dlq}
        recording.publish_queue_health(depth_out, lag_out, dlq_out)
        self.depth, self.lag, self.dlq_depth = depth, lag, dlq

    def reset(self) -> None:
        """On losing leadership: zero every series this runtime published."""
        recording.publish_queue_health({k: 0 for k in self.depth},
                                       {k: 0.0 for k in self.lag},
                                       {k: 0 for k in self.dlq_depth})
        self.depth, self.lag, self.dlq_depth = {}, {}, {}
