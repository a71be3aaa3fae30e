"""The engine-neutral core: stored cron schedules.

Schedules live in ``awa.cron_jobs``, a control table every layout shares; declarations
upsert them (keeping ``last_enqueued_at`` and pause state, so a redeploy neither re-fires a
slot nor resumes a paused schedule) and operators list, pause, resume and delete them.  The
maintenance leader reads the active ones and advances a schedule by compare-and-set
(``ADVANCE_CRON_JOB``) before its engine inserts the runs; triggering a run, like inserting
one, is each engine's own statement.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa.storage.common.fetch import fetch_one
from awa.storage.engine import CronJobInfo, CronSchedule

UPSERT_CRON_JOBS = """
INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, args, priority,
                           max_attempts, tags, metadata, missed_fire_policy)
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
       metadata, missed_fire_policy
  FROM jsonb_to_recordset(%(schedules)s::jsonb) AS t(
       name text, cron_expr text, timezone text, kind text, queue text, args jsonb,
       priority smallint, max_attempts smallint, tags text[], metadata jsonb,
       missed_fire_policy text)
ON CONFLICT (name) DO UPDATE
   SET cron_expr = EXCLUDED.cron_expr, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
       queue = EXCLUDED.queue, args = EXCLUDED.args, priority = EXCLUDED.priority,
       max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags,
       metadata = EXCLUDED.metadata, missed_fire_policy = EXCLUDED.missed_fire_policy,
       updated_at = now()
 WHERE (awa.cron_jobs.cron_expr, awa.cron_jobs.timezone, awa.cron_jobs.kind,
        awa.cron_jobs.queue, awa.cron_jobs.args, awa.cron_jobs.priority,
        awa.cron_jobs.max_attempts, awa.cron_jobs.tags, awa.cron_jobs.metadata,
        awa.cron_jobs.missed_fire_policy)
       IS DISTINCT FROM
       (EXCLUDED.cron_expr, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.args,
        EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags, EXCLUDED.metadata,
        EXCLUDED.missed_fire_policy)
"""

LIST_CRON_JOBS = """
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs
 ORDER BY name
"""

GET_CRON_JOB = """
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs
 WHERE name = %(name)s
"""

DELETE_CRON_JOB = "DELETE FROM awa.cron_jobs WHERE name = %(name)s RETURNING name"

PAUSE_CRON_JOB = """
UPDATE awa.cron_jobs
   SET paused_at = coalesce(paused_at, now()), paused_by = %(paused_by)s, updated_at = now()
 WHERE name = %(name)s
RETURNING name
"""

RESUME_CRON_JOB = """
UPDATE awa.cron_jobs
   SET paused_at = NULL, paused_by = NULL, updated_at = now()
 WHERE name = %(name)s
RETURNING name
"""

SELECT_ACTIVE_CRON_JOBS = """
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
       metadata, missed_fire_policy, last_enqueued_at, created_at, now() AS db_now
  FROM awa.cron_jobs
 WHERE paused_at IS NULL
 ORDER BY name
"""

# Compare-and-set: only the evaluator that still sees the previous value
# advances the schedule, so a slot fires once even across leader failover.
ADVANCE_CRON_JOB = """
UPDATE awa.cron_jobs
   SET last_enqueued_at = %(slot)s, updated_at = now()
 WHERE name = %(name)s
   AND paused_at IS NULL
   AND last_enqueued_at IS NOT DISTINCT FROM %(previous)s
RETURNING name
"""


def cron_info(row: dict[str, Any]) -> CronJobInfo:
    return CronJobInfo(**{f.name: row[f.name] for f in fields(CronJobInfo)})


class CronAdmin:
    """The engine-neutral part of the cron-admin group: everything but triggering a run."""

    async def upsert_cron_jobs(self, conn: psycopg.AsyncConnection[Any],
                               schedules: list[CronSchedule]) -> int:
        if not schedules:
            return 0
        payload = json.dumps([asdict(s) for s in schedules])
        cur = await conn.execute(UPSERT_CRON_JOBS, {"schedules": payload})
        return cur.rowcount

    async def list_cron_jobs(self, conn: psycopg.AsyncConnection[Any]) -> list[CronJobInfo]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(LIST_CRON_JOBS)
            return [cron_info(r) for r in await cur.fetchall()]

    async def get_cron_job(self, conn: psycopg.AsyncConnection[Any],
                           name: str) -> CronJobInfo | None:
        row = await fetch_one(conn, GET_CRON_JOB, {"name": name})
        return None if row is None else cron_info(row)

    async def delete_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        return await fetch_one(conn, DELETE_CRON_JOB, {"name": name}) is not None

    async def pause_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str,
                             paused_by: str | None) -> bool:
        return await fetch_one(conn, PAUSE_CRON_JOB,
                               {"name": name, "paused_by": paused_by}) is not None

    async def resume_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        return await fetch_one(conn, RESUME_CRON_JOB, {"name": name}) is not None
