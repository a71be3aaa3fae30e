"""Queue storage: the ops read side.

The reads that canonical serves from ``awa.jobs_hot`` read the ``awa.jobs``
view here (its queue-storage branches are index-backed: lanes from their
claim heads, open receipts, leases, done and deferred rows), as this engine's
own named statements (``awa.storage.common.reads``' templates on that view); the
rest (runtimes, descriptors, the DLQ, unique claims) are shared tables and
``common.reads``' statements.  This engine's own statements are in ``sql/reads.sql``, read by
name, but for the job lists', composed below from the parts that can hold the state asked
for and the column list each caller reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa.job import JOB_COLUMNS
from awa.storage.common.fetch import float_or_none as _float
from awa.storage.common.reads import (
    ARGS_MATCH,
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
from awa.storage.queue_storage.procedures import named
from awa.storage.queue_storage.schema import InSchema

# Running attempts, wedges and repeated errors: common.reads' templates on the awa.jobs view
# (its branches for leases, receipts and done entries are index-backed).
STATEMENTS = JobStatements.on("awa.jobs")

# Per queue, as canonical's QUEUE_DETAILS: the oldest available job (among the first
# OLDEST_AVAILABLE_HEAD claimable entries of each lane), completions in the window, the
# pause flag (sql/reads.sql).
OLDEST_AVAILABLE_HEAD = 128
QUEUE_DETAILS = named("reads.sql", "queue_details")

# The queues a job completed in lately, by index, a probe per queue.
RECENTLY_COMPLETED = named("reads.sql", "recently_completed")

# --- job lists, read where each state lives -----------------------------------------------
# ``awa.jobs`` answers "the newest jobs" by reading every part of the layout whole (its
# available part joins every ready entry to its lane), so the lists read each part newest
# first by its own index instead, with the view's columns and its rule of what is live, and
# merge: every part but the available one in one statement, each limited to the rows asked
# for; then the available part, which need only look above the newest rows the others gave.

# Each part as a row of awa.jobs (the view's own branches, column for column).
_AVAILABLE_COLUMNS = """
    r.job_id AS id, r.kind, r.queue, r.args, 'available'::awa.job_state AS state, r.priority,
    r.attempt, r.max_attempts, r.run_at, NULL::timestamptz AS heartbeat_at,
    NULL::timestamptz AS deadline_at, r.attempted_at, NULL::timestamptz AS finalized_at,
    r.created_at, r.errors, r.metadata, r.tags, r.unique_key, r.unique_states,
    NULL::uuid AS callback_id, NULL::timestamptz AS callback_timeout_at,
    NULL::text AS callback_filter, NULL::text AS callback_on_complete,
    NULL::text AS callback_on_fail, NULL::text AS callback_transform, r.run_lease, r.progress,
    NULL::uuid AS claimed_by"""
# Not tombstoned, and no receipt for its next attempt (awa.qs_ready_live's rule; the lane
# head is the caller's).
_NOT_TAKEN = """
       NOT EXISTS (SELECT 1 FROM awa.ready_tombstones x WHERE x.ready_id = r.ready_id)
   AND NOT EXISTS (SELECT 1 FROM awa.lease_claims c
                    WHERE c.job_id = r.job_id AND c.run_lease = r.run_lease + 1)"""
# Newest first by job id (the entries' job index, backwards): for a backlog that is new.
# At most AVAILABLE_SCAN_MAX entries are looked at (the subquery's limit, walked lazily):
# entries claimed since the backlog's newest (a busy queue beside a long-standing backlog)
# would otherwise be walked without end.  AVAILABLE_SCANNED_PAST says whether the walk
# could have stopped there; then the lanes are read instead.
_AVAILABLE_BY_ID = f"""
SELECT {_AVAILABLE_COLUMNS}
  FROM (SELECT r.* FROM awa.ready_entries r
         WHERE (%(before_id)s::bigint IS NULL OR r.job_id < %(before_id)s)
           AND (%(above_id)s::bigint IS NULL OR r.job_id > %(above_id)s)
         ORDER BY r.job_id DESC LIMIT %(scan)s) r
 WHERE r.lane_seq >= (SELECT h.claim_seq FROM awa.queue_claim_heads h
                       WHERE h.queue = r.queue AND h.priority = r.priority
                         AND h.shard = r.shard)
   AND {_NOT_TAKEN}"""
AVAILABLE_SCANNED_PAST = named("reads.sql", "available_scanned_past")
AVAILABLE_SCAN_MAX = 50_000
# Each lane from its claim head on (the lane index): for a backlog that is small.  OFFSET 0
# keeps it a probe per lane: flattened, the planner walks the job index instead (for the
# order asked for) and tests every entry of the lanes' queues against its head.
_AVAILABLE_BY_LANE = f"""
SELECT {_AVAILABLE_COLUMNS}
  FROM awa.queue_claim_heads h
 CROSS JOIN LATERAL (
       SELECT r.* FROM awa.ready_entries r
        WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
          AND r.lane_seq >= h.claim_seq
       OFFSET 0) r
 WHERE (%(queue)s::text IS NULL OR h.queue = %(queue)s)
   AND {_NOT_TAKEN}"""
# How many entries the lanes (of the queue asked for) hold from their claim heads on: what
# reading the available part by lane would read.
AVAILABLE_CANDIDATES = named("reads.sql", "available_candidates")
# Up to this many, the available part is read by lane; past it, newest first by job id.
AVAILABLE_BY_LANE_MAX = 20_000

_RUNNING_RECEIPTS = """
SELECT c.job_id AS id, r.kind, r.queue, r.args, 'running'::awa.job_state AS state, r.priority,
       c.attempt, r.max_attempts, r.run_at, c.claimed_at AS heartbeat_at, c.deadline_at,
       c.claimed_at AS attempted_at, NULL::timestamptz AS finalized_at, r.created_at, r.errors,
       r.metadata || COALESCE(a.metadata, '{}'::jsonb) AS metadata, r.tags, r.unique_key,
       r.unique_states, NULL::uuid AS callback_id, NULL::timestamptz AS callback_timeout_at,
       NULL::text AS callback_filter, NULL::text AS callback_on_complete,
       NULL::text AS callback_on_fail, NULL::text AS callback_transform, c.run_lease,
       COALESCE(a.progress, r.progress) AS progress, c.claimed_by
  FROM awa.qs_open_receipts c
  JOIN awa.ready_entries r
    ON r.job_id = c.job_id AND r.ready_slot = c.ready_slot AND r.ready_id = c.ready_id
  LEFT JOIN awa.attempt_state a ON a.job_id = c.job_id AND a.run_lease = c.run_lease"""
_RUNNING_LEASES = """
SELECT l.job_id AS id, r.kind, r.queue, r.args, l.state, r.priority, l.attempt, r.max_attempts,
       r.run_at, l.heartbeat_at, l.deadline_at, l.claimed_at AS attempted_at,
       NULL::timestamptz AS finalized_at, r.created_at, r.errors,
       r.metadata || COALESCE(a.metadata, '{}'::jsonb) AS metadata, r.tags, r.unique_key,
       r.unique_states, l.callback_id, l.callback_timeout_at, l.callback_filter,
       l.callback_on_complete, l.callback_on_fail, l.callback_transform, l.run_lease,
       COALESCE(a.progress, r.progress) AS progress, l.claimed_by
  FROM awa.leases l
  JOIN awa.ready_entries r
    ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
  LEFT JOIN awa.attempt_state a ON a.job_id = l.job_id AND a.run_lease = l.run_lease"""
_DONE = "SELECT * FROM awa.qs_done_rows"

# The parts other than the available one, and the states each can hold.
_OTHER_PARTS: tuple[tuple[str, frozenset[str]], ...] = (
    ("SELECT * FROM awa.jobs_hot", frozenset(HOT_STATES)),
    ("SELECT * FROM awa.scheduled_jobs", frozenset(DEFERRED_STATES)),
    ("SELECT * FROM awa.deferred_jobs", frozenset(DEFERRED_STATES)),
    (_DONE, frozenset({"completed", "failed", "cancelled"})),
    (_RUNNING_RECEIPTS, frozenset({"running"})),
    (_RUNNING_LEASES, frozenset({"running", "waiting_external"})),
)

# The filters of both lists, on a part's rows (``above_id``: the available part's bound).
_LIST_FILTERS = """
   (%(state)s::text IS NULL OR t.state::text = %(state)s)
   AND (%(queue)s::text IS NULL OR t.queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND (%(before_id)s::bigint IS NULL OR t.id < %(before_id)s)
   AND (%(above_id)s::bigint IS NULL OR t.id > %(above_id)s)"""
# The console's list row (and whether the args match), or a whole job (the admin list).
PAGE_COLUMNS = f"{JOB_LIST_COLUMNS}, {ARGS_MATCH}"
JOB_ROW_COLUMNS = ", ".join(f"t.{c}" for c in JOB_COLUMNS)


def _newest(part: str, columns: str) -> str:
    return (f"SELECT {columns} FROM ({part}) t WHERE {_LIST_FILTERS}\n"
            f" ORDER BY t.id DESC LIMIT %(limit)s")


@cache
def other_parts_newest(columns: str, state: str | None) -> str:
    """The newest rows of every part but the available one that can hold ``state``."""
    parts = [p for p, states in _OTHER_PARTS if state is None or state in states]
    if not parts:
        return ""
    return ("SELECT * FROM (\n" + "\nUNION ALL\n".join(f"({_newest(p, columns)})" for p in parts)
            + "\n) t ORDER BY t.id DESC LIMIT %(limit)s")


@cache
def available_newest(columns: str, by_lane: bool) -> str:
    """The newest available rows, read by lane or by job id."""
    return _newest(_AVAILABLE_BY_LANE if by_lane else _AVAILABLE_BY_ID, columns)


# The counts of every available job (state counts, kind counts, admin's queue stats) read
# each lane's entries from its claim head on by the lane index, with the claim's rule (each
# lane's progress read once, before its entries), where awa.jobs hash-joins every ready entry
# of the ring: sql/reads.sql, sql/admin.sql.
# Jobs per state (the REST API's /api/stats), each state counted where it lives.
STATE_COUNTS = named("reads.sql", "state_counts")
# Per kind and queue (the REST API's /api/kinds), each part of the layout read by index up to
# the cap.
KIND_COUNTS = named("reads.sql", "kind_counts")
# The created-per-minute series' rows (common.reads.created_buckets), as the job lists read
# them: each part newest first by its own index.
NEWEST_CREATED_COLUMNS = "t.id, t.state::text AS state, t.created_at"


async def custom_planned(engine: InSchema, conn: psycopg.AsyncConnection[Any], statement: str,
                          params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``statement``'s rows, planned for these values at every call (never prepared): its
    ``(%(x)s IS NULL OR ...)`` filters and limits choose the index only when the planner
    sees the values, and the generic plan psycopg's prepared statement settles on after a
    few calls reads every ready or done entry (1.2 s on the ops benchmark, for 60 ms)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(engine.sql(statement), params, prepare=False)
        return await cur.fetchall()


async def newest_jobs(engine: InSchema, conn: psycopg.AsyncConnection[Any], columns: str,
                      params: Mapping[str, Any], *, state: str | None,
                      limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` jobs matching ``params``' filters, as ``columns``, newest first."""
    values = {"state": state, "queue": None, "kind": None, "tag": None, "before_id": None,
              **params, "above_id": None, "limit": limit}
    rows: list[dict[str, Any]] = []
    others = other_parts_newest(columns, state)
    if others:
        rows = await custom_planned(engine, conn, others, values)
    if state is None or state == "available":
        # Only rows newer than the others' oldest can still make the page.
        if len(rows) >= limit:
            values["above_id"] = rows[limit - 1]["id"]
        [found] = await custom_planned(engine, conn, AVAILABLE_CANDIDATES, values)
        by_lane = found["candidates"] <= AVAILABLE_BY_LANE_MAX
        values["scan"] = AVAILABLE_SCAN_MAX
        available = await custom_planned(engine, conn, available_newest(columns, by_lane),
                                          values)
        if not by_lane and len(available) < limit:
            [past] = await custom_planned(engine, conn, AVAILABLE_SCANNED_PAST, values)
            if past["more"]:  # the walk stopped short: read the lanes
                available = await custom_planned(engine, conn,
                                                  available_newest(columns, True), values)
        rows += available
        rows.sort(key=lambda r: r["id"], reverse=True)
    return rows[:limit]



class QueueStorageReads(InSchema, SharedReads):
    """The ``OpsReads`` group on queue storage."""

    statements = STATEMENTS
    kind_counts_statement = KIND_COUNTS

    async def _planned_rows(self, conn: psycopg.AsyncConnection[Any], statement: str,
                            params: dict[str, Any]) -> list[dict[str, Any]]:
        return await custom_planned(self, conn, statement, params)

    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Any, *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        from awa import config
        rows = await custom_planned(self, conn, QUEUE_DETAILS, {
            "queues": list(queues), "since": since, "until": until, "cap": cap,
            "head": OLDEST_AVAILABLE_HEAD,
            "priorities": list(range(config.MIN_PRIORITY, config.MAX_PRIORITY + 1))})
        return [QueueDetail(r["queue"], r["oldest_available"], _float(r["lag_s"]),
                            int(r["completed"]), bool(r["paused"]), r["paused_at"],
                            r["paused_by"]) for r in rows]

    async def recently_completed_queues(self, conn: psycopg.AsyncConnection[Any], *,
                                        within_s: float, limit: int) -> list[str]:
        rows = await self._rows(conn, RECENTLY_COMPLETED, {"within": within_s, "limit": limit})
        return [r["queue"] for r in rows]

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        # The args filter looks through the newest ``window`` rows the other filters leave.
        rows = await newest_jobs(self, conn, PAGE_COLUMNS, {
            "queue": query.queue, "kind": query.kind, "tag": query.tag, "args": query.args},
            state=query.state, limit=query.window if query.args else query.page)
        return [job_summary(r) for r in rows if r["args_match"]][: query.page]

    async def ring_states(self, conn: psycopg.AsyncConnection[Any]) -> list[RingState]:
        from awa.storage.queue_storage import rings

        return await rings.ring_states(conn, schema=self.schema)

    async def state_counts(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in await custom_planned(self, conn, STATE_COUNTS, {}):
            counts[r["state"]] = counts.get(r["state"], 0) + int(r["n"])
        return counts

    async def created_timeseries(self, conn: psycopg.AsyncConnection[Any], *, minutes: int,
                                 cap: int) -> list[StateBucket]:
        async def newest(before_id: int | None, limit: int) -> list[dict[str, Any]]:
            return await newest_jobs(self, conn, NEWEST_CREATED_COLUMNS,
                                     {"before_id": before_id}, state=None, limit=limit)

        return await created_buckets(conn, newest, minutes=minutes, cap=cap)
