"""Queue storage: durable batch operations (set_priority, move_queue) change jobs here.

Matching, preview, the operation rows and their items are the engine-neutral core's
(``awa.storage.common.batch_operations``: they read the ``awa.jobs`` view and the shared
``awa.batch_operations`` tables).  What differs is the change itself:

* a scheduled job is a ``deferred_jobs`` row: updated in place (its row lock
  orders the change against promotion, which deletes the row);
* an available job is a ready entry in its lane (queue, priority, shard), and a
  ready entry is never updated: it is tombstoned and the job appended, with its
  new queue / priority, to the end of the destination lane (same id, same
  ``run_lease``).  As for every writer that removes a ready entry (admin cancel,
  drain, the ``awa.jobs`` triggers) the source lanes' claim heads are locked
  first, in (queue, priority, shard) order, and the entries are read again after
  the lock, with a new snapshot: an entry a claim took meanwhile has a receipt
  and is skipped; only entries in the lanes locked here are moved.  So a claimed
  or running job is never moved and a job is never live in two lanes.  The
  append reserves the destination lane like any producer (its enqueue head,
  ``awa.qs_reserve_lane``), which also wakes that queue's dispatchers.

A moved job queues behind the jobs already waiting in its destination lane (the
claim reads lanes in position order).  Rows a queue-storage database may still
hold in the canonical tables are not matched for change (the install refuses a
database that has them).  Each chunk is one transaction, the caller's.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import tuple_row

from awa import config
from awa.storage.common.batch_operations import (
    BUMP,
    MARK_ITEMS,
    ORIGINAL_PRIORITY_KEY,
    ORIGINAL_QUEUE_KEY,
    PENDING_ITEMS,
    SharedBatchOperations,
)
from awa.storage.engine import BatchOperation, ChunkOutcome
from awa.storage.queue_storage.admin import LOCK_LANES
from awa.storage.queue_storage.enqueue import APPEND_READY
from awa.storage.queue_storage.procedures import named
from awa.storage.queue_storage.schema import InSchema

MOVED_REASON = "batch_moved"
"""``ready_tombstones.reason`` of an entry a batch operation moved to another lane."""

# %(queue)s / %(priority)s: the new value, NULL to keep the job's own (set_priority has no
# queue; move_queue's priority is optional).  A job already there is not changed (skipped).
_TARGET_QUEUE = "COALESCE(%(queue)s::text, j.queue)"
_TARGET_PRIORITY = "COALESCE(%(priority)s::smallint, j.priority)"
_DIFFERS = f"(j.queue <> {_TARGET_QUEUE} OR j.priority <> {_TARGET_PRIORITY})"
# What the job was before the first batch change that moved it (the core's keys, the rule
# canonical's change follows too).
_ORIGINALS = f"""j.metadata
    || CASE WHEN j.queue <> {_TARGET_QUEUE} AND NOT j.metadata ? '{ORIGINAL_QUEUE_KEY}'
            THEN jsonb_build_object('{ORIGINAL_QUEUE_KEY}', j.queue) ELSE '{{}}'::jsonb END
    || CASE WHEN j.priority <> {_TARGET_PRIORITY} AND NOT j.metadata ? '{ORIGINAL_PRIORITY_KEY}'
            THEN jsonb_build_object('{ORIGINAL_PRIORITY_KEY}', j.priority)
            ELSE '{{}}'::jsonb END"""

CHANGE_DEFERRED = f"""
UPDATE awa.deferred_jobs j
   SET queue = {_TARGET_QUEUE}, priority = {_TARGET_PRIORITY}, metadata = {_ORIGINALS}
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'scheduled' AND {_DIFFERS}
RETURNING j.id"""

# The chunk's live ready entries that would change, and their lanes (locked next).
READY_CANDIDATES = f"""
SELECT j.job_id, j.queue, j.priority, j.shard
  FROM awa.qs_ready_live j
 WHERE j.job_id = ANY(%(ids)s::bigint[]) AND {_DIFFERS}"""
# Under those lanes' claim-head locks, with this statement's new snapshot: the entries
# still live in exactly those lanes are tombstoned and their jobs appended to their new
# lanes (APPEND_READY defines ``ready``, the appended rows).  The items and counters were
# written before the lock as ``expected``; the rare item whose move went otherwise (a
# claim took the entry first; an entry came back live in a locked lane) is flipped here,
# in the same statement, so nothing but this statement and the commit runs under the lock.
MOVE_READY = f"""
WITH live AS MATERIALIZED (
    SELECT j.* FROM awa.qs_ready_live j
     WHERE j.job_id = ANY(%(ids)s::bigint[]) AND {_DIFFERS}
       AND (j.queue, j.priority, j.shard) IN (
           SELECT * FROM unnest(%(queues)s::text[], %(priorities)s::smallint[],
                                %(shards)s::smallint[]))
), tomb AS (
    INSERT INTO awa.ready_tombstones (ready_slot, ready_id, job_id, reason)
    SELECT ready_slot, ready_id, job_id, '{MOVED_REASON}' FROM live
), src AS (
    SELECT DISTINCT ON (j.job_id)
           j.job_id AS id, j.kind, {_TARGET_QUEUE} AS queue, j.args,
           {_TARGET_PRIORITY} AS priority, j.attempt, j.max_attempts, j.run_at,
           j.attempted_at, j.created_at, j.errors, {_ORIGINALS} AS metadata, j.tags,
           j.unique_key, j.unique_states, j.run_lease, j.progress
      FROM live j
     ORDER BY j.job_id
)""" + APPEND_READY + """
, flipped AS (
    UPDATE awa.batch_operation_items i
       SET state = CASE WHEN i.job_id IN (SELECT id FROM ready) THEN 'processed'
                        ELSE 'skipped' END
     WHERE i.operation_id = %(op)s AND i.job_id = ANY(%(ids)s::bigint[])
       AND (i.job_id IN (SELECT id FROM ready)) <> (i.job_id = ANY(%(expected)s::bigint[]))
    RETURNING i.state
), recounted AS (
    UPDATE awa.batch_operations o
       SET processed = o.processed + f.gained, skipped = o.skipped - f.gained
      FROM (SELECT count(*) FILTER (WHERE state = 'processed')
                   - count(*) FILTER (WHERE state = 'skipped') AS gained FROM flipped) f
     WHERE o.id = %(op)s AND f.gained <> 0
)
SELECT id FROM ready"""


# After the move, the locks still held: the source lanes' claim heads settled past it; the
# chunk's commit not waiting for its WAL; the statistics once per operation (why, in the file).
SETTLE_SOURCE_LANES = named("batch_operations.sql", "settle_source_lanes")
ASYNC_COMMIT = named("batch_operations.sql", "async_commit")
ANALYZE_READY = named("batch_operations.sql", "analyze_ready")

class QueueStorageBatchOperations(InSchema, SharedBatchOperations):
    """The batch-operations group on queue storage: the core's, and the change."""

    async def batch_scanned(self, conn: psycopg.AsyncConnection[Any], op_id: Any) -> None:
        await super().batch_scanned(conn, op_id)
        await conn.execute(self.sql(ANALYZE_READY))

    async def batch_apply_chunk(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                                limit: int) -> ChunkOutcome | None:
        """Change the next ``limit`` pending items' jobs and record the outcomes, in the
        caller's transaction; None when no item is pending."""
        limit = min(limit, config.BATCH_OP_LANE_CHUNK_SIZE)
        ids = [r["job_id"] for r in await self._rows(conn, PENDING_ITEMS, {
            "id": op.id, "limit": limit, "after": op.applied_through})]
        if not ids:
            return None
        spec = op.spec
        params = {"ids": ids, "priority": spec.get("priority"),
                  "queue": spec.get("queue") if op.op_kind == "move_queue" else None}
        # Deferred rows first: promotion locks them before it reserves any lane.
        changed = [r["id"] for r in await self._rows(conn, CHANGE_DEFERRED, params)]
        candidates = await self._rows(conn, READY_CANDIDATES, params)
        expected = sorted({r["job_id"] for r in candidates})
        # Outcomes and counters recorded before the lanes are locked, as expected; the move
        # corrects the rare item that went otherwise.
        changed += expected
        await self._rows(conn, MARK_ITEMS, {"id": op.id, "ids": ids, "changed": changed})
        await self._rows(conn, BUMP, {"id": op.id, "processed": len(changed),
                                      "skipped": len(ids) - len(changed), "errored": 0,
                                      "error": None, "through": max(ids)})
        if not candidates:
            return ChunkOutcome(len(changed), len(ids) - len(changed), 0)
        lanes = sorted({(r["queue"], r["priority"], r["shard"]) for r in candidates})
        lane_params = {"queues": [q for q, _, _ in lanes],
                       "priorities": [p for _, p, _ in lanes],
                       "shards": [sh for _, _, sh in lanes]}
        # The lock, the move and the settle go out together (one round trip): the claims
        # waiting on these lanes wait for the server's work only, not for this process's
        # event loop to come back between statements (the runner shares a busy worker's loop).
        async with conn.cursor(row_factory=tuple_row) as move:
            async with conn.pipeline():
                await conn.execute(ASYNC_COMMIT)
                await conn.execute(self.sql(LOCK_LANES), lane_params)
                await move.execute(self.sql(MOVE_READY), {
                    **params, **lane_params, "op": op.id, "expected": expected})
                await conn.execute(self.sql(SETTLE_SOURCE_LANES), lane_params)
            moved = {row[0] for row in await move.fetchall()}
        changed = [i for i in changed if i not in set(expected)] + sorted(moved)
        return ChunkOutcome(len(changed), len(ids) - len(changed), 0)


__all__ = ["MOVED_REASON", "QueueStorageBatchOperations"]
