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

from awa.statements import named_statements
from awa.storage.common.fetch import fetch_one
from awa.storage.engine import CronJobInfo, CronSchedule

_SQL = named_statements("awa.storage.common", "sql/cron.sql")

UPSERT_CRON_JOBS = _SQL["upsert_cron_jobs"]
LIST_CRON_JOBS = _SQL["list_cron_jobs"]
GET_CRON_JOB = _SQL["get_cron_job"]
DELETE_CRON_JOB = _SQL["delete_cron_job"]
PAUSE_CRON_JOB = _SQL["pause_cron_job"]
RESUME_CRON_JOB = _SQL["resume_cron_job"]
SELECT_ACTIVE_CRON_JOBS = _SQL["select_active_cron_jobs"]

# Compare-and-set: only the evaluator that still sees the previous value
# advances the schedule, so a slot fires once even across leader failover.
ADVANCE_CRON_JOB = _SQL["advance_cron_job"]


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
