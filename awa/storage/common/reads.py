"""The ops reads' pieces every engine shares (the statements on shared tables and on the
canonical tables, which queue storage reads too, empty on a database it laid out)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import psycopg

from awa import config
from awa.storage.common.fetch import fetch_all
from awa.storage.common.tables import DEFERRED_STATES, HOT_STATES
from awa.storage.engine import KindCount, StateBucket

NewestPage = Callable[[int | None, int], Awaitable[list[dict[str, Any]]]]
"""An engine's newest jobs (id, state, created_at) below an id (None: the newest), at most
a limit, newest first."""

# The queues of ``{table}`` that completed a job within the last %(within)s seconds, for a
# table whose (state, queue, ...) index leads with the state and the queue and whose
# (state, queue, finalized_at) index answers "completed lately?": a loose index scan over
# its distinct completed queues (one probe each, the first %(limit)s by name), then one
# probe per queue for a completion inside the window (LIMIT 1 keeps it a probe: as a
# semi-join the planner reads every completion of the window instead).
RECENTLY_COMPLETED_IN = """
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM {table} t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM {table} t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT w.queue FROM (SELECT queue FROM walk LIMIT %(limit)s) w
 CROSS JOIN LATERAL (
       SELECT 1 FROM {table} t
        WHERE t.state = 'completed' AND t.queue = w.queue
          AND t.finalized_at > now() - make_interval(secs => %(within)s)
        LIMIT 1) r"""
# The same on the canonical hot table (idx_jobs_hot_state_queue, idx_jobs_hot_finalized).
HOT_RECENTLY_COMPLETED = RECENTLY_COMPLETED_IN.format(table="awa.jobs_hot")

# --- the REST API's summaries (/api/kinds, /api/stats/timeseries): bounded ---------------

# Each part of an engine's kind counts reads at most %(cap)s rows, by index, and says
# ``capped`` (for every kind it read) when it reached the cap: its counts are then lower
# bounds.  Columns: kind, queue, n, recent (completed in the last hour), capped.
#
# The jobs of ``{table}`` in the states ``{states}`` names (a parameter), for a table with a
# (kind, state) index (``{filter}``: the index's own predicate, if any): a loose index scan
# over its kinds (one probe each, at most %(max_kinds)s), then each kind's rows.
KIND_ROWS_IN = """
WITH RECURSIVE kinds AS (
    (SELECT t.kind FROM {table} t WHERE true{filter} ORDER BY t.kind LIMIT 1)
    UNION ALL
    SELECT n.kind FROM kinds p CROSS JOIN LATERAL (
        SELECT t.kind FROM {table} t WHERE t.kind > p.kind{filter} ORDER BY t.kind LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n, 0::bigint AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT k.kind, r.queue FROM (SELECT kind FROM kinds LIMIT %(max_kinds)s) k
         CROSS JOIN LATERAL (
               SELECT t.queue FROM {table} t
                WHERE t.kind = k.kind AND t.state = ANY({states}::awa.job_state[]){filter}
                LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue"""
# The completed jobs of ``{table}`` (a (state, queue, finalized_at) index): a loose index
# scan over its completed queues (at most %(max_kinds)s), then each queue's completions,
# newest first (the index backwards).
COMPLETED_KINDS_IN = """
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM {table} t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM {table} t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n,
       count(*) FILTER (WHERE r.finalized_at > now() - interval '1 hour') AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT r.kind, w.queue, r.finalized_at FROM (SELECT queue FROM walk LIMIT %(max_kinds)s) w
         CROSS JOIN LATERAL (
               SELECT t.kind, t.finalized_at FROM {table} t
                WHERE t.state = 'completed' AND t.queue = w.queue AND t.finalized_at IS NOT NULL
                ORDER BY t.finalized_at DESC LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue"""
# The canonical tables' part of every engine's kind counts (queue storage reads them too,
# empty on a database it laid out): the hot table's unfinished and failed/cancelled rows
# and the deferred table by the kind index, its completions by queue.
CANONICAL_KIND_PARTS = (
    "SELECT * FROM (" + KIND_ROWS_IN.format(table="awa.jobs_hot", filter="",
                                           states="%(hot_states)s") + "\n) hot\n"
    "UNION ALL\nSELECT * FROM (" + KIND_ROWS_IN.format(
        table="awa.scheduled_jobs", filter="", states="%(deferred_states)s") + "\n) deferred\n"
    "UNION ALL\nSELECT * FROM (" + COMPLETED_KINDS_IN.format(table="awa.jobs_hot")
    + "\n) hot_completed")


# COMPLETED_KINDS_IN must walk each queue's completions newest first and stop at the cap;
# a bitmap scan -- which the planner prefers whenever queues average fewer completions than
# the cap -- reads every completion of the queue, however many, to sort them.  Bitmap scans
# are off for that statement only (the caller's setting restored after it).
BITMAP_SCANS_OFF = ("SELECT current_setting('enable_bitmapscan') AS was,"
                    " set_config('enable_bitmapscan', 'off', true)")
BITMAP_SCANS_BACK = "SELECT set_config('enable_bitmapscan', %(was)s, true)"


async def without_bitmap_scans(conn: psycopg.AsyncConnection[Any],
                               read: Callable[[], Awaitable[list[dict[str, Any]]]]
                               ) -> list[dict[str, Any]]:
    """``read()``'s rows, planned without bitmap scans (in a transaction or savepoint)."""
    async with conn.transaction():
        [setting] = await fetch_all(conn, BITMAP_SCANS_OFF)
        try:
            return await read()
        finally:
            await fetch_all(conn, BITMAP_SCANS_BACK, {"was": setting["was"]})


def kind_count_params(cap: int) -> dict[str, Any]:
    """The parameters of ``CANONICAL_KIND_PARTS`` (and of the statements built on it)."""
    return {"cap": cap, "max_kinds": config.OPS_KNOWN_QUEUE_LIMIT,
            "hot_states": [s for s in HOT_STATES if s != "completed"],
            "deferred_states": list(DEFERRED_STATES)}


def kind_counts(rows: Iterable[dict[str, Any]]) -> list[KindCount]:
    """Rows of (kind, queue, n, recent, capped), from every part of an engine, per kind."""
    jobs: dict[str, int] = {}
    queues: dict[str, set[str]] = {}
    recent: dict[str, int] = {}
    capped: set[str] = set()
    for r in rows:
        kind = r["kind"]
        jobs[kind] = jobs.get(kind, 0) + int(r["n"])
        queues.setdefault(kind, set()).add(r["queue"])
        recent[kind] = recent.get(kind, 0) + int(r["recent"])
        if r["capped"]:
            capped.add(kind)
    return [KindCount(kind, jobs[kind], len(queues[kind]), recent[kind], kind in capped)
            for kind in sorted(jobs)]


# Newest first by id, a page at a time: the jobs created since %(since)s are the newest, so
# the walk stops at the first page reaching past the window (or at the cap).
TIMESERIES_PAGE = 5_000
WINDOW_START = "SELECT now() - make_interval(mins => %(minutes)s) AS since"


async def created_buckets(conn: psycopg.AsyncConnection[Any], newest: NewestPage, *,
                          minutes: int, cap: int) -> list[StateBucket]:
    """``created_timeseries`` from ``newest(before_id, limit)`` (an engine's rows of
    id, state, created_at, newest first, ids below ``before_id``), read up to ``cap``."""
    [window] = await fetch_all(conn, WINDOW_START, {"minutes": minutes})
    since: datetime = window["since"]
    counts: dict[tuple[datetime, str], int] = {}
    read, before, last = 0, None, None
    while read < cap:
        limit = min(TIMESERIES_PAGE, cap - read)
        rows = await newest(before, limit)
        read += len(rows)
        for r in rows:
            if r["created_at"] >= since:
                key = (_minute(r["created_at"]), r["state"])
                counts[key] = counts.get(key, 0) + 1
        if len(rows) < limit or rows[-1]["created_at"] < since:
            last = None  # the window was read whole
            break
        before, last = rows[-1]["id"], rows[-1]["created_at"]
    edge = _minute(last) if last is not None else None  # the cap ended inside the window
    return [StateBucket(bucket, state, n, bucket == edge)
            for (bucket, state), n in sorted(counts.items())]


def _minute(at: datetime) -> datetime:
    return at - timedelta(seconds=at.second, microseconds=at.microsecond)
