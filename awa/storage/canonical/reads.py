"""Canonical engine: the ops read side (what awa-ops and awa-tui show).

Every statement is bounded and index-backed: pairs of ``(state, queue)`` are
enumerated by a loose index scan of each table's ``(state, queue, id)`` index
(one probe per pair, however many rows there are), counts stop at a cap and
lists at a limit, so a huge database costs about what a big one does.  The
caller owns the (short, read-only) transaction; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from awa import config
from awa.storage.common.fetch import fetch_all, float_or_none
from awa.storage.common.reads import (
    ARGS_MATCH,
    CANONICAL_KIND_PARTS,
    HOT_RECENTLY_COMPLETED,
    JOB_LIST_COLUMNS,
    JobStatements,
    SharedReads,
    created_buckets,
    job_summary,
)
from awa.storage.common.tables import DEFERRED_STATES, HOT_STATES
from awa.storage.engine import (
    JobListQuery,
    JobSummary,
    QueueDetail,
    RingState,
    StateBucket,
)

# --- queue lag and completions -----------------------------------------------------------
# (Queue depth itself is MaintenanceOps.queue_depths: one rule for every reader.)

# Per queue: the oldest runnable job (one probe per priority of the claim
# index), completions in a window (the finalized index), and the pause flag.
# Queues known only to queue_meta are listed too.
QUEUE_DETAILS = """
WITH q AS (
    SELECT unnest(%(queues)s::text[]) AS queue
    UNION
    SELECT queue FROM awa.queue_meta
), o AS (
    SELECT q.queue,
           (SELECT min(o.run_at) FROM unnest(%(priorities)s::smallint[]) pr(priority)
              CROSS JOIN LATERAL (
                  SELECT h.run_at FROM awa.jobs_hot h
                   WHERE h.state = 'available' AND h.queue = q.queue AND h.priority = pr.priority
                   ORDER BY h.run_at LIMIT 1) o) AS oldest_available,
           CASE WHEN %(since)s::timestamptz IS NULL THEN 0 ELSE
           (SELECT count(*) FROM (SELECT 1 FROM awa.jobs_hot h
              WHERE h.state = 'completed' AND h.queue = q.queue
                AND h.finalized_at > %(since)s AND h.finalized_at <= %(until)s
              LIMIT %(cap)s) c) END AS completed
      FROM q
)
SELECT o.queue, o.oldest_available,
       CASE WHEN o.oldest_available IS NOT NULL
            THEN greatest(EXTRACT(EPOCH FROM (now() - o.oldest_available))::float8, 0) END AS lag_s,
       o.completed, coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by
  FROM o LEFT JOIN awa.queue_meta m ON m.queue = o.queue
 ORDER BY o.queue
