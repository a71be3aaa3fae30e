"""Canonical engine: the admin group of the Engine protocol (jobs, queues, the DLQ).

Reads through the ``awa.jobs`` view, queue pause and the DLQ's reads are the
engine-neutral core's (``awa.storage.common.admin``).  Every read is
index-backed: lookups by id, by ``(state, queue, id)``, ``(kind, state)`` or
the finalized index; nothing scans a jobs table without a leading-column
predicate.  This engine's own statements are whole in ``sql/admin.sql``, one per
filter given; values always travel as parameters.  A job moving between
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
from awa.job import Job
from awa.statements import named_statements
from awa.storage.common.admin import (
    DLQ_IDS,
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
from awa.storage.engine import (
    DlqEntry,
    DlqFilter,
    KindQueueCount,
    QueueCount,
    QueueStat,
    RetryFailedResult,
)

# Every statement of this group is in sql/admin.sql, read once, at import.
_SQL = named_statements("awa.storage.canonical", "sql/admin.sql")

# --- jobs ------------------------------------------------------------------
CANCEL_LIVE = _SQL["cancel_live"]
CANCEL_DEFERRED = _SQL["cancel_deferred"]
RETRY_JOB = _SQL["retry_job"]
RETRY_FAILED_IDS = _SQL["retry_failed_ids"]
# Per filter given (kind, queue): the failed jobs' ids, and their move to the DLQ.
_BY_FILTER = {(False, False): "", (True, False): "_of_kind", (False, True): "_in_queue",
              (True, True): "_of_kind_in_queue"}
FAILED_IDS = {given: _SQL[f"failed_ids{suffix}"] for given, suffix in _BY_FILTER.items()}
DISCARD_FAILED = _SQL["discard_failed"]
# Test isolation (awa.testing): plain DELETEs, so concurrent test workers only wait on rows.
CLEAN_FOR_TESTS = tuple(_SQL[f"clean_{table}"] for table in (
    "runtime_instances", "jobs_hot", "scheduled_jobs", "job_unique_claims", "dlq_entries",
    "queue_meta"))

# --- queues ----------------------------------------------------------------
DRAIN_QUEUE = _SQL["drain_queue"]
QUEUE_STATS = _SQL["queue_stats"]

# --- dead-letter queue -------------------------------------------------------
RETRY_FROM_DLQ = _SQL["retry_from_dlq"]
RETRY_FROM_DLQ_IDS = _SQL["retry_from_dlq_ids"]
MOVE_FAILED_TO_DLQ = _SQL["move_failed_to_dlq"]
BULK_MOVE_FAILED_TO_DLQ = {given: _SQL[f"bulk_move_failed_to_dlq{suffix}"]
                           for given, suffix in _BY_FILTER.items()}


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
        _, params = filters(kind=kind, queue=queue)

        async def retry_ids(ids: Sequence[int]) -> list[dict[str, Any]]:
            return await fetch_all(conn, RETRY_FAILED_IDS, {"ids": list(ids)})

        async with conn.transaction():
            ids = [r["id"] for r in await fetch_all(
                conn, FAILED_IDS[kind is not None, queue is not None], params)]
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
        _, params = filters(kind=kind, queue=queue)
        params["reason"] = reason
        rows = await fetch_all(conn, BULK_MOVE_FAILED_TO_DLQ[kind is not None, queue is not None],
                               params)
        return [KindQueueCount(r["kind"], r["queue"], int(r["n"])) for r in rows]

    async def clean_for_tests(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            for statement in CLEAN_FOR_TESTS:
                await conn.execute(statement)
