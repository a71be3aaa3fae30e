"""Queue storage: the ops read side.

The reads that canonical serves from ``awa.jobs_hot`` read the ``awa.jobs``
view here (its queue-storage branches are index-backed: lanes from their
claim heads, open receipts, leases, done and deferred rows); the rest
(runtimes, descriptors, the DLQ, unique claims) are shared tables and
canonical's statements.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from awa.storage.canonical import reads as canonical
from awa.storage.canonical.reads import CanonicalReads
from awa.storage.common.fetch import fetch_all as _rows
from awa.storage.common.fetch import float_or_none as _float
from awa.storage.engine import (
    CancelledAttempt,
    JobListQuery,
    JobSummary,
    QueueDetail,
    RepeatedError,
    RingState,
    RunningAttemptRead,
    RunningCounts,
    WedgedClaims,
)
from awa.storage.queue_storage.schema import InSchema


def _on_view(statement: str) -> str:
    return statement.replace("awa.jobs_hot", "awa.jobs")


QUEUE_DETAILS = _on_view(canonical.QUEUE_DETAILS)
RUNNING = _on_view(canonical.RUNNING)
RUNNING_BY_ID = _on_view(canonical.RUNNING_BY_ID)
RUNNING_COUNTS = _on_view(canonical.RUNNING_COUNTS)
CANCELLED_WHILE_RUNNING = _on_view(canonical.CANCELLED_WHILE_RUNNING)
WEDGED_CLAIMS = _on_view(canonical.WEDGED_CLAIMS)
REPEATED_ERRORS = _on_view(canonical.REPEATED_ERRORS)
# The args filter looks through the newest ``window`` rows the other filters leave.
JOB_PAGE = f"""
SELECT t.* FROM (
    SELECT {canonical.JOB_LIST_COLUMNS}, {canonical.ARGS_MATCH} FROM awa.jobs t
     WHERE (%(state)s::text IS NULL OR t.state::text = %(state)s)
       AND (%(queue)s::text IS NULL OR t.queue = %(queue)s)
       AND (%(kind)s::text IS NULL OR t.kind = %(kind)s)
       AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
     ORDER BY t.id DESC
     LIMIT CASE WHEN %(args)s::text IS NULL THEN %(page)s ELSE %(window)s END
) t
 WHERE t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s"""


class QueueStorageReads(InSchema, CanonicalReads):
    """The ``OpsReads`` group on queue storage."""

    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Any, *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        from awa import config
        rows = await _rows(conn, QUEUE_DETAILS, {
            "queues": list(queues), "since": since, "until": until, "cap": cap,
            "priorities": list(range(config.MIN_PRIORITY, config.MAX_PRIORITY + 1))})
        return [QueueDetail(r["queue"], r["oldest_available"], _float(r["lag_s"]),
                            int(r["completed"]), bool(r["paused"]), r["paused_at"],
                            r["paused_by"]) for r in rows]

    async def running_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                               started_before: datetime | None = None,
                               job_ids: Any = None, limit: int) -> list[RunningAttemptRead]:
        if job_ids is not None:
            rows = await _rows(conn, RUNNING_BY_ID, {"ids": list(job_ids), "limit": limit})
        else:
            rows = await _rows(conn, RUNNING, {"started_before": started_before, "limit": limit})
        return [RunningAttemptRead(
            id=r["id"], kind=r["kind"], queue=r["queue"], attempt=r["attempt"],
            max_attempts=r["max_attempts"], run_lease=r["run_lease"], priority=r["priority"],
            attempted_at=r["attempted_at"], heartbeat_at=r["heartbeat_at"],
            deadline_at=r["deadline_at"], tags=list(r["tags"] or []),
            heartbeat_age_s=_float(r["heartbeat_age_s"]),
            deadline_remaining_s=_float(r["deadline_remaining_s"]),
            running_for_s=_float(r["running_for_s"]), claimed_by=r["claimed_by"])
            for r in rows]

    async def running_counts(self, conn: psycopg.AsyncConnection[Any], *, stale_after_s: float,
                             queue: str | None = None) -> list[RunningCounts]:
        rows = await _rows(conn, RUNNING_COUNTS, {"staleness": stale_after_s, "queue": queue})
        return [RunningCounts(r["queue"], int(r["running"]), _float(r["oldest_heartbeat_s"]),
                              int(r["stale"]), int(r["overdue"])) for r in rows]

    async def cancelled_while_running(self, conn: psycopg.AsyncConnection[Any], *,
                                      window_s: float, stale_after_s: float,
                                      queue: str | None = None,
                                      limit: int) -> list[CancelledAttempt]:
        rows = await _rows(conn, CANCELLED_WHILE_RUNNING, {
            "window": window_s, "staleness": stale_after_s, "queue": queue, "limit": limit})
        return [CancelledAttempt(**r) for r in rows]

    async def wedged_claims(self, conn: psycopg.AsyncConnection[Any]) -> list[WedgedClaims]:
        return [WedgedClaims(r["queue"], int(r["wedged"]))
                for r in await _rows(conn, WEDGED_CLAIMS)]

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        rows = await _rows(conn, JOB_PAGE, {"state": query.state, "queue": query.queue,
                                            "kind": query.kind, "tag": query.tag,
                                            "args": query.args, "page": query.page,
                                            "window": query.window})
        return [canonical.job_summary(r) for r in rows]

    async def repeated_errors(self, conn: psycopg.AsyncConnection[Any], *,
                              queue: str | None = None, sample: int,
                              limit: int = 10) -> list[RepeatedError]:
        rows = await _rows(conn, REPEATED_ERRORS, {"queue": queue, "sample": sample,
                                                   "limit": limit})
        return [RepeatedError(r["kind"], r["queue"], r["message"], int(r["jobs"]),
                              int(r["max_repeats_in_one_job"]), list(r["sample_job_ids"]),
                              list(r["places"]), r["first_seen"], r["last_seen"])
                for r in rows]

    async def ring_states(self, conn: psycopg.AsyncConnection[Any]) -> list[RingState]:
        from awa.storage.queue_storage import rings

        return await rings.ring_states(conn, schema=self.schema)
