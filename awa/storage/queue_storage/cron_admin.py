"""Queue storage: cron admin.  Schedules live in the shared ``awa.cron_jobs``
(the engine-neutral ``awa.storage.common.cron``); a triggered run is appended to its lane."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa.job import JOB_COLUMNS, Job
from awa.storage.common.cron import CronAdmin
from awa.storage.queue_storage.enqueue import APPEND_READY
from awa.storage.queue_storage.schema import InSchema

TRIGGER_CRON_JOB = """
WITH src AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, kind, queue, args, priority, 0::smallint AS attempt,
           max_attempts, now() AS run_at, NULL::timestamptz AS attempted_at, now() AS created_at,
           NULL::jsonb[] AS errors,
           metadata || jsonb_build_object('cron_name', name, 'cron_triggered_at', now())
               AS metadata,
           tags, NULL::bytea AS unique_key, NULL::bit(8) AS unique_states, 0::bigint AS run_lease,
           NULL::jsonb AS progress
      FROM awa.cron_jobs
     WHERE name = %(name)s
)""" + APPEND_READY + """
SELECT """ + ", ".join(
    "'available'::awa.job_state AS state" if c == "state" else f"NULL AS {c}"
    if c in ("heartbeat_at", "deadline_at", "finalized_at", "callback_id", "callback_timeout_at",
             "callback_filter", "callback_on_complete", "callback_on_fail", "callback_transform")
    else f"s.{c}" for c in JOB_COLUMNS) + """
  FROM src s"""


class QueueStorageCronAdmin(InSchema, CronAdmin):
    """Cron admin on queue storage."""

    async def trigger_cron_job(self, conn: psycopg.AsyncConnection[Any],
                               name: str) -> Job[Any] | None:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self.sql(TRIGGER_CRON_JOB), {"name": name})
            row = await cur.fetchone()
        return None if row is None else Job.from_row(row)
