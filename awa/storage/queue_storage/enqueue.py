"""Queue storage: enqueue appends ``ready_entries`` (``deferred_jobs`` for an explicit run_at).

One statement per batch, fed by ``unnest`` of array parameters -- on every path, COPY's
included: each batch is one round trip (issue 48).  Each lane (queue, priority, shard)
gets its positions from ``awa.qs_reserve_lane``, which locks the lane's enqueue head until
the producer commits -- so positions become visible in lane order and a claimer can never
pass a position still to commit -- and reads the lane's end from the entries themselves:
enqueue updates no row at all.  A COPY cannot be that one statement: its rows need their
positions, so the lane must be reserved (and stay locked) before the COPY starts, in a
transaction around both -- four to five round trips per batch, the lane held across them
(layout 8's path); staging the rows first and appending them from there writes every row
twice.  So ``copy_batch`` sends the batch as arrays, like ``insert_batch``.

``APPEND_READY`` is shared by every path that makes a job runnable again
(promotion, admin retry, callback retry, DLQ redrive): given a CTE ``src``
of full job rows it appends them to their lanes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from awa.statements import Steps, first_value, query, run_async, run_sync
from awa.storage.common.enqueue import (
    KEPT_ROWS,
    UNNEST_SOURCE,
    UniqueHolders,
    counted,
    in_transaction,
    insert_outcome,
    insert_steps,
    unnest_params,
)
from awa.storage.engine import EnqueueBatch, InsertOutcome
from awa.storage.queue_storage.procedures import Procedure
from awa.storage.queue_storage.schema import InSchema

# Given ``src`` (id, kind, queue, args, priority, attempt, max_attempts, run_at,
# attempted_at, created_at, errors, metadata, tags, unique_key, unique_states,
# run_lease, progress), append every row to its lane.  Defines ``ready``
# (RETURNING id, state, run_at, created_at).
APPEND_READY = """
, rq_pos AS MATERIALIZED (
    SELECT s.*, row_number() OVER (PARTITION BY s.queue, s.priority ORDER BY s.id) AS lane_pos
      FROM src s
), rq_heads AS MATERIALIZED (
    SELECT l.queue, l.priority, r.lane_shard AS shard, r.base
      FROM (SELECT DISTINCT queue, priority FROM src ORDER BY queue, priority) l
      CROSS JOIN LATERAL awa.qs_reserve_lane(l.queue, l.priority) r
), ready AS (
    INSERT INTO awa.ready_entries (ready_slot, ready_id, job_id, queue, priority, shard, lane_seq,
                                   kind, args, attempt, max_attempts, run_at, attempted_at,
                                   created_at, errors, metadata, tags, unique_key, unique_states,
                                   run_lease, progress)
    SELECT (SELECT awa.qs_slot('queue')), nextval('awa.qs_ready_id_seq'), p.id, p.queue, p.priority,
           h.shard, h.base + p.lane_pos - 1, p.kind, p.args, p.attempt,
           p.max_attempts, p.run_at, p.attempted_at, p.created_at, p.errors, p.metadata, p.tags,
           p.unique_key, p.unique_states, p.run_lease, p.progress
      FROM rq_pos p
      JOIN rq_heads h ON h.queue = p.queue AND h.priority = p.priority
     ORDER BY p.id
    RETURNING job_id AS id, 'available'::awa.job_state AS state, run_at, created_at
)"""

# A plain batch (no unique key, no run_at) inserted by statement: the installed functions
# of sql/enqueue.sql, one generic plan per session -- awa.qs_insert_plain returns the
# jobs' rows, awa.qs_enqueue_plain only their count.
INSERT_PLAIN = Procedure("qs_insert_plain")
ENQUEUE_PLAIN = Procedure("qs_enqueue_plain")
_PLAIN_COLUMNS = ("kind", "queue", "args", "priority", "max_attempts", "metadata", "tags")

# Of the kept rows (KEPT_ROWS), deferred ones go to deferred_jobs; the rest append.
_INSERT = KEPT_ROWS + """
, src AS (
    SELECT id, kind, queue, args, priority, 0::smallint AS attempt, max_attempts, run_at,
           NULL::timestamptz AS attempted_at, now() AS created_at, NULL::jsonb[] AS errors,
           metadata, tags, unique_key, unique_states, 0::bigint AS run_lease,
           NULL::jsonb AS progress
      FROM kept WHERE NOT deferred
)""" + APPEND_READY + """
, later AS (
    INSERT INTO awa.deferred_jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                                   metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'scheduled', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
), claimed AS (
    INSERT INTO awa.job_unique_claims (unique_key, job_id)
    SELECT unique_key, id FROM kept WHERE claims
)
"""
_RETURNING = """
SELECT kept.ord, j.id, j.state, j.run_at, j.created_at
  FROM (SELECT * FROM ready UNION ALL SELECT * FROM later) j
  JOIN kept USING (id)
 ORDER BY kept.ord"""
_COUNT = "SELECT (SELECT count(*) FROM ready) + (SELECT count(*) FROM later) AS inserted"

INSERT_RETURNING = _INSERT.format(source=UNNEST_SOURCE) + _RETURNING
INSERT_COUNT = _INSERT.format(source=UNNEST_SOURCE) + _COUNT


def _plain_params(batch: EnqueueBatch) -> dict[str, list[Any]]:
    return {name: getattr(batch, name) for name in _PLAIN_COLUMNS}


class QueueStorageEnqueue(InSchema, UniqueHolders):
    """The enqueue group on queue storage (``unique_holder`` is the common one: it reads
    the view)."""

    async def insert_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                           returning: bool = True) -> InsertOutcome:
        return await run_async(conn, self._insert_steps(batch, returning,
                                                        lambda: in_transaction(conn)))

    def insert_batch_sync(self, conn: psycopg.Connection[Any], batch: EnqueueBatch,
                          returning: bool = True) -> InsertOutcome:
        """``insert_batch`` for the caller's own blocking connection."""
        return run_sync(conn, self._insert_steps(batch, returning, lambda: in_transaction(conn)))

    def _insert_steps(self, batch: EnqueueBatch, returning: bool,
                      in_transaction_now: Callable[[], bool]) -> Steps[InsertOutcome]:
        """A plain batch by ``awa.qs_insert_plain`` (its rows) or ``awa.qs_enqueue_plain``
        (its count); any other by one statement, a lost unique race retried."""
        if not len(batch):
            return InsertOutcome([], 0, 0)
        if not batch.needs_general and not returning:
            rows = yield from query(self.sql(ENQUEUE_PLAIN.call), _plain_params(batch))
            return counted(batch, int(first_value(rows)))
        if not batch.needs_general:
            rows = yield from query(self.sql(INSERT_PLAIN.call), _plain_params(batch))
            return insert_outcome(batch, rows, returning)
        rows = yield from insert_steps(
            self.sql(INSERT_RETURNING if returning else INSERT_COUNT), unnest_params(batch),
            has_unique=batch.has_unique, in_transaction_now=in_transaction_now)
        return insert_outcome(batch, rows, returning)

    async def copy_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                         returning: bool = True) -> InsertOutcome:
        """The COPY paths' batch, written as ``insert_batch`` writes it: one statement, one
        round trip (the module's docstring says why not a COPY)."""
        return await self.insert_batch(conn, batch, returning)
