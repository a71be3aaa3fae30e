"""Promotion: due ``scheduled`` and ``retryable`` jobs become ``available``.

One statement per batch moves rows from ``awa.scheduled_jobs`` into
``awa.jobs_hot``; the insert trigger there sends ``NOTIFY "awa:<queue>"`` at
commit, so workers wake at once.  Paused queues are skipped.  A batch that
collides on a unique key (a retryable attempt whose key a newer job took)
degrades to row-at-a-time and cancels the superseded row.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa import config, lifecycle
from awa.runtime.maintenance import recording
from awa.storage.canonical import maintenance as sql

log = logging.getLogger("awa.maintenance.promote")


@dataclass
class PromoteOutcome:
    promoted: int = 0
    duplicates: int = 0
    batches: int = 0
    statements: int = 0


def _count_promoted(by_queue: Counter[str], started: float, outcome: PromoteOutcome) -> int:
    """Count one batch's promotions (per queue) once they are written; returns how many."""
    n = sum(by_queue.values())
    if n:
        outcome.batches += 1
        outcome.promoted += n
        recording.record_promotion(by_queue, time.perf_counter() - started)
    return n


async def _promote_batch(conn: psycopg.AsyncConnection, limit: int,
                         outcome: PromoteOutcome) -> int:
    started = time.perf_counter()
    try:
        rows = await (await conn.execute(sql.PROMOTE_DUE, {"limit": limit})).fetchall()
        outcome.statements += 1
    except psycopg.errors.UniqueViolation as exc:
        outcome.statements += 1
        log.warning("promotion collided on a unique key (%s); promoting row by row",
                    " ".join(str(exc).split()))
        return await _promote_row_at_a_time(conn, limit, outcome)
    return _count_promoted(Counter({r["queue"]: r["promoted"] for r in rows}), started, outcome)


async def _promote_row_at_a_time(conn: psycopg.AsyncConnection, limit: int,
                                 outcome: PromoteOutcome) -> int:
    started = time.perf_counter()
    by_queue: Counter[str] = Counter()
    duplicates: list[dict] = []  # recorded once the outer transaction commits
    async with conn.transaction():
        due = await (await conn.execute(sql.SELECT_DUE_IDS, {"limit": limit})).fetchall()
        outcome.statements += 1
        for row in due:
            try:
                async with conn.transaction():
                    moved = await (await conn.execute(sql.PROMOTE_ONE,
                                                      {"id": row["id"]})).fetchall()
                    outcome.statements += 1
                by_queue.update(r["queue"] for r in moved)
            except psycopg.errors.UniqueViolation:
                outcome.statements += 1
                error = lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, row["attempt"],
                                              terminal=True)
                cancelled = await (await conn.execute(
                    sql.CANCEL_DEFERRED_AS_DUPLICATE,
                    {"id": row["id"], "error": Jsonb(error)})).fetchall()
                outcome.statements += 1
                outcome.duplicates += len(cancelled)
                duplicates.extend(cancelled)
                for c in cancelled:
                    log.warning("job %s (%s) %s: a newer job holds its unique key",
                                c["id"], c["kind"], lifecycle.RESCUED_AS_DUPLICATE)
    recording.record_cancelled_duplicates(duplicates)
    _count_promoted(by_queue, started, outcome)
    return len(due)


async def promote(pool: AsyncConnectionPool, *,
                  batch_size: int = config.PROMOTE_BATCH_SIZE,
                  max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK) -> PromoteOutcome:
    """Promote due jobs in at most ``max_batches`` batches of ``batch_size``."""
    outcome = PromoteOutcome()
    async with pool.connection() as conn:
        for _ in range(max_batches):
            if await _promote_batch(conn, batch_size, outcome) < batch_size:
                break
    return outcome
