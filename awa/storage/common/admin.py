"""The engine-neutral core of the admin group: reads through the ``awa.jobs`` view every
layout has, queue pause (``awa.queue_meta``) and the DLQ (``awa.dlq_entries``), with the
filter fragments, notifications and row mappers both engines' admin statements use.

Filters are constant SQL fragments joined with AND; values always travel as parameters.
Moving a job between an engine's tables and the DLQ, cancel, retry, drain and the queue
statistics are each engine's own (they write or count its tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from awa import config
from awa.job import JOB_COLUMNS, Job, JobState
from awa.statements import named_statements
from awa.storage.common.fetch import fetch_all, fetch_one
from awa.storage.engine import DlqEntry, DlqFilter, JobDump, QueueCount

_SQL = named_statements("awa.storage.common", "sql/admin.sql")

# --- column lists (constants built from the schema's column names) -----------
_COLUMNS = ", ".join(JOB_COLUMNS)

# --- jobs ------------------------------------------------------------------
GET_JOB = _SQL["get_job"]
LIST_JOBS = f"SELECT {_COLUMNS} FROM awa.jobs"
LIST_JOBS_ORDER = " ORDER BY id DESC LIMIT %(limit)s"
STATE_FILTER = "state = %(state)s::awa.job_state"
KIND_FILTER = "kind = %(kind)s"
QUEUE_FILTER = "queue = %(queue)s"
TAG_FILTER = "tags @> ARRAY[%(tag)s]::text[]"
# Keyset paging of a newest-first job list: the next page starts below the last id seen.
JOB_BEFORE_ID_FILTER = "id < %(before_id)s"
NOTIFY = _SQL["notify"]

# --- queues ----------------------------------------------------------------
PAUSE_QUEUE = _SQL["pause_queue"]
RESUME_QUEUE = _SQL["resume_queue"]

# --- dead-letter queue -------------------------------------------------------
DLQ_DEPTH = _SQL["dlq_depth"]
DLQ_DEPTH_BY_QUEUE = _SQL["dlq_depth_by_queue"]
GET_DLQ = _SQL["get_dlq"]
LIST_DLQ = "SELECT * FROM awa.dlq_entries"
LIST_DLQ_ORDER = " ORDER BY dlq_at DESC, job_id DESC LIMIT %(limit)s"
BEFORE_CURSOR_FILTER = "(dlq_at, job_id) < (%(before_dlq_at)s, %(before_id)s)"
BEFORE_ID_FILTER = "job_id < %(before_id)s"
BEFORE_DLQ_AT_FILTER = "dlq_at < %(before_dlq_at)s"
PURGE_DLQ = "DELETE FROM awa.dlq_entries"
PURGE_DLQ_JOB = _SQL["purge_dlq_job"]
# Wraps a PURGE_DLQ statement: how many entries per queue it deleted (for the metric).
PURGE_COUNTED = ("WITH purged AS ({purge} RETURNING queue) "
                 "SELECT queue, count(*) AS n FROM purged GROUP BY queue")
DLQ_IDS = "SELECT job_id FROM awa.dlq_entries WHERE {filter} ORDER BY job_id"

_FRAGMENTS = {"state": STATE_FILTER, "kind": KIND_FILTER, "queue": QUEUE_FILTER,
              "tag": TAG_FILTER, "before_id": JOB_BEFORE_ID_FILTER}


def filters(**values: Any) -> tuple[list[str], dict[str, Any]]:
    """Constant SQL fragments for the filters given, and their parameters."""
    chosen = [_FRAGMENTS[name] for name, value in values.items() if value is not None]
    return chosen, {k: v for k, v in values.items() if v is not None}


def dlq_filters(where: DlqFilter) -> tuple[list[str], dict[str, Any]]:
    chosen, params = filters(kind=where.kind, queue=where.queue, tag=where.tag)
    if where.before_id is not None and where.before_dlq_at is not None:
        chosen.append(BEFORE_CURSOR_FILTER)
    elif where.before_id is not None:
        chosen.append(BEFORE_ID_FILTER)
    elif where.before_dlq_at is not None:
        chosen.append(BEFORE_DLQ_AT_FILTER)
    params.update({k: v for k, v in (("before_id", where.before_id),
                                     ("before_dlq_at", where.before_dlq_at)) if v is not None})
    return chosen, params


def where_sql(chosen: list[str]) -> str:
    return " WHERE " + " AND ".join(chosen) if chosen else ""


def all_of(chosen: list[str]) -> str:
    """A filter for the bulk templates; no filter at all matches everything."""
    return " AND ".join(chosen) if chosen else "true"


def queue_channel(queue: str) -> str:
    return config.NOTIFY_CHANNEL_PREFIX + queue


def dlq_entry(row: dict[str, Any]) -> DlqEntry:
    return DlqEntry(job=Job.from_row({**row, "id": row["job_id"]}), reason=row["dlq_reason"],
                    dlq_at=row["dlq_at"], original_run_lease=row["original_run_lease"])


def queue_counts(rows: list[dict[str, Any]]) -> list[QueueCount]:
    return [QueueCount(r["queue"], int(r["n"])) for r in rows]


def per_queue(rows: Sequence[dict[str, Any]]) -> list[QueueCount]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["queue"]] = counts.get(row["queue"], 0) + 1
    return [QueueCount(queue, n) for queue, n in counts.items()]


async def notify(conn: psycopg.AsyncConnection[Any], channel: str, payload: str = "") -> None:
    await conn.execute(NOTIFY, {"channel": channel, "payload": payload})


async def notify_queues(conn: psycopg.AsyncConnection[Any], rows: list[dict[str, Any]]) -> None:
    """Wake the dispatchers of every queue that got an available job."""
    for queue in sorted({r["queue"] for r in rows if r["state"] == "available"}):
        await notify(conn, queue_channel(queue))


class SharedAdmin:
    """The engine-neutral part of the admin group: job lookups and lists through the
    ``awa.jobs`` view, queue pause and resume, and the DLQ's reads and purges."""

    # -- jobs --------------------------------------------------------------
    async def get_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        row = await fetch_one(conn, GET_JOB, {"id": job_id})
        return Job.from_row(row) if row else None

    async def dump_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> JobDump | None:
        row = await fetch_one(conn, GET_JOB, {"id": job_id})
        if row is None:
            return None
        return JobDump(Job.from_row(row), row["dlq_reason"], row["dlq_at"])

    async def list_jobs(self, conn: psycopg.AsyncConnection[Any], *,
                        state: JobState | None = None, kind: str | None = None,
                        queue: str | None = None, tag: str | None = None,
                        limit: int = 100, before_id: int | None = None) -> list[Job[Any]]:
        chosen, params = filters(state=None if state is None else JobState(state).value,
                                  kind=kind, queue=queue, tag=tag, before_id=before_id)
        params["limit"] = limit
        rows = await fetch_all(conn, LIST_JOBS + where_sql(chosen) + LIST_JOBS_ORDER, params)
        return [Job.from_row(r) for r in rows]

    # -- queues ------------------------------------------------------------
    async def pause_queue(self, conn: psycopg.AsyncConnection[Any], queue: str,
                          paused_by: str | None = None) -> None:
        await conn.execute(PAUSE_QUEUE, {"queue": queue, "paused_by": paused_by})

    async def resume_queue(self, conn: psycopg.AsyncConnection[Any], queue: str) -> None:
        async with conn.transaction():
            await conn.execute(RESUME_QUEUE, {"queue": queue})
            await notify(conn, queue_channel(queue))

    # -- dead-letter queue ---------------------------------------------------
    async def dlq_depth(self, conn: psycopg.AsyncConnection[Any], *,
                        queue: str | None = None) -> int:
        chosen, params = filters(queue=queue)
        row = await fetch_one(conn, DLQ_DEPTH + where_sql(chosen), params)
        return int(row["n"]) if row else 0

    async def dlq_depth_by_queue(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueCount]:
        return queue_counts(await fetch_all(conn, DLQ_DEPTH_BY_QUEUE))

    async def get_dlq_job(self, conn: psycopg.AsyncConnection[Any],
                          job_id: int) -> DlqEntry | None:
        row = await fetch_one(conn, GET_DLQ, {"id": job_id})
        return dlq_entry(row) if row else None

    async def list_dlq(self, conn: psycopg.AsyncConnection[Any], where: DlqFilter,
                       limit: int = 100) -> list[DlqEntry]:
        chosen, params = dlq_filters(where)
        params["limit"] = limit
        rows = await fetch_all(conn, LIST_DLQ + where_sql(chosen) + LIST_DLQ_ORDER, params)
        return [dlq_entry(r) for r in rows]

    async def purge_dlq(self, conn: psycopg.AsyncConnection[Any],
                        where: DlqFilter) -> list[QueueCount]:
        chosen, params = dlq_filters(where)
        return queue_counts(await fetch_all(
            conn, PURGE_COUNTED.format(purge=PURGE_DLQ + where_sql(chosen)), params))

    async def purge_dlq_job(self, conn: psycopg.AsyncConnection[Any],
                            job_id: int) -> list[QueueCount]:
        return queue_counts(await fetch_all(conn, PURGE_COUNTED.format(purge=PURGE_DLQ_JOB),
                                         {"id": job_id}))


# The row per queue of ``queue stats``, every engine's: after the engine's own CTEs
# ``counts`` (queue, state, n), ``completed`` (queue, n: the last hour's completions),
# ``lag`` (queue, seconds) and ``queues`` (every queue to report).
QUEUE_STATS_ROWS = """
SELECT q.queue,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'available'), 0)::bigint AS available,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'running'), 0)::bigint AS running,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'failed'), 0)::bigint AS failed,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'scheduled'), 0)::bigint AS scheduled,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'retryable'), 0)::bigint AS retryable,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'waiting_external'), 0)::bigint
           AS waiting_external,
       COALESCE(max(d.n), 0)::bigint AS completed_last_hour,
       CASE WHEN max(l.seconds) IS NOT NULL THEN GREATEST(max(l.seconds), 0) END AS lag_seconds,
       COALESCE(bool_or(m.paused), false) AS paused
  FROM queues q
  LEFT JOIN counts c ON c.queue = q.queue
  LEFT JOIN completed d ON d.queue = q.queue
  LEFT JOIN lag l ON l.queue = q.queue
  LEFT JOIN awa.queue_meta m ON m.queue = q.queue
 GROUP BY q.queue
 ORDER BY q.queue"""
