"""The cron admin group: the stored schedules behind the client's cron API and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import psycopg

from awa.job import Job
from awa.storage.engine.shared import CronSchedule


@dataclass(frozen=True)
class CronJobInfo(CronSchedule):
    """A stored schedule with its firing and pause state, for ``awa cron list``."""

    last_enqueued_at: datetime | None
    paused_at: datetime | None
    paused_by: str | None
    created_at: datetime
    updated_at: datetime


class CronAdminReads(Protocol):
    """The stored schedules as operators read them (part of ``ReadEngine``)."""

    async def list_cron_jobs(self, conn: psycopg.AsyncConnection[Any]) -> list[CronJobInfo]:
        """Every stored schedule, by name."""
        ...

    async def get_cron_job(self, conn: psycopg.AsyncConnection[Any],
                           name: str) -> CronJobInfo | None:
        ...


class CronAdminOps(CronAdminReads, Protocol):
    """Schedule storage for declarations and operators; firing is the leader's (maintenance)."""

    async def upsert_cron_jobs(self, conn: psycopg.AsyncConnection[Any],
                               schedules: list[CronSchedule]) -> int:
        """Insert or update the schedules; rows changed.  Firing and pause state are kept."""
        ...

    async def delete_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        ...

    async def pause_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str,
                             paused_by: str | None) -> bool:
        """Stop firing (an already paused schedule keeps its ``paused_at``); False if unknown."""
        ...

    async def resume_cron_job(self, conn: psycopg.AsyncConnection[Any], name: str) -> bool:
        ...

    async def trigger_cron_job(self, conn: psycopg.AsyncConnection[Any],
                               name: str) -> Job[Any] | None:
        """Enqueue one available run of the schedule now; the schedule is untouched."""
        ...
