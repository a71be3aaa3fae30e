"""Cron evaluation on the leader: enqueue each due slot exactly once.

Per schedule, one transaction advances ``last_enqueued_at`` with a
compare-and-set against the value read and, only if that update matched,
inserts the slot's job(s).  A second evaluator (a new leader after failover,
or a deposed one still finishing its tick) sees the advanced value, matches
nothing and enqueues nothing.  Paused schedules are skipped.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from awa import config
from awa.cron import due_slots
from awa.runtime.maintenance import recording
from awa.storage.canonical import maintenance as sql

log = logging.getLogger("awa.maintenance.cron")


@dataclass
class CronOutcome:
    fired: dict[str, int] = field(default_factory=dict)
    lost_races: int = 0


async def evaluate(pool: AsyncConnectionPool, *,
                   catch_up_limit: int = config.CRON_CATCH_UP_MAX_PER_TICK) -> CronOutcome:
    outcome = CronOutcome()
    async with pool.connection() as conn:
        schedules = await (await conn.execute(sql.SELECT_ACTIVE_CRON_JOBS)).fetchall()
        for s in schedules:
            after = s["last_enqueued_at"] or s["created_at"]
            try:
                slots = due_slots(s["cron_expr"], s["timezone"], s["missed_fire_policy"],
                                  after, s["db_now"], catch_up_limit)
            except (ValueError, KeyError) as exc:
                # A row written by hand (not through periodic()) can be invalid.
                log.error("cron job %r cannot be evaluated: %s", s["name"],
                          " ".join(str(exc).split()))
                continue
            if not slots:
                continue
            async with conn.transaction():
                advanced = await (await conn.execute(sql.ADVANCE_CRON_JOB, {
                    "name": s["name"], "slot": slots[-1],
                    "previous": s["last_enqueued_at"]})).fetchone()
                if advanced is None:
                    outcome.lost_races += 1
                    continue
                cur = await conn.execute(sql.INSERT_CRON_RUNS, {
                    "kind": s["kind"], "queue": s["queue"], "args": json.dumps(s["args"]),
                    "priority": s["priority"], "max_attempts": s["max_attempts"],
                    "metadata": json.dumps(s["metadata"]), "name": s["name"],
                    "tags": s["tags"], "slots": slots})
                n = cur.rowcount
            outcome.fired[s["name"]] = n
            recording.record_cron_fired(s["name"], s["queue"], n)
            log.info("cron %r fired %d job(s) for %s", s["name"], n,
                     ", ".join(x.isoformat() for x in slots))
    return outcome
