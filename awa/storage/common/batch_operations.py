"""The engine-neutral core: durable batch operations (set_priority, move_queue over a filter).

Jobs are matched and previewed through the ``awa.jobs`` view, which every layout has; the
operation and its items are shared tables.  What differs between engines is the change
itself (``batch_apply_chunk``): canonical updates its tables in place
(``awa.storage.canonical.batch_operations``), queue storage moves ready entries between lanes
(``awa.storage.queue_storage.batch_operations``).  Both record outcomes with ``MARK_ITEMS`` /
``MARK_ERRORED`` / ``BUMP`` and start after ``applied_through``.

Only ``available`` and ``scheduled`` jobs are ever matched.  The operation and
its items live in ``awa.batch_operations`` / ``awa.batch_operation_items``
(migration 0005); the caller owns every transaction.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa.job import JOB_COLUMNS, Job
from awa.storage.common.fetch import fetch_all
from awa.storage.engine import (
    BATCH_OPERATION_COLUMNS,
    BatchOperation,
    BatchPreview,
    ScanCursor,
)

ORIGINAL_PRIORITY_KEY = "_awa_original_priority"
ORIGINAL_QUEUE_KEY = "_awa_original_queue"
ACTIVE_STATES = ("pending", "scanning", "running", "cancelling")
_COLUMNS = ", ".join(f"j.{c}" for c in JOB_COLUMNS)
_OP = ", ".join(BATCH_OPERATION_COLUMNS)

# Every filter field is a parameter that is NULL when unset: one constant statement.
ELIGIBLE = """
j.state IN ('available', 'scheduled')
AND (%(state)s::text IS NULL OR j.state::text = %(state)s::text)
AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
AND (%(tag)s::text IS NULL OR j.tags @> ARRAY[%(tag)s::text])
AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
AND (%(created_at_gte)s::timestamptz IS NULL OR j.created_at >= %(created_at_gte)s::timestamptz)
AND (%(created_at_lt)s::timestamptz IS NULL OR j.created_at < %(created_at_lt)s::timestamptz)"""

PREVIEW_COUNT = f"SELECT count(*) AS n FROM awa.jobs j WHERE {ELIGIBLE}"
PREVIEW_SAMPLE = f"SELECT {_COLUMNS} FROM awa.jobs j WHERE {ELIGIBLE} ORDER BY j.id LIMIT %(limit)s"
MAX_ELIGIBLE_ID = f"SELECT max(j.id) AS max_id FROM awa.jobs j WHERE {ELIGIBLE}"
SCAN_PAGE = f"""
WITH page AS (
    SELECT j.id FROM awa.jobs j
     WHERE {ELIGIBLE} AND j.id > %(after)s AND j.id <= %(upto)s
     ORDER BY j.id LIMIT %(page)s
)
INSERT INTO awa.batch_operation_items (operation_id, job_id)
SELECT %(op)s, id FROM page
ON CONFLICT DO NOTHING
RETURNING job_id"""

INSERT_OP = f"""
INSERT INTO awa.batch_operations (id, op_kind, filter, spec, submitted_by)
VALUES (%(id)s, %(op_kind)s, %(filter)s, %(spec)s, %(submitted_by)s)
RETURNING {_OP}"""
LIST_OPS = f"""
SELECT {_OP} FROM awa.batch_operations
 WHERE (%(state)s::text IS NULL OR state = %(state)s)
 ORDER BY submitted_at DESC LIMIT %(limit)s"""
GET_OP = f"SELECT {_OP} FROM awa.batch_operations WHERE id = %(id)s"
CANCEL_OP = f"""
UPDATE awa.batch_operations SET state = 'cancelling', updated_at = clock_timestamp()
 WHERE id = %(id)s AND state IN ('pending', 'scanning', 'running')
