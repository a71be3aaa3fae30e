"""Rescue: attempts whose owner is gone (stale heartbeat), that ran past their
deadline, or whose callback wait expired.

Each rescue counts the attempt: retryable with backoff while attempts remain,
else ``failed`` or the DLQ.  The engine does a batch in one transaction (lock
the candidates, move them all); a move that collides with a newer holder of
the job's unique key degrades row by row and cancels the superseded attempt
(``rescued as duplicate``), so one wedged row never stops rescue of the
others.  Metrics, log lines and the local handlers' cancel flags follow from
what the engine returns, after it committed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from awa import config, lifecycle, recording
from awa.storage import open_engine
from awa.storage.engine import Engine, RescueBatch

log = logging.getLogger("awa.maintenance.rescue")

RescueRun = Callable[[Engine, psycopg.AsyncConnection[Any], int, float, Callable[[str], bool]],
                     Awaitable[RescueBatch]]


def _stale_heartbeats(engine: Engine, conn: psycopg.AsyncConnection[Any], limit: int,
                      staleness_s: float, dlq_enabled: Callable[[str], bool]
                      ) -> Awaitable[RescueBatch]:
    return engine.rescue_stale_heartbeats(conn, staleness_s=staleness_s, limit=limit,
                                          dlq_enabled=dlq_enabled)


def _expired_deadlines(engine: Engine, conn: psycopg.AsyncConnection[Any], limit: int,
                       staleness_s: float, dlq_enabled: Callable[[str], bool]
                       ) -> Awaitable[RescueBatch]:
    return engine.rescue_expired_deadlines(conn, limit=limit, dlq_enabled=dlq_enabled)


def _callback_timeouts(engine: Engine, conn: psycopg.AsyncConnection[Any], limit: int,
                       staleness_s: float, dlq_enabled: Callable[[str], bool]
                       ) -> Awaitable[RescueBatch]:
    return engine.rescue_callback_timeouts(conn, limit=limit, dlq_enabled=dlq_enabled)


@dataclass(frozen=True)
class RescueKind:
    """One way an attempt ends without its handler saying so."""

    name: str            # the awa.rescue.kind attribute value
    error: str           # the seed's error text, also the local handler's cancel reason
    run: RescueRun       # the engine's rescue of this kind, one batch


HEARTBEAT_STALE = RescueKind("heartbeat", lifecycle.HEARTBEAT_STALE_ERROR, _stale_heartbeats)
DEADLINE_EXCEEDED = RescueKind("deadline", lifecycle.DEADLINE_EXCEEDED_ERROR, _expired_deadlines)
CALLBACK_TIMEOUT = RescueKind("callback", lifecycle.CALLBACK_TIMEOUT_ERROR, _callback_timeouts)


@dataclass
class RescueOutcome:
    retried: int = 0
    failed: int = 0
    dead_lettered: int = 0
    duplicates: int = 0
    statements: int = 0
    batches: int = 0
    # (job_id, run_lease) of every attempt ended here, for the cancel flags.
    ended: list[tuple[int, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.retried + self.failed + self.dead_lettered + self.duplicates

    def add(self, batch: RescueBatch) -> None:
        self.retried += batch.retried
        self.failed += batch.failed
        self.dead_lettered += batch.dead_lettered
        self.duplicates += batch.duplicates
        self.statements += batch.statements
        self.ended.extend(batch.ended)


def _record(kind: RescueKind, batch: RescueBatch) -> None:
    """Metrics and the duplicate log lines of one committed batch."""
    recording.record_rescues(kind.name, [asdict(r) for r in batch.rescued])
    for r in batch.rescued:
        if r.action == "cancel":
            log.warning("job %s (%s) %s: a newer job holds its unique key",
                        r.id, r.kind, lifecycle.RESCUED_AS_DUPLICATE)


async def rescue(pool: AsyncConnectionPool, kind: RescueKind, *,
                 batch_size: int = config.RESCUE_BATCH_SIZE,
                 staleness_ms: int = config.HEARTBEAT_STALENESS_MS,
                 dlq_enabled: Callable[[str], bool] = lambda queue: False,
                 in_flight: Mapping[tuple[int, int], Any] | None = None,
                 max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK,
                 engine: Engine | None = None) -> RescueOutcome:
    """Rescue up to ``max_batches`` batches of one kind; flag rescued local handlers."""
    engine = engine or await open_engine(pool)
    outcome = RescueOutcome()
    async with pool.connection() as conn:
        for _ in range(max_batches):
            batch = await kind.run(engine, conn, batch_size, staleness_ms / 1000.0,
                                   dlq_enabled)
            outcome.add(batch)
            _record(kind, batch)
            if batch.found:
                outcome.batches += 1
            if batch.found < batch_size:
                break
    if in_flight:
        for key in outcome.ended:
            ctx = in_flight.get(key)
            if ctx is not None:
                ctx.cancel(kind.error)
    if outcome.total:
        log.info("rescued %d %s jobs: %d retryable, %d failed, %d dead-lettered, "
                 "%d cancelled as duplicates", outcome.total, kind.name, outcome.retried,
                 outcome.failed, outcome.dead_lettered, outcome.duplicates)
    return outcome
