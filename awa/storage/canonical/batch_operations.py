"""Canonical engine: the change a durable batch operation makes (set_priority, move_queue).

The operation, its items, matching and preview are the engine-neutral core's
(``awa.storage.common.batch_operations``).  Here jobs are changed in the canonical tables directly
(``jobs_hot`` for available jobs, ``scheduled_jobs`` for scheduled ones), where a row a
claim took meanwhile is left alone and counts as skipped.
"""

from __future__ import annotations

from typing import Any

import psycopg

from awa.statements import named_statements
from awa.storage.common.batch_operations import (
    BUMP,
    MARK_ERRORED,
    MARK_ITEMS,
    PENDING_ITEMS,
    SharedBatchOperations,
)
from awa.storage.common.fetch import fetch_all
from awa.storage.engine import BatchOperation, ChunkOutcome

# The change itself, on the canonical tables directly (sql/batch_operations.sql says why), one
# statement per table: available jobs in jobs_hot, then scheduled ones in scheduled_jobs.
_SQL = named_statements("awa.storage.canonical", "sql/batch_operations.sql")
SET_PRIORITY = (_SQL["set_priority_available"], _SQL["set_priority_scheduled"])
MOVE_QUEUE = (_SQL["move_queue_available"], _SQL["move_queue_scheduled"])


class CanonicalBatchOperations(SharedBatchOperations):
    """The batch-operations group of the Engine protocol on the canonical engine.

    Row locks on ``jobs_hot`` / ``scheduled_jobs`` order the change against claims.
    """

    async def batch_apply_chunk(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                                limit: int) -> ChunkOutcome | None:
        """Apply the op to its next ``limit`` pending items and record their outcomes and
        the counters, in the caller's transaction; None when no item is pending."""
        ids = [r["job_id"] for r in await fetch_all(conn, PENDING_ITEMS, {
            "id": op.id, "limit": limit, "after": op.applied_through})]
        if not ids:
            return None
        spec = op.spec
        statements = SET_PRIORITY if op.op_kind == "set_priority" else MOVE_QUEUE
        params = {"priority": spec.get("priority"), "queue": spec.get("queue")}
        errored: list[tuple[int, str]] = []

        async def apply(chosen: list[int]) -> list[int]:
            out: list[int] = []
            for statement in statements:
                done = await fetch_all(conn, statement, {**params, "ids": chosen})
                out += [r["id"] for r in done]
            return out
        try:
            async with conn.transaction():
                changed = await apply(ids)
        except psycopg.errors.UniqueViolation:
            changed = []
            for job_id in ids:  # one by one: only the clashing jobs error
                try:
                    async with conn.transaction():
                        changed += await apply([job_id])
                except psycopg.errors.UniqueViolation as exc:
                    errored.append((job_id, f"job_id={job_id}: unique conflict: "
                                            f"{str(exc).splitlines()[0]}"))
        for job_id, message in errored:
            await fetch_all(conn, MARK_ERRORED, {"id": op.id, "job_id": job_id,
                                             "error": message})
        await fetch_all(conn, MARK_ITEMS, {"id": op.id, "ids": ids, "changed": changed})
        skipped = len(ids) - len(changed) - len(errored)
        await fetch_all(conn, BUMP, {"id": op.id, "processed": len(changed),
                                 "skipped": skipped, "errored": len(errored),
                                 "error": errored[-1][1] if errored else None,
                                 "through": max(ids)})
        return ChunkOutcome(len(changed), skipped, len(errored))


__all__ = ["CanonicalBatchOperations"]