RETURNING {_OP}"""
# The oldest active operation, locked for this tick (another runner skips it).
NEXT_ACTIVE = f"""
SELECT {_OP} FROM awa.batch_operations
 WHERE state IN ('pending', 'scanning', 'running', 'cancelling')
 ORDER BY submitted_at LIMIT 1
 FOR UPDATE SKIP LOCKED"""
START_SCAN = """
UPDATE awa.batch_operations
   SET state = 'scanning', started_at = COALESCE(started_at, clock_timestamp()),
       runner_instance = %(runner)s, cursor = %(cursor)s, updated_at = clock_timestamp()
 WHERE id = %(id)s AND state = 'pending'"""
SCAN_CURSOR = """
UPDATE awa.batch_operations SET cursor = %(cursor)s, runner_instance = %(runner)s,
       updated_at = clock_timestamp()
 WHERE id = %(id)s"""
SCANNED = """
UPDATE awa.batch_operations
   SET state = 'running', updated_at = clock_timestamp(),
       total_matched = (SELECT count(*) FROM awa.batch_operation_items
                         WHERE operation_id = %(id)s)
 WHERE id = %(id)s AND state = 'scanning'"""
# Once the scan has recorded its items, the planner learns how many there are: with the
# statistics of an items table analysed before they existed, each chunk's MARK_ITEMS took
# every pending item of the operation through the pending index (100k items: about 100 ms a
# chunk against 0.6 ms) instead of probing its ids.  Once per operation; a sample.
ANALYZE_ITEMS = "ANALYZE awa.batch_operation_items"
# Chunks take items in job_id order, one runner at a time (the operation's row lock), so
# none is pending below the last chunk's highest id (``cursor.applied_through``): the
# scan starts there instead of walking every item done so far (their dead entries in
# the pending index, not yet vacuumed, would make each chunk dearer than the last).
PENDING_ITEMS = """
SELECT job_id FROM awa.batch_operation_items
 WHERE operation_id = %(id)s AND state = 'pending' AND job_id > %(after)s
 ORDER BY job_id LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED"""
MARK_ITEMS = """
UPDATE awa.batch_operation_items
   SET state = CASE WHEN job_id = ANY(%(changed)s::bigint[]) THEN 'processed' ELSE 'skipped' END,
       processed_at = clock_timestamp()
 WHERE operation_id = %(id)s AND job_id = ANY(%(ids)s::bigint[]) AND state = 'pending'"""
MARK_ERRORED = """
UPDATE awa.batch_operation_items SET state = 'errored', error = %(error)s,
       processed_at = clock_timestamp()
 WHERE operation_id = %(id)s AND job_id = %(job_id)s"""
BUMP = """
UPDATE awa.batch_operations
   SET processed = processed + %(processed)s, skipped = skipped + %(skipped)s,
       errored = errored + %(errored)s, last_error = COALESCE(%(error)s, last_error),
       cursor = COALESCE(cursor, '{}'::jsonb)
                || jsonb_build_object('applied_through', %(through)s::bigint),
       updated_at = clock_timestamp()
 WHERE id = %(id)s"""
SKIP_PENDING = """
WITH s AS (
    UPDATE awa.batch_operation_items SET state = 'skipped', processed_at = clock_timestamp()
     WHERE operation_id = %(id)s AND state = 'pending'
    RETURNING 1
)
UPDATE awa.batch_operations SET skipped = skipped + (SELECT count(*) FROM s)
 WHERE id = %(id)s"""
FINISH = f"""
UPDATE awa.batch_operations
   SET state = %(state)s, finalized_at = clock_timestamp(), updated_at = clock_timestamp(),
       retention_until = clock_timestamp() + make_interval(secs => %(retention_days)s * 86400),
       total_matched = COALESCE(total_matched, (SELECT count(*) FROM awa.batch_operation_items
                                                WHERE operation_id = %(id)s))
 WHERE id = %(id)s
