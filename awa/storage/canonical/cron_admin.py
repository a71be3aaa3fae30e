"""Canonical engine: the cron-admin group of the Engine protocol.

Stored schedules in ``awa.cron_jobs`` are the engine-neutral core's
(``awa.storage.common.cron``); this engine adds triggering a run, inserted
into ``awa.jobs_hot``.  Firing on schedule is the maintenance leader's (cron CAS).
"""

from __future__ import annotations

from typing import Any

import psycopg

from awa.job import Job
from awa.statements import named_statements
from awa.storage.common.cron import CronAdmin
from awa.storage.common.fetch import fetch_one

TRIGGER_CRON_JOB = named_statements("awa.storage.canonical", "sql/cron_admin.sql")[
    "trigger_cron_job"]


class CanonicalCronAdmin(CronAdmin):
    """The cron-admin group of the Engine protocol on the canonical engine: the shared
    schedules (``common.cron``) and a triggered run inserted into ``awa.jobs_hot``."""

    async def trigger_cron_job(self, conn: psycopg.AsyncConnection[Any],
                               name: str) -> Job[Any] | None:
        row = await fetch_one(conn, TRIGGER_CRON_JOB, {"name": name})
        return None if row is None else Job.from_row(row)
