"""Promotion: due ``scheduled`` and ``retryable`` jobs become ``available``.

The engine moves a batch in one transaction; workers of the queue are woken
at commit (``NOTIFY "awa:<queue>"``).  Paused queues are skipped.  A batch
that collides on a unique key (a retryable attempt whose key a newer job
took) degrades row by row inside the engine and cancels the superseded row
(``rescued as duplicate``).  Metrics and log lines follow from what the
engine returns, after it committed.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass

from psycopg_pool import AsyncConnectionPool

from awa import config, lifecycle, recording
from awa.storage import open_engine
from awa.storage.engine import Engine, PromoteBatch

log = logging.getLogger("awa.maintenance.promote")


@dataclass
class PromoteOutcome:
    promoted: int = 0
    duplicates: int = 0
    batches: int = 0
    statements: int = 0


def _record(batch: PromoteBatch, seconds: float, outcome: PromoteOutcome) -> None:
    """Count one committed batch: its promotions per queue and its duplicates."""
    outcome.statements += batch.statements
    if batch.duplicates:
        outcome.duplicates += len(batch.duplicates)
        recording.record_cancelled_duplicates(asdict(d) for d in batch.duplicates)
        for d in batch.duplicates:
            log.warning("job %s (%s) %s: a newer job holds its unique key",
                        d.id, d.kind, lifecycle.RESCUED_AS_DUPLICATE)
    if batch.promoted:
        outcome.batches += 1
        outcome.promoted += len(batch.promoted)
        recording.record_promotion(Counter(batch.promoted_by_queue()), seconds)


async def promote(pool: AsyncConnectionPool, *,
                  batch_size: int = config.PROMOTE_BATCH_SIZE,
                  max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK,
                  engine: Engine | None = None) -> PromoteOutcome:
    """Promote due jobs in at most ``max_batches`` batches of ``batch_size``."""
    engine = engine or await open_engine(pool)
    outcome = PromoteOutcome()
    async with pool.connection() as conn:
        for _ in range(max_batches):
            started = time.perf_counter()
            batch = await engine.promote_due(conn, limit=batch_size)
            _record(batch, time.perf_counter() - started, outcome)
            if batch.found < batch_size:
                break
    return outcome