RETURNING {_OP}"""


def filter_params(flt: dict[str, Any]) -> dict[str, Any]:
    ids = flt.get("ids") or None
    return {"state": flt.get("state"), "kind": flt.get("kind"), "queue": flt.get("queue"),
            "tag": flt.get("tag"), "ids": list(ids) if ids else None,
            "created_at_gte": flt.get("created_at_gte"),
            "created_at_lt": flt.get("created_at_lt")}


class SharedBatchOperations:
    """The engine-neutral part of the batch-operations group: the operation rows and their
    items (``awa.batch_operations`` / ``awa.batch_operation_items``), matching through the
    ``awa.jobs`` view, preview, scan and finish.  Each engine adds ``batch_apply_chunk``, the
    change itself, which is written against its own layout.
    """

    async def batch_insert(self, conn: psycopg.AsyncConnection[Any], *, op_kind: str,
                           filter: dict[str, Any], spec: dict[str, Any],
                           submitted_by: str | None) -> BatchOperation:
        rows = await fetch_all(conn, INSERT_OP, {"id": uuid.uuid4(), "op_kind": op_kind,
                                             "filter": Jsonb(filter), "spec": Jsonb(spec),
                                             "submitted_by": submitted_by})
        return BatchOperation(**rows[0])

    async def batch_list(self, conn: psycopg.AsyncConnection[Any], *, state: str | None,
                         limit: int) -> list[BatchOperation]:
        return [BatchOperation(**r)
                for r in await fetch_all(conn, LIST_OPS, {"state": state, "limit": limit})]

    async def batch_get(self, conn: psycopg.AsyncConnection[Any],
                        op_id: uuid.UUID) -> BatchOperation | None:
        rows = await fetch_all(conn, GET_OP, {"id": op_id})
        return BatchOperation(**rows[0]) if rows else None

    async def batch_request_cancel(self, conn: psycopg.AsyncConnection[Any],
                                   op_id: uuid.UUID) -> BatchOperation | None:
        rows = await fetch_all(conn, CANCEL_OP, {"id": op_id})
        return BatchOperation(**rows[0]) if rows else None

    async def batch_preview(self, conn: psycopg.AsyncConnection[Any], filter: dict[str, Any],
                            *, sample: int) -> BatchPreview:
        params = {**filter_params(filter), "limit": sample}
        count = (await fetch_all(conn, PREVIEW_COUNT, params))[0]["n"]
        jobs = [Job.from_row(r) for r in await fetch_all(conn, PREVIEW_SAMPLE, params)]
        return BatchPreview(int(count), jobs)

    async def batch_next_active(self, conn: psycopg.AsyncConnection[Any]) -> BatchOperation | None:
        rows = await fetch_all(conn, NEXT_ACTIVE, {})
        return BatchOperation(**rows[0]) if rows else None

    async def batch_start_scan(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                               runner: uuid.UUID) -> ScanCursor:
        """pending -> scanning: the upper bound of the ids to match is fixed now."""
        found = await fetch_all(conn, MAX_ELIGIBLE_ID, filter_params(op.filter))
        cursor = ScanCursor(0, int(found[0]["max_id"] or 0))
        await fetch_all(conn, START_SCAN, {"id": op.id, "runner": runner,
                                       "cursor": Jsonb(dataclasses.asdict(cursor))})
        return cursor

    async def batch_scan_page(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                              cursor: ScanCursor, runner: uuid.UUID,
                              page: int) -> ScanCursor | None:
        """Record the next page of matching ids as items (cursor moved in the same
        transaction); None when the scan is done."""
        params = {**filter_params(op.filter), "op": op.id, "page": page,
                  "after": cursor.after_job_id, "upto": cursor.max_job_id}
        ids = [r["job_id"] for r in await fetch_all(conn, SCAN_PAGE, params)]
        if not ids:
            return None
        moved = dataclasses.replace(cursor, after_job_id=max(ids))
        await fetch_all(conn, SCAN_CURSOR, {"id": op.id, "cursor": Jsonb(dataclasses.asdict(moved)),
                                        "runner": runner})
        return moved

    async def batch_scanned(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID) -> None:
        await fetch_all(conn, SCANNED, {"id": op_id})
        await conn.execute(ANALYZE_ITEMS)

    async def batch_finish(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID, *,
                           cancelled: bool, retention_days: float) -> BatchOperation:
        if cancelled:
            await fetch_all(conn, SKIP_PENDING, {"id": op_id})
        rows = await fetch_all(conn, FINISH, {"id": op_id, "retention_days": retention_days,
                                          "state": "cancelled" if cancelled else "completed"})
        return BatchOperation(**rows[0])


__all__ = ["ACTIVE_STATES", "SharedBatchOperations", "filter_params"]
