"""Cron evaluation on the leader: enqueue each due slot exactly once.

Per schedule, one transaction advances ``last_enqueued_at`` with a
compare-and-set against the value read and, only if that update matched,
inserts the slot's job(s).  A second evaluator (a new leader after failover,
or a deposed one still finishing its tick) sees the advanced value, matches
nothing and enqueues nothing.  Paused schedules are skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from awa import config, recording
from awa.cron import due_slots
from awa.storage import open_engine
from awa.storage.engine import Engine

log = logging.getLogger("awa.maintenance.cron")


@dataclass
class CronOutcome:
    fired: dict[str, int] = field(default_factory=dict)
    lost_races: int = 0


async def evaluate(pool: AsyncConnectionPool, *,
                   catch_up_limit: int = config.CRON_CATCH_UP_MAX_PER_TICK,
                   engine: Engine | None = None) -> CronOutcome:
    engine = engine or await open_engine(pool)
    outcome = CronOutcome()
    async with pool.connection() as conn:
        for s in await engine.list_active_cron_jobs(conn):
            after = s.last_enqueued_at or s.created_at
            try:
                slots = due_slots(s.cron_expr, s.timezone, s.missed_fire_policy,
                                  after, s.db_now, catch_up_limit)
            except (ValueError, KeyError) as exc:
                # A row written by hand (not through periodic()) can be invalid.
                log.error("cron job %r cannot be evaluated: %s", s.name,
                          " ".join(str(exc).split()))
                continue
            if not slots:
                continue
            fired = await engine.fire_cron(conn, s, slots)
            if not fired.advanced:
                outcome.lost_races += 1
                continue
            n = len(fired.job_ids)
            outcome.fired[s.name] = n
            recording.record_cron_fired(s.name, s.kind, s.queue, n)
            log.info("cron %r fired %d job(s) for %s", s.name, n,
                     ", ".join(x.isoformat() for x in slots))
    return outcome
