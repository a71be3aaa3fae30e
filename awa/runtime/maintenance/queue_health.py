"""Queue health gauges, published by the leader only (a fleet would multiply
them otherwise): ``awa.queue.depth`` by queue and state, ``awa.queue.lag`` (age
of the oldest available job) and ``awa.job.dlq_depth``.

A series that disappears from the database (a drained queue) is set to 0
once, so dashboards do not freeze on its last value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from awa import recording
from awa.storage import open_engine
from awa.storage.engine import Engine


@dataclass
class QueueHealthPublisher:
    depth: dict[tuple[str, str], int] = field(default_factory=dict)
    lag: dict[str, float] = field(default_factory=dict)
    dlq_depth: dict[str, int] = field(default_factory=dict)

    async def publish(self, pool: AsyncConnectionPool, *, engine: Engine | None = None) -> None:
        """One read of the engine's queue depths (``awa.lifecycle.DEPTH_STATES``) -> gauges."""
        engine = engine or await open_engine(pool)
        async with pool.connection() as conn:
            queues = await engine.queue_depths(conn)
        depth = {(q.queue, state): n for q in queues for state, n in q.depth.items()}
        # Every queue with jobs has a lag: 0 when nothing waits to be claimed.
        lag = {q.queue: q.lag_s or 0.0 for q in queues if q.depth}
        dlq = {q.queue: q.dlq_depth for q in queues if q.dlq_depth}
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