"""

# The queues a job completed in lately, by name (common.reads: a probe per queue).
RECENTLY_COMPLETED = HOT_RECENTLY_COMPLETED + "\n ORDER BY w.queue"

# --- running attempts, wedges, repeated errors: common.reads' templates on the hot table ---
STATEMENTS = JobStatements.on("awa.jobs_hot")

# --- job lists ---------------------------------------------------------------------------

# Jobs list for one table: enumerate its (state, queue) pairs (loose index
# scan), keep those the filter allows, take the newest rows of each from the
# (state, queue, id) index, then apply the filters no index serves (kind,
# tag, args).  Without such filters the result is exact; with them it covers the
# newest ``window`` rows.
_JOBS_LIST = """
WITH RECURSIVE pairs AS (
    (SELECT state, queue FROM {table} ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM pairs p CROSS JOIN LATERAL (
        SELECT t.state, t.queue FROM {table} t
         WHERE (t.state, t.queue) > (p.state, p.queue)
         ORDER BY t.state, t.queue LIMIT 1) n
), picked AS (
    SELECT state, queue FROM pairs
     WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     LIMIT %(max_pairs)s
), per_pair AS (
    SELECT CASE WHEN %(post_filtered)s
                THEN greatest(%(page)s, %(window)s / greatest(count(*), 1))
                ELSE %(page)s END AS k
      FROM picked
)
SELECT t.* FROM picked p CROSS JOIN per_pair CROSS JOIN LATERAL (
    SELECT {columns}, {args_match} FROM {table} t
     WHERE t.state = p.state AND t.queue = p.queue
     ORDER BY t.id DESC LIMIT per_pair.k) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s
"""
# Neither state nor queue given: the newest rows by primary key, then the
# kind/tag filters within the newest ``window`` of them.
_JOBS_NEWEST = """
SELECT t.* FROM (
    SELECT {columns}, {args_match} FROM {table} t ORDER BY t.id DESC
     LIMIT CASE WHEN %(post_filtered)s THEN %(window)s ELSE %(page)s END) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s
"""
_HOT = sql.Identifier("awa", "jobs_hot")
_DEFERRED = sql.Identifier("awa", "scheduled_jobs")
_LIST_PARTS = {"columns": sql.SQL(JOB_LIST_COLUMNS), "args_match": sql.SQL(ARGS_MATCH)}
JOBS_HOT_NEWEST = sql.SQL(_JOBS_NEWEST).format(table=_HOT, **_LIST_PARTS)
SCHEDULED_JOBS_NEWEST = sql.SQL(_JOBS_NEWEST).format(table=_DEFERRED, **_LIST_PARTS)
JOBS_HOT_LIST = sql.SQL(_JOBS_LIST).format(table=_HOT, **_LIST_PARTS)
SCHEDULED_JOBS_LIST = sql.SQL(_JOBS_LIST).format(table=_DEFERRED, **_LIST_PARTS)

# --- whole-table summaries (the REST API's /api/stats, /api/kinds; cached by the caller) ----
# Jobs per state counts every job (the ``awa.jobs`` view covers each engine's tables), so it
# costs a scan: the API serves it from a TTL cache, never per keystroke.  DLQ entries count
# as failed (they are failed jobs parked aside).
STATE_COUNTS = """
SELECT state::text AS state, count(*) AS n FROM awa.jobs GROUP BY state
UNION ALL
SELECT 'failed', count(*) FROM awa.dlq_entries"""
# The newest jobs below an id, for the created-per-minute series (common.reads): each
# table's primary key backwards, merged.
NEWEST_CREATED = """
SELECT id, state::text AS state, created_at FROM awa.jobs
 WHERE id < %(before_id)s ORDER BY id DESC LIMIT %(limit)s"""
ABOVE_EVERY_ID = 2**63 - 1
# Per kind and queue: the canonical tables' rows by their kind indexes, completions by queue
# (common.reads).
KIND_COUNTS = CANONICAL_KIND_PARTS


class CanonicalReads(SharedReads):
    """The ``OpsReads`` group on ``awa.jobs_hot`` / ``awa.scheduled_jobs``."""

    statements = STATEMENTS
    kind_counts_statement = KIND_COUNTS

    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Sequence[str], *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        rows = await fetch_all(conn, QUEUE_DETAILS, {
            "queues": list(queues), "since": since, "until": until, "cap": cap,
            "priorities": list(range(config.MIN_PRIORITY, config.MAX_PRIORITY + 1))})
        return [QueueDetail(r["queue"], r["oldest_available"], float_or_none(r["lag_s"]),
                            int(r["completed"]), bool(r["paused"]), r["paused_at"],
                            r["paused_by"]) for r in rows]

    async def recently_completed_queues(self, conn: psycopg.AsyncConnection[Any], *,
                                        within_s: float, limit: int) -> list[str]:
        rows = await fetch_all(conn, RECENTLY_COMPLETED, {"within": within_s, "limit": limit})
        return [r["queue"] for r in rows]

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        params = {"state": query.state, "queue": query.queue, "kind": query.kind,
                  "tag": query.tag, "args": query.args,
                  "post_filtered": query.post_filtered, "page": query.page,
                  "window": query.window, "max_pairs": query.max_pairs}
        newest = query.state is None and query.queue is None
        hot, deferred = ((JOBS_HOT_NEWEST, SCHEDULED_JOBS_NEWEST) if newest
                         else (JOBS_HOT_LIST, SCHEDULED_JOBS_LIST))
        rows: list[dict[str, Any]] = []
        if query.state is None or query.state in HOT_STATES:
            rows += await fetch_all(conn, hot, params)
        if query.state is None or query.state in DEFERRED_STATES:
            rows += await fetch_all(conn, deferred, params)
        rows.sort(key=lambda r: r["id"], reverse=True)
        return [job_summary(r) for r in rows[: query.page]]

    async def ring_states(self, conn: psycopg.AsyncConnection[Any]) -> list[RingState]:
        return []  # rows updated in place: no partition rings

    async def state_counts(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in await fetch_all(conn, STATE_COUNTS):
            counts[r["state"]] = counts.get(r["state"], 0) + int(r["n"])
        return counts

    async def created_timeseries(self, conn: psycopg.AsyncConnection[Any], *, minutes: int,
                                 cap: int) -> list[StateBucket]:
        async def newest(before_id: int | None, limit: int) -> list[dict[str, Any]]:
            return await fetch_all(conn, NEWEST_CREATED, {
                "before_id": ABOVE_EVERY_ID if before_id is None else before_id,
                "limit": limit})

        return await created_buckets(conn, newest, minutes=minutes, cap=cap)
