"""Retention: delete finished history once it is old enough, in bounded batches.

``completed`` (and ``cancelled``) rows after ``completed_retention_hours``,
``failed`` rows after ``failed_retention_hours`` (a floor: a failed row stays
retryable by an operator at least that long), DLQ entries after
``dlq_retention_days``; a queue's ``QueueConfig.retention`` overrides the
runtime's values for that queue.  Runtime rows unseen for
``runtime_retention_hours`` and descriptors unseen for
``descriptor_retention_days`` go too.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from awa import config, recording
from awa.config import QueueConfig, RetentionPolicy, RuntimeSettings
from awa.storage import open_engine
from awa.storage.engine import Engine, PruneReport, PurgedBatch

HOUR_S = 3600.0
DAY_S = 86400.0


@dataclass
class RetentionOutcome:
    deleted: Counter[str] = field(default_factory=Counter)
    statements: int = 0
    truncated: int = 0  # ring partitions reclaimed by TRUNCATE (queue storage)


def _finalized_ages(completed_hours: float, failed_hours: float) -> dict[str, float]:
    """Seconds after finishing that each finished state is kept."""
    return {"completed": completed_hours * HOUR_S, "cancelled": completed_hours * HOUR_S,
            "failed": failed_hours * HOUR_S}


async def _drain(delete: Callable[[int], Awaitable[int | PurgedBatch]], limit: int,
                 max_batches: int, outcome: RetentionOutcome, what: str) -> None:
    """Run one bounded delete until it takes less than a batch (or the cap)."""
    for _ in range(max_batches):
        result = await delete(limit)
        outcome.statements += 1
        if isinstance(result, PurgedBatch):
            n = result.deleted
            if result.by_queue:
                recording.record_dlq_purged(Counter(result.by_queue))
        else:
            n = result
        outcome.deleted[what] += n
        if n < limit:
            return


async def clean(pool: AsyncConnectionPool, settings: RuntimeSettings,
                queues: Mapping[str, QueueConfig] | None = None, *,
                max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK,
                engine: Engine | None = None) -> RetentionOutcome:
    store: Engine = engine or await open_engine(pool)
    outcome = RetentionOutcome()
    limit = settings.cleanup_batch_size
    overrides: dict[str, RetentionPolicy] = {
        name: q.retention for name, q in (queues or {}).items() if q.retention is not None}
    excluded = list(overrides)
    finalized_ages = _finalized_ages(settings.completed_retention_hours,
                                     settings.failed_retention_hours)

    async def drain(what: str, delete: Callable[[int], Awaitable[int | PurgedBatch]]) -> None:
        await _drain(delete, limit, max_batches, outcome, what)

    def finalized(conn: psycopg.AsyncConnection[Any], state: str, age_s: float,
                  **where: Any) -> Callable[[int], Awaitable[int]]:
        return lambda n: store.purge_finalized(conn, state=state, older_than_s=age_s,
                                                limit=n, **where)

    def dlq(conn: psycopg.AsyncConnection[Any], age_s: float,
            **where: Any) -> Callable[[int], Awaitable[PurgedBatch]]:
        return lambda n: store.purge_aged_dlq(conn, older_than_s=age_s, limit=n, **where)

    async with pool.connection() as conn:
        for state, age_s in finalized_ages.items():
            await drain(state, finalized(conn, state, age_s, exclude_queues=excluded))
        await drain("dlq", dlq(conn, settings.dlq_retention_days * DAY_S,
                               exclude_queues=excluded))
        for queue, policy in overrides.items():
            for state, age_s in _finalized_ages(policy.completed_hours,
                                                policy.failed_hours).items():
                await drain(state, finalized(conn, state, age_s, queue=queue))
            await drain("dlq", dlq(conn, policy.dlq_days * DAY_S, queue=queue))
        runtime_age_s = settings.runtime_retention_hours * HOUR_S
        await drain("runtime_instances", lambda n: store.purge_unseen_runtimes(
            conn, older_than_s=runtime_age_s, limit=n))
        descriptor_age_s = settings.descriptor_retention_days * DAY_S
        if descriptor_age_s > 0:  # 0 keeps the catalogue (managed elsewhere), as in 0.6.9
            await drain("queue_descriptors", lambda n: store.purge_unseen_descriptors(
                conn, catalogue="queues", older_than_s=descriptor_age_s, limit=n))
            await drain("job_kind_descriptors", lambda n: store.purge_unseen_descriptors(
                conn, catalogue="kinds", older_than_s=descriptor_age_s, limit=n))
        # Engines with partition rings reclaim their history here (TRUNCATE of sealed,
        # provably empty partitions); the row engine has nothing to do.
        pruned = await store.rotate_and_prune(
            conn, completed_retention_s=settings.completed_retention_hours * HOUR_S,
            failed_retention_s=settings.failed_retention_hours * HOUR_S)
        outcome.truncated = len(pruned.truncated)
    RING_TRACKER.record(pruned)
    return outcome


class RingTracker:
    """The leader's memory of blocked ring slots between ticks (awa.storage.prune_blocked_age).

    A sealed slot is blocked from the first tick whose prune could not reclaim it
    until one truncates it (or finds it empty); its age is reported under the blocker
    the latest tick found.  Forgotten when this runtime stops leading.
    """

    def __init__(self) -> None:
        self.blocked_since: dict[tuple[str, int], float] = {}
        self.published: set[tuple[str, str]] = set()

    def record(self, report: PruneReport, now: float | None = None) -> None:
        if not report.rings:
            return  # no rings on this engine
        now = time.monotonic() if now is None else now
        self.blocked_since = {slot: self.blocked_since.get(slot, now)
                              for slot in report.blockers}
        age: dict[tuple[str, str], float] = {}
        for (ring, slot), blocker in report.blockers.items():
            key = (ring, blocker)
            age[key] = max(age.get(key, 0.0), now - self.blocked_since[(ring, slot)])
        recording.record_ring_tick(report, age, self.published - set(age))
        self.published = set(age)

    def reset(self) -> None:
        """On losing leadership: zero what this runtime published, forget the ages."""
        recording.clear_blocked_slots(self.published)
        self.blocked_since, self.published = {}, set()


RING_TRACKER = RingTracker()
