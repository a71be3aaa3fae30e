"""Canonical engine: the admin group of the Engine protocol (jobs, queues, the DLQ).

Reads through the ``awa.jobs`` view, queue pause and the DLQ's reads are the
engine-neutral core's (``awa.storage.common.admin``).  Every read is
index-backed: lookups by id, by ``(state, queue, id)``, ``(kind, state)`` or
the finalized index; nothing scans a jobs table without a leading-column
predicate.  Filters are constant SQL fragments joined with AND; values always
travel as parameters.  A job moving between
``awa.jobs_hot``, ``awa.scheduled_jobs`` and ``awa.dlq_entries`` is DELETEd
and INSERTed in one statement, keeping its id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from awa import config
from awa.job import JOB_COLUMNS, Job
from awa.storage.common.admin import (
    DLQ_IDS,
    NON_ID_COLUMNS,
    QUEUE_STATS_ROWS,
    SharedAdmin,
    all_of,
    dlq_entry,
    filters,
    notify,
    notify_queues,
    per_queue,
    queue_channel,
)
from awa.storage.common.collisions import apply_batch_or_each
from awa.storage.common.enqueue import unique_error
from awa.storage.common.fetch import fetch_all, fetch_one
from awa.storage.common.tables import CANONICAL_DEPTH_COUNTS
from awa.storage.engine import (
    DlqEntry,
    DlqFilter,
    KindQueueCount,
    QueueCount,
    QueueStat,
    RetryFailedResult,
)

# --- column lists (constants built from the schema's column names) -----------
_COLUMNS = ", ".join(JOB_COLUMNS)


def _select_list(overrides: dict[str, str], source: str = "m", id_column: str = "id") -> str:
    """The job columns of ``source`` in table order, some replaced by expressions."""
    parts = []
    for column in JOB_COLUMNS:
        if column in overrides:
            parts.append(f"{overrides[column]} AS {column}")
        elif column == "id":
            parts.append(f"{source}.{id_column} AS id")
        else:
            parts.append(f"{source}.{column}")
    return ", ".join(parts)


_FINALIZED_NOW = {"finalized_at": "now()"}
_FRESH_RUN = {
    "attempt": "0", "heartbeat_at": "NULL", "deadline_at": "NULL", "finalized_at": "NULL",
    "callback_id": "NULL", "callback_timeout_at": "NULL", "callback_filter": "NULL",
    "callback_on_complete": "NULL", "callback_on_fail": "NULL", "callback_transform": "NULL",
}
_FRESH_RUN_SET = ", ".join(f"{k} = {v}" for k, v in _FRESH_RUN.items())

# --- jobs ------------------------------------------------------------------
CANCEL_LIVE = """
UPDATE awa.jobs_hot j
   SET state = 'cancelled', finalized_at = now(), callback_timeout_at = NULL
  FROM (SELECT id, state AS previous_state FROM awa.jobs_hot WHERE id = %(id)s FOR UPDATE) old
 WHERE j.id = old.id AND j.state IN ('available', 'running', 'waiting_external')
RETURNING j.*, old.previous_state"""
CANCEL_DEFERRED = f"""
WITH m AS (DELETE FROM awa.scheduled_jobs WHERE id = %(id)s RETURNING *)
INSERT INTO awa.jobs_hot ({_COLUMNS})
SELECT {_select_list({**_FINALIZED_NOW, "state": "'cancelled'"})} FROM m
RETURNING *"""

# A finished job, or one parked for a callback (as awa-pg 0.6.9: its callback is
# dropped and the attempt it parked ends), runs again from attempt 0.
RETRY_JOB = f"""
UPDATE awa.jobs_hot SET state = 'available', run_at = now(), {_FRESH_RUN_SET}
 WHERE id = %(id)s AND state IN ('failed', 'cancelled', 'waiting_external')
RETURNING *"""
RETRY_FAILED = f"""
UPDATE awa.jobs_hot SET state = 'available', run_at = now(), {_FRESH_RUN_SET}
 WHERE state = 'failed' AND {{filter}}
