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

from awa import config
from awa.statements import named_statements
from awa.storage.common.fetch import fetch_all, float_or_none
from awa.storage.common.reads import (
    CANONICAL_KIND_PARTS,
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

# This engine's own statements are in sql/reads.sql, read once, at import.
_SQL = named_statements("awa.storage.canonical", "sql/reads.sql")

# --- queue lag and completions -----------------------------------------------------------
# (Queue depth itself is MaintenanceOps.queue_depths: one rule for every reader.)
QUEUE_DETAILS = _SQL["queue_details"]
RECENTLY_COMPLETED = _SQL["recently_completed"]

# --- running attempts, wedges, repeated errors: common.reads' templates on the hot table ---
STATEMENTS = JobStatements.on("awa.jobs_hot")

# --- job lists: per table, the newest rows (neither state nor queue given) or per pair ---
JOBS_HOT_NEWEST = _SQL["jobs_hot_newest"]
SCHEDULED_JOBS_NEWEST = _SQL["scheduled_jobs_newest"]
JOBS_HOT_LIST = _SQL["jobs_hot_list"]
SCHEDULED_JOBS_LIST = _SQL["scheduled_jobs_list"]

# --- whole-table summaries (the REST API's /api/stats, /api/kinds; cached by the caller) ----
STATE_COUNTS = _SQL["state_counts"]
NEWEST_CREATED = _SQL["newest_created"]
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
