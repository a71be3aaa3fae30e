"""Queue storage: the admin group (jobs, queues, the DLQ).

Reads go through the ``awa.jobs`` view and ``awa.dlq_entries`` as on every
engine (the engine-neutral ``awa.storage.common.admin``), but for the job list and the
queue statistics, which read each part of the layout by its own index
(``reads.newest_jobs``, ``QUEUE_STATS``).  Out-of-band writes are rare,
so they may delete: a terminal ``done_entries`` row leaves when the job is
retried, a ``deferred_jobs`` row when it is cancelled.  An available job is
never deleted from ``ready_entries``: it gets a ``ready_tombstones`` row,
written while its lane's claim head is locked so no claim can race it.
The statements are in ``sql/admin.sql``, read by name, but for the redrives, which append to
a lane through ``enqueue.APPEND_READY``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from awa import config
from awa.job import JOB_COLUMNS, Job, JobState
from awa.storage.common.admin import (
    DLQ_IDS,
    SharedAdmin,
    all_of,
    dlq_entry,
    filters,
    notify,
    per_queue,
)
from awa.storage.common.collisions import apply_batch_or_each
from awa.storage.common.enqueue import unique_error
from awa.storage.engine import (
    AttemptWrite,
    DlqEntry,
    DlqFilter,
    KindQueueCount,
    QueueCount,
    QueueStat,
    RetryFailedResult,
)
from awa.storage.queue_storage import reads
from awa.storage.queue_storage.enqueue import APPEND_READY
from awa.storage.queue_storage.execution import END_ATTEMPTS, RESOLVE_CALLBACKS, finish
from awa.storage.queue_storage.procedures import named
from awa.storage.queue_storage.schema import InSchema

_COLUMNS = ", ".join(JOB_COLUMNS)

CURRENT = named("admin.sql", "current")

# The live ready entries of jobs and their lanes, and the lanes' claim heads, locked.
LIVE_READY = named("admin.sql", "live_ready")
LOCK_LANES = named("admin.sql", "lock_lanes")

# Tombstone the (still live, rechecked under the lane lock) ready entries of the jobs and
# record them cancelled; cancel deferred jobs.
CANCEL_READY = named("admin.sql", "cancel_ready")
CANCEL_DEFERRED = named("admin.sql", "cancel_deferred")

_NULL_TYPES = {"callback_id": "uuid", "heartbeat_at": "timestamptz", "deadline_at": "timestamptz",
               "finalized_at": "timestamptz", "callback_timeout_at": "timestamptz"}

# A terminal job runnable again: out of done_entries, appended to its lane
# with a fresh attempt budget (same id, same run_lease).
_REDRIVE_DONE = """
WITH d AS MATERIALIZED (
    DELETE FROM awa.done_entries
     WHERE id = ANY(%(ids)s::bigint[]) AND state = ANY(%(states)s::awa.job_state[])
    RETURNING *
), src AS (
    SELECT id, kind, queue, args, priority, 0::smallint AS attempt, max_attempts,
           now() AS run_at, attempted_at, created_at, errors, metadata, tags, unique_key,
           unique_states, run_lease, progress
      FROM d
)""" + APPEND_READY + """
, uq AS (
    INSERT INTO awa.job_unique_claims (unique_key, job_id)
    SELECT d.unique_key, d.id FROM d
     WHERE d.unique_key IS NOT NULL AND awa.qs_in_mask(d.unique_states, 'available')
       AND NOT EXISTS (SELECT 1 FROM awa.job_unique_claims x
                        WHERE x.unique_key = d.unique_key AND x.job_id = d.id)
)
SELECT """ + ", ".join(
    "'available'::awa.job_state AS state" if c == "state"
    else "0::smallint AS attempt" if c == "attempt"
    else "now() AS run_at" if c == "run_at"
    else f"NULL::{_NULL_TYPES.get(c, 'text')} AS {c}"
    if c in ("heartbeat_at", "deadline_at", "finalized_at", "callback_id", "callback_timeout_at",
             "callback_filter", "callback_on_complete", "callback_on_fail", "callback_transform")
    else f"d.{c}" for c in JOB_COLUMNS) + """
  FROM d"""
RETRY_DONE = _REDRIVE_DONE
# Drain: the lanes of a queue locked, its live ready entries and deferred jobs cancelled,
# then its callback waits (their leases end 'cancelled').
LOCK_QUEUE_LANES = named("admin.sql", "lock_queue_lanes")
DRAIN_QUEUE = named("admin.sql", "drain_queue")
KINDS_OF = named("admin.sql", "kinds_of")
WAITING_IN_QUEUE = named("admin.sql", "waiting_in_queue")

# The queue statistics every engine reports, each state counted where it lives rather than
# through awa.jobs (whose available part reads every ready entry of the ring).
QUEUE_STATS = named("admin.sql", "queue_stats")

_REDRIVE_DLQ = """
WITH m AS (DELETE FROM awa.dlq_entries WHERE {filter} RETURNING *),
s0 AS MATERIALIZED (
    SELECT m.job_id AS id, m.kind, COALESCE(%(queue)s, m.queue) AS queue, m.args,
           COALESCE(%(priority)s::smallint, m.priority) AS priority, 0::smallint AS attempt,
           m.max_attempts, COALESCE(%(run_at)s::timestamptz, now()) AS run_at, m.attempted_at,
           m.created_at, m.errors, m.metadata, m.tags, m.unique_key, m.unique_states,
           m.original_run_lease AS run_lease, m.progress,
           COALESCE(%(run_at)s::timestamptz, now()) > now() AS deferred
      FROM m
), src AS (SELECT * FROM s0 WHERE NOT deferred)""" + APPEND_READY + """
, later AS (
    INSERT INTO awa.deferred_jobs (""" + _COLUMNS + """)
    SELECT id, kind, queue, args, 'scheduled', priority, attempt, max_attempts, run_at, NULL,
           NULL, attempted_at, NULL, created_at, errors, metadata, tags, unique_key,
           unique_states, NULL, NULL, NULL, NULL, NULL, NULL, run_lease, progress
      FROM s0 WHERE deferred
), uq AS (
    INSERT INTO awa.job_unique_claims (unique_key, job_id)
    SELECT unique_key, id FROM s0
     WHERE unique_key IS NOT NULL AND awa.qs_in_mask(unique_states,
           CASE WHEN deferred THEN 'scheduled' ELSE 'available' END::awa.job_state)
       AND NOT EXISTS (SELECT 1 FROM awa.job_unique_claims x
                        WHERE x.unique_key = s0.unique_key AND x.job_id = s0.id)
)
SELECT """ + ", ".join(
    "CASE WHEN deferred THEN 'scheduled' ELSE 'available' END::awa.job_state AS state"
    if c == "state" else f"NULL AS {c}"
    if c in ("heartbeat_at", "deadline_at", "finalized_at", "callback_id", "callback_timeout_at",
             "callback_filter", "callback_on_complete", "callback_on_fail", "callback_transform")
    else c for c in JOB_COLUMNS) + """
  FROM s0"""
RETRY_FROM_DLQ = _REDRIVE_DLQ.format(filter="job_id = %(id)s")
RETRY_FROM_DLQ_IDS = _REDRIVE_DLQ.format(filter="job_id = ANY(%(ids)s::bigint[])")

MOVE_FAILED_TO_DLQ = named("admin.sql", "move_failed_to_dlq")
# Per filter given (kind, queue): the failed jobs' ids, and their move to the DLQ.
_BY_FILTER = {(False, False): "", (True, False): "_of_kind", (False, True): "_in_queue",
              (True, True): "_of_kind_in_queue"}
FAILED_IDS = {given: named("admin.sql", f"failed_ids{suffix}")
              for given, suffix in _BY_FILTER.items()}
BULK_MOVE_FAILED_TO_DLQ = {given: named("admin.sql", f"bulk_move_failed_to_dlq{suffix}")
                           for given, suffix in _BY_FILTER.items()}
CLEAN_FOR_TESTS = named("admin.sql", "clean_for_tests")
DISCARD_FAILED = named("admin.sql", "discard_failed")


class QueueStorageAdmin(InSchema, SharedAdmin):
    """The admin group on queue storage; lookups, queue pause and DLQ reads are the core's."""

    async def _lock_lanes(self, conn: psycopg.AsyncConnection[Any], ids: Sequence[int]) -> None:
        """Lock the claim heads of the lanes holding these jobs' live ready entries."""
        lanes = sorted({(r["queue"], r["priority"], r["shard"])
                        for r in await self._rows(conn, LIVE_READY, {"ids": list(ids)})})
        if lanes:
            await conn.execute(self.sql(LOCK_LANES), {"queues": [q for q, _, _ in lanes],
                                                      "priorities": [p for _, p, _ in lanes],
                                                      "shards": [s for _, _, s in lanes]})

    async def list_jobs(self, conn: psycopg.AsyncConnection[Any], *,
                        state: JobState | None = None, kind: str | None = None,
                        queue: str | None = None, tag: str | None = None,
                        limit: int = 100, before_id: int | None = None) -> list[Job[Any]]:
        # Each part of the layout newest first by its own index (reads.newest_jobs), not
        # the awa.jobs view, whose available part reads every ready entry.
        rows = await reads.newest_jobs(
            self, conn, reads.JOB_ROW_COLUMNS,
            {"kind": kind, "queue": queue, "tag": tag, "before_id": before_id},
            state=None if state is None else JobState(state).value, limit=limit)
        return [Job.from_row(r) for r in rows]

    async def cancel(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        async with conn.transaction():
            current = await self._row(conn, CURRENT, {"id": job_id})
            if current is None:
                return None
            state = current["state"]
            if state == "available":
                await self._lock_lanes(conn, [job_id])
                row = await self._row(conn, CANCEL_READY,
                                      {"ids": [job_id], "reason": "cancelled"})
                return Job.from_row(row) if row else None
            if state in ("scheduled", "retryable"):
                row = await self._row(conn, CANCEL_DEFERRED, {"ids": [job_id]})
                return Job.from_row(row) if row else None
            if state not in ("running", "waiting_external"):
                return None
            attempt = AttemptWrite(job_id, current["run_lease"])
            done = await finish(conn, self.schema, END_ATTEMPTS, [attempt], "cancelled",
                                "cancelled", from_states=("running", "waiting_external"))
            if not done:
                return None
            payload = json.dumps({"job_id": job_id, "run_lease": current["run_lease"]})
            await notify(conn, config.CANCEL_CHANNEL, payload)
        return await self.get_job(conn, job_id)

    async def retry(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        try:
            async with conn.transaction():
                current = await self._row(conn, CURRENT, {"id": job_id})
                if current is not None and current["state"] == "waiting_external":
                    # The parked attempt ends; the job is appended afresh (attempt 0).
                    attempt = AttemptWrite(job_id, current["run_lease"])
                    done = await finish(conn, self.schema, RESOLVE_CALLBACKS, [attempt],
                                        "available", "available",
                                        from_states=("waiting_external",))
                    return await self.get_job(conn, job_id) if done else None
                row = await self._row(conn, RETRY_DONE,
                                 {"ids": [job_id], "states": ["failed", "cancelled"]})
        except pg_errors.UniqueViolation as exc:
            raise (unique_error(exc, f"retry job {job_id}") or exc) from None
        return Job.from_row(row) if row else None

    async def retry_failed(self, conn: psycopg.AsyncConnection[Any], *, kind: str | None = None,
                           queue: str | None = None) -> RetryFailedResult:
        params = {k: v for k, v in (("kind", kind), ("queue", queue)) if v is not None}

        async def retry_ids(ids: Sequence[int]) -> list[dict[str, Any]]:
            return await self._rows(conn, RETRY_DONE, {"ids": list(ids), "states": ["failed"]})

        async with conn.transaction():
            ids = [r["id"] for r in await self._rows(
                conn, FAILED_IDS[kind is not None, queue is not None], params)]
            outcome = await apply_batch_or_each(conn, ids, batch=retry_ids, what="retry_failed")
        jobs = [Job.from_row(r) for r in outcome.applied]
        if not outcome.degraded:
            return RetryFailedResult(jobs, len(jobs))
        return RetryFailedResult(jobs, len(ids), skipped=len(ids) - len(jobs))

    async def discard_failed(self, conn: psycopg.AsyncConnection[Any], kind: str) -> int:
        async with conn.cursor() as cur:
            await cur.execute(self.sql(DISCARD_FAILED), {"kind": kind})
            return cur.rowcount

    async def drain_queue(self, conn: psycopg.AsyncConnection[Any],
                          queue: str) -> list[KindQueueCount]:
        async with conn.transaction():
            await conn.execute(self.sql(LOCK_QUEUE_LANES), {"queue": queue})
            rows = await self._rows(conn, DRAIN_QUEUE, {"queue": queue})
            waiting = [AttemptWrite(r["job_id"], r["run_lease"])
                       for r in await self._rows(conn, WAITING_IN_QUEUE, {"queue": queue})]
            ended = await finish(conn, self.schema, END_ATTEMPTS, waiting, "cancelled",
                                 "cancelled", from_states=("waiting_external",)) if waiting else []
            counts = {r["kind"]: int(r["drained"]) for r in rows}
            for r in await self._rows(conn, KINDS_OF, {"ids": ended}) if ended else []:
                counts[r["kind"]] = counts.get(r["kind"], 0) + int(r["n"])
        return [KindQueueCount(kind, queue, n) for kind, n in sorted(counts.items())]

    async def queue_stats(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueStat]:
        return [QueueStat(**row) for row in await reads.custom_planned(self, conn, QUEUE_STATS,
                                                                       {})]

    async def retry_from_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                             run_at: datetime | None = None, priority: int | None = None,
                             queue: str | None = None) -> Job[Any] | None:
        params = {"id": job_id, "run_at": run_at, "priority": priority, "queue": queue}
        try:
            rows = await self._rows(conn, RETRY_FROM_DLQ, params)
        except pg_errors.UniqueViolation as exc:
            raise (unique_error(exc, f"retry DLQ job {job_id}") or exc) from None
        return Job.from_row(rows[0]) if rows else None

    async def bulk_retry_from_dlq(self, conn: psycopg.AsyncConnection[Any],
                                  where: DlqFilter) -> list[QueueCount]:
        chosen, params = filters(kind=where.kind, queue=where.queue, tag=where.tag)

        async def redrive(ids: Sequence[int]) -> list[dict[str, Any]]:
            return await self._rows(conn, RETRY_FROM_DLQ_IDS, {
                "ids": list(ids), "run_at": None, "priority": None, "queue": None})

        async with conn.transaction():
            ids = [r["job_id"] for r in await self._rows(
                conn, DLQ_IDS.format(filter=all_of(chosen)), params)]
            outcome = await apply_batch_or_each(conn, ids, batch=redrive,
                                                what="bulk_retry_from_dlq")
        return per_queue(outcome.applied)

    async def move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                 reason: str) -> DlqEntry | None:
        row = await self._row(conn, MOVE_FAILED_TO_DLQ, {"id": job_id, "reason": reason})
        return dlq_entry(row) if row else None

    async def bulk_move_failed_to_dlq(self, conn: psycopg.AsyncConnection[Any], *,
                                      kind: str | None = None, queue: str | None = None,
                                      reason: str) -> list[KindQueueCount]:
        params = {k: v for k, v in (("kind", kind), ("queue", queue)) if v is not None}
        params["reason"] = reason
        rows = await self._rows(
            conn, BULK_MOVE_FAILED_TO_DLQ[kind is not None, queue is not None], params)
        return [KindQueueCount(r["kind"], r["queue"], int(r["n"])) for r in rows]

    async def clean_for_tests(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            await conn.execute(self.sql(CLEAN_FOR_TESTS))


__all__ = ["QueueStorageAdmin", "JobState"]