RETURNING *"""
RETRY_FAILED_IDS = RETRY_FAILED.format(filter="id = ANY(%(ids)s::bigint[])")
FAILED_IDS = "SELECT id FROM awa.jobs_hot WHERE state = 'failed' AND {filter} ORDER BY id"
DISCARD_FAILED = "DELETE FROM awa.jobs_hot WHERE state = 'failed' AND kind = %(kind)s"

# Test isolation (awa.testing): plain DELETEs, so concurrent test workers only wait on rows.
CLEAN_FOR_TESTS = ("DELETE FROM awa.runtime_instances", "DELETE FROM awa.jobs_hot",
                   "DELETE FROM awa.scheduled_jobs", "DELETE FROM awa.job_unique_claims",
                   "DELETE FROM awa.dlq_entries", "DELETE FROM awa.queue_meta")

# --- queues ----------------------------------------------------------------
# Everything of the queue not being run right now, callback waits too (awa-pg 0.6.9).
DRAIN_QUEUE = f"""
WITH live AS (
    UPDATE awa.jobs_hot SET state = 'cancelled', finalized_at = now(), callback_timeout_at = NULL
     WHERE state IN ('available', 'waiting_external') AND queue = %(queue)s
    RETURNING kind
), m AS (
    DELETE FROM awa.scheduled_jobs
     WHERE state IN ('scheduled', 'retryable') AND queue = %(queue)s
    RETURNING *
), moved AS (
    INSERT INTO awa.jobs_hot ({_COLUMNS})
    SELECT {_select_list({**_FINALIZED_NOW, "state": "'cancelled'"})} FROM m
    RETURNING kind
)
SELECT kind, %(queue)s AS queue, count(*) AS drained
  FROM (SELECT kind FROM live UNION ALL SELECT kind FROM moved) AS cancelled
 GROUP BY kind"""
# Each branch is served by an index: (state, queue, id) on both tables, the
# finalized index for the last hour's completions, the claim index for lag.
QUEUE_STATS = f"""
WITH counts AS (
    {CANONICAL_DEPTH_COUNTS}
), completed AS (
    SELECT queue, count(*) AS n FROM awa.jobs_hot
     WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'
     GROUP BY queue
), lag AS (
    SELECT queue, EXTRACT(EPOCH FROM now() - min(run_at))::float8 AS seconds
      FROM awa.jobs_hot WHERE state = 'available' GROUP BY queue
), queues AS (
    SELECT queue FROM counts UNION SELECT queue FROM completed
    UNION SELECT queue FROM awa.queue_meta
)
""" + QUEUE_STATS_ROWS

# --- dead-letter queue -------------------------------------------------------

_REDRIVE = {
    **_FRESH_RUN,
    "queue": "COALESCE(%(queue)s, m.queue)",
    "priority": "COALESCE(%(priority)s::smallint, m.priority)",
    "run_at": "COALESCE(%(run_at)s::timestamptz, now())",
    "run_lease": "m.original_run_lease",
}
# A redriven job keeps its id and run_lease (so a stale write of an old
# attempt still cannot match) and starts with a fresh attempt budget.
_REDRIVE_FROM = f"""
WITH m AS (DELETE FROM awa.dlq_entries WHERE {{filter}} RETURNING *),
hot AS (
    INSERT INTO awa.jobs_hot ({_COLUMNS})
    SELECT {_select_list({**_REDRIVE, "state": "'available'"}, id_column="job_id")} FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) <= now()
    RETURNING *
), later AS (
    INSERT INTO awa.scheduled_jobs ({_COLUMNS})
    SELECT {_select_list({**_REDRIVE, "state": "'scheduled'"}, id_column="job_id")} FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) > now()
    RETURNING *
)
SELECT * FROM hot UNION ALL SELECT * FROM later"""
RETRY_FROM_DLQ = _REDRIVE_FROM.format(filter="job_id = %(id)s")
RETRY_FROM_DLQ_IDS = _REDRIVE_FROM.format(filter="job_id = ANY(%(ids)s::bigint[])")

_TO_DLQ = f"""
WITH m AS (DELETE FROM awa.jobs_hot WHERE state = 'failed' AND {{filter}} RETURNING *),
moved AS (
    INSERT INTO awa.dlq_entries (job_id, {NON_ID_COLUMNS}, dlq_reason, dlq_at,
                                 original_run_lease)
    SELECT id, {NON_ID_COLUMNS}, %(reason)s, now(), run_lease FROM m
    RETURNING *
)"""
MOVE_FAILED_TO_DLQ = _TO_DLQ.format(filter="id = %(id)s") + "\nSELECT * FROM moved"
# The bulk move reports only how many of each (kind, queue) it moved.
BULK_MOVE_FAILED_TO_DLQ = (_TO_DLQ + "\nSELECT kind, queue, count(*) AS n FROM moved "
                           "GROUP BY kind, queue")  # .format(filter=<constant fragments>)

class CanonicalAdmin(SharedAdmin):
    """The admin group of the Engine protocol on the canonical engine."""

    # -- jobs --------------------------------------------------------------
    async def cancel(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        async with conn.transaction():
            row = await fetch_one(conn, CANCEL_LIVE, {"id": job_id})
            if row is None:
                row = await fetch_one(conn, CANCEL_DEFERRED, {"id": job_id})
            elif row["previous_state"] in ("running", "waiting_external"):
                payload = json.dumps({"job_id": row["id"], "run_lease": row["run_lease"]})
                await notify(conn, config.CANCEL_CHANNEL, payload)
        return Job.from_row(row) if row else None

    async def retry(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        try:
            async with conn.transaction():
                row = await fetch_one(conn, RETRY_JOB, {"id": job_id})
                if row is not None:
                    await notify(conn, queue_channel(row["queue"]))
        except pg_errors.UniqueViolation as exc:
            raise (unique_error(exc, f"retry job {job_id}") or exc) from None
        return Job.from_row(row) if row else None

    async def retry_failed(self, conn: psycopg.AsyncConnection[Any], *, kind: str | None = None,
                           queue: str | None = None) -> RetryFailedResult:
        chosen, params = filters(kind=kind, queue=queue)

        async def retry_ids(ids: Sequence[int]) -> list[dict[str, Any]]:
            return await fetch_all(conn, RETRY_FAILED_IDS, {"ids": list(ids)})

        async with conn.transaction():
            ids = [r["id"] for r in await fetch_all(conn, FAILED_IDS.format(filter=all_of(chosen)),
                                                params)]
            outcome = await apply_batch_or_each(conn, ids, batch=retry_ids, what="retry_failed")
            await notify_queues(conn, outcome.applied)
        jobs = [Job.from_row(r) for r in outcome.applied]
        if not outcome.degraded:
            return RetryFailedResult(jobs, len(jobs))
        return RetryFailedResult(jobs, len(ids), skipped=len(ids) - len(jobs))

    async def discard_failed(self, conn: psycopg.AsyncConnection[Any], kind: str) -> int:
        async with conn.cursor() as cur:
            await cur.execute(DISCARD_FAILED, {"kind": kind})
            return cur.rowcount

    # -- queues ------------------------------------------------------------
    async def drain_queue(self, conn: psycopg.AsyncConnection[Any],
                          queue: str) -> list[KindQueueCount]:
        rows = await fetch_all(conn, DRAIN_QUEUE, {"queue": queue})
        return [KindQueueCount(r["kind"], r["queue"], int(r["drained"])) for r in rows]

    async def queue_stats(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueStat]:
        return [QueueStat(**row) for row in await fetch_all(conn, QUEUE_STATS)]

    # -- dead-letter queue ---------------------------------------------------
    async def retry_from_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                             run_at: datetime | None = None, priority: int | None = None,
                             queue: str | None = None) -> Job[Any] | None:
        params = {"id": job_id, "run_at": run_at, "priority": priority, "queue": queue}
        try:
            rows = await fetch_all(conn, RETRY_FROM_DLQ, params)
        except pg_errors.UniqueViolation as exc:
            raise (unique_error(exc, f"retry DLQ job {job_id}") or exc) from None
        return Job.from_row(rows[0]) if rows else None

    async def bulk_retry_from_dlq(self, conn: psycopg.AsyncConnection[Any],
                                  where: DlqFilter) -> list[QueueCount]:
        chosen, params = filters(kind=where.kind, queue=where.queue, tag=where.tag)

        async def redrive(ids: Sequence[int]) -> list[dict[str, Any]]:
            return await fetch_all(conn, RETRY_FROM_DLQ_IDS, {"ids": list(ids), "run_at": None,
                                                         "priority": None, "queue": None})

        async with conn.transaction():
            found = await fetch_all(conn, DLQ_IDS.format(filter=all_of(chosen)), params)
            ids = [r["job_id"] for r in found]
            outcome = await apply_batch_or_each(conn, ids, batch=redrive,
                                                what="bulk_retry_from_dlq")
        return per_queue(outcome.applied)

    async def move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                 reason: str) -> DlqEntry | None:
        row = await fetch_one(conn, MOVE_FAILED_TO_DLQ, {"id": job_id, "reason": reason})
        return dlq_entry(row) if row else None

    async def bulk_move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], *,
                                      kind: str | None = None, queue: str | None = None,
                                      reason: str) -> list[KindQueueCount]:
        chosen, params = filters(kind=kind, queue=queue)
        params["reason"] = reason
        rows = await fetch_all(conn, BULK_MOVE_FAILED_TO_DLQ.format(filter=all_of(chosen)), params)
        return [KindQueueCount(r["kind"], r["queue"], int(r["n"])) for r in rows]

    async def clean_for_tests(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            for statement in CLEAN_FOR_TESTS:
                await conn.execute(statement)
