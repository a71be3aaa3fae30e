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

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from awa import config
from awa.config import QueueConfig, RetentionPolicy, RuntimeSettings
from awa.runtime.maintenance import recording
from awa.storage.canonical import maintenance as sql

HOUR_S = 3600.0
DAY_S = 86400.0


@dataclass
class RetentionOutcome:
    deleted: Counter[str] = field(default_factory=Counter)
    statements: int = 0


def _finalized_ages(completed_hours: float, failed_hours: float) -> dict[str, float]:
    """Seconds after finishing that each finished state is kept."""
    return {"completed": completed_hours * HOUR_S, "cancelled": completed_hours * HOUR_S,
            "failed": failed_hours * HOUR_S}


async def _drain(conn, statement: str, params: dict, limit: int, max_batches: int,
                 outcome: RetentionOutcome, what: str) -> None:
    """Run one bounded delete until it takes less than a batch (or the cap)."""
    for _ in range(max_batches):
        cur = await conn.execute(statement, {**params, "limit": limit})
        outcome.statements += 1
        n = cur.rowcount
        if what == "dlq" and n:
            recording.record_dlq_purged(Counter(r["queue"] for r in await cur.fetchall()))
        outcome.deleted[what] += max(n, 0)
        if n < limit:
            return


async def clean(pool: AsyncConnectionPool, settings: RuntimeSettings,
                queues: Mapping[str, QueueConfig] | None = None, *,
                max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK) -> RetentionOutcome:
    outcome = RetentionOutcome()
    limit = settings.cleanup_batch_size
    overrides: dict[str, RetentionPolicy] = {
        name: q.retention for name, q in (queues or {}).items() if q.retention is not None}
    excluded = list(overrides)
    finalized_ages = _finalized_ages(settings.completed_retention_hours,
                                     settings.failed_retention_hours)
    async with pool.connection() as conn:
        for state, age_s in finalized_ages.items():
            await _drain(conn, sql.DELETE_FINALIZED_DEFAULT,
                         {"state": state, "age_s": age_s, "excluded_queues": excluded},
                         limit, max_batches, outcome, state)
        await _drain(conn, sql.DELETE_DLQ_DEFAULT,
                     {"age_s": settings.dlq_retention_days * DAY_S,
                      "excluded_queues": excluded}, limit, max_batches, outcome, "dlq")
        for queue, policy in overrides.items():
            for state, age_s in _finalized_ages(policy.completed_hours,
                                                policy.failed_hours).items():
                await _drain(conn, sql.DELETE_FINALIZED_QUEUE,
                             {"state": state, "queue": queue, "age_s": age_s},
                             limit, max_batches, outcome, state)
            await _drain(conn, sql.DELETE_DLQ_QUEUE,
                         {"queue": queue, "age_s": policy.dlq_days * DAY_S},
                         limit, max_batches, outcome, "dlq")
        await _drain(conn, sql.DELETE_UNSEEN_RUNTIMES,
                     {"age_s": settings.runtime_retention_hours * HOUR_S},
                     limit, max_batches, outcome, "runtime_instances")
        descriptor_age_s = settings.descriptor_retention_days * DAY_S
        await _drain(conn, sql.DELETE_UNSEEN_QUEUE_DESCRIPTORS, {"age_s": descriptor_age_s},
                     limit, max_batches, outcome, "queue_descriptors")
        await _drain(conn, sql.DELETE_UNSEEN_KIND_DESCRIPTORS, {"age_s": descriptor_age_s},
                     limit, max_batches, outcome, "job_kind_descriptors")
    return outcome
