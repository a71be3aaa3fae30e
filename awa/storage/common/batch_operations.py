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

from awa.job import Job
from awa.statements import named_statements
from awa.storage.common.fetch import fetch_all
from awa.storage.engine import BatchOperation, BatchPreview, ScanCursor

ORIGINAL_PRIORITY_KEY = "_awa_original_priority"
ORIGINAL_QUEUE_KEY = "_awa_original_queue"
ACTIVE_STATES = ("pending", "scanning", "running", "cancelling")
_SQL = named_statements("awa.storage.common", "sql/batch_operations.sql")

# Matching (every filter field a parameter, NULL when unset: one constant statement each).
PREVIEW_COUNT = _SQL["preview_count"]
PREVIEW_SAMPLE = _SQL["preview_sample"]
MAX_ELIGIBLE_ID = _SQL["max_eligible_id"]
SCAN_PAGE = _SQL["scan_page"]
# The operation and its items (MARK_ITEMS, MARK_ERRORED, BUMP: each engine's chunk).
INSERT_OP = _SQL["insert_op"]
LIST_OPS = _SQL["list_ops"]
GET_OP = _SQL["get_op"]
CANCEL_OP = _SQL["cancel_op"]
NEXT_ACTIVE = _SQL["next_active"]
START_SCAN = _SQL["start_scan"]
SCAN_CURSOR = _SQL["scan_cursor"]
SCANNED = _SQL["scanned"]
ANALYZE_ITEMS = _SQL["analyze_items"]
PENDING_ITEMS = _SQL["pending_items"]
MARK_ITEMS = _SQL["mark_items"]
MARK_ERRORED = _SQL["mark_errored"]
BUMP = _SQL["bump"]
SKIP_PENDING = _SQL["skip_pending"]
FINISH = _SQL["finish"]


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
