"""Queue storage: enqueue appends ``ready_entries`` (``deferred_jobs`` for an explicit run_at).

One statement per batch, fed by ``unnest`` of array parameters or by COPY
into the canonical per-session staging table.  Each lane (queue, priority,
shard) gets its positions from ``awa.qs_reserve_lane``, which locks the
lane's enqueue head until the producer commits -- so positions become
visible in lane order and a claimer can never pass a position still to
commit -- and reads the lane's end from the entries themselves: enqueue
updates no row at all.

``APPEND_READY`` is shared by every path that makes a job runnable again
(promotion, admin retry, callback retry, DLQ redrive): given a CTE ``src``
of full job rows it appends them to their lanes.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from awa.storage.canonical import enqueue as canonical
from awa.storage.canonical.enqueue import (
    COPY_INTO_STAGING,
    CREATE_STAGING,
    EMPTY_STAGING,
    KEPT_ROWS,
    STAGING_SOURCE,
    UNIQUE_RACE_RETRIES,
    UNNEST_SOURCE,
    CanonicalEnqueue,
)
from awa.storage.engine import EnqueueBatch, InsertOutcome

# Given ``src`` (id, kind, queue, args, priority, attempt, max_attempts, run_at,
# attempted_at, created_at, errors, metadata, tags, unique_key, unique_states,
# run_lease, progress), append every row to its lane.  Defines ``ready``
# (RETURNING id, state, run_at, created_at).
APPEND_READY = """
, rq AS MATERIALIZED (
    SELECT s.*,
           CASE WHEN COALESCE(m.enqueue_shards, 1) > 1
                THEN (s.id %% m.enqueue_shards)::smallint ELSE 0::smallint END AS shard
      FROM src s LEFT JOIN awa.queue_meta m ON m.queue = s.queue
), rq_pos AS MATERIALIZED (
    SELECT rq.*, row_number() OVER (PARTITION BY rq.queue, rq.priority, rq.shard
                                    ORDER BY rq.id) AS lane_pos
      FROM rq
), rq_lanes AS MATERIALIZED (
    SELECT DISTINCT queue, priority, shard FROM rq
), rq_heads AS MATERIALIZED (
    SELECT queue, priority, shard, awa.qs_reserve_lane(queue, priority, shard) AS base
      FROM rq_lanes ORDER BY queue, priority, shard
), ready AS (
    INSERT INTO awa.ready_entries (ready_slot, ready_id, job_id, queue, priority, shard, lane_seq,
                                   kind, args, attempt, max_attempts, run_at, attempted_at,
                                   created_at, errors, metadata, tags, unique_key, unique_states,
                                   run_lease, progress)
    SELECT (SELECT awa.qs_slot('queue')), nextval('awa.qs_ready_id_seq'), p.id, p.queue, p.priority,
           p.shard, h.base + p.lane_pos - 1, p.kind, p.args, p.attempt,
           p.max_attempts, p.run_at, p.attempted_at, p.created_at, p.errors, p.metadata, p.tags,
           p.unique_key, p.unique_states, p.run_lease, p.progress
      FROM rq_pos p
      JOIN rq_heads h ON h.queue = p.queue AND h.priority = p.priority AND h.shard = p.shard
     ORDER BY p.id
    RETURNING job_id AS id, 'available'::awa.job_state AS state, run_at, created_at
)"""

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
# Run without parameters: no placeholder escaping.
STAGED_RETURNING = (_INSERT.format(source=STAGING_SOURCE) + _RETURNING).replace("%%", "%")
STAGED_COUNT = (_INSERT.format(source=STAGING_SOURCE) + _COUNT).replace("%%", "%")


def _outcome_rows(batch: EnqueueBatch, rows: list[dict[str, Any]],
                  returning: bool) -> InsertOutcome:
    if returning:
        return canonical._returned(batch, rows)
    return canonical._counted(batch, int(rows[0]["inserted"]) if rows else 0)


class QueueStorageEnqueue(CanonicalEnqueue):
    """The enqueue group on queue storage (``unique_holder`` is canonical's: it reads the view)."""

    async def insert_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                           returning: bool = True) -> InsertOutcome:
        if not len(batch):
            return InsertOutcome([], 0, 0)
        sql = INSERT_RETURNING if returning else INSERT_COUNT
        params = canonical._params(batch)
        guard = batch.has_unique and canonical._in_transaction(conn)
        for attempt in range(UNIQUE_RACE_RETRIES):
            try:
                async with conn.cursor(row_factory=dict_row) as cur:
                    if guard:
                        async with conn.transaction():
                            await cur.execute(sql, params)
                    else:
                        await cur.execute(sql, params)
                    return _outcome_rows(batch, await cur.fetchall(), returning)
            except pg_errors.UniqueViolation as exc:
                if canonical._give_up(exc, attempt, conn, guard):
                    raise canonical._conflict_from(exc) from None
        raise AssertionError("unreachable")

    def insert_batch_sync(self, conn: psycopg.Connection[Any], batch: EnqueueBatch,
                          returning: bool = True) -> InsertOutcome:
        if not len(batch):
            return InsertOutcome([], 0, 0)
        sql = INSERT_RETURNING if returning else INSERT_COUNT
        params = canonical._params(batch)
        guard = batch.has_unique and canonical._in_transaction(conn)
        for attempt in range(UNIQUE_RACE_RETRIES):
            try:
                with conn.cursor(row_factory=dict_row) as cur:
                    if guard:
                        with conn.transaction():
                            cur.execute(sql, params)
                    else:
                        cur.execute(sql, params)
                    return _outcome_rows(batch, cur.fetchall(), returning)
            except pg_errors.UniqueViolation as exc:
                if canonical._give_up(exc, attempt, conn, guard):
                    raise canonical._conflict_from(exc) from None
        raise AssertionError("unreachable")

    async def copy_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                         returning: bool = True) -> InsertOutcome:
        """COPY into the session's staging table, then one append statement."""
        if not len(batch):
            return InsertOutcome([], 0, 0)
        sql = STAGED_RETURNING if returning else STAGED_COUNT
        async with conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(CREATE_STAGING)
                await cur.execute(EMPTY_STAGING)
                async with cur.copy(COPY_INTO_STAGING) as copy:
                    for row in canonical._copy_rows(batch, with_ord=True):
                        await copy.write_row(row)
                for attempt in range(UNIQUE_RACE_RETRIES):
                    try:
                        async with conn.transaction():
                            await cur.execute(sql)
                        return _outcome_rows(batch, await cur.fetchall(), returning)
                    except pg_errors.UniqueViolation as exc:
                        if canonical._give_up(exc, attempt, conn, guarded=True):
                            raise canonical._conflict_from(exc) from None
        raise AssertionError("unreachable")
