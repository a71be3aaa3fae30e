"""Queue storage: enqueue appends ``ready_entries`` (``deferred_jobs`` for an explicit run_at).

One statement per batch, fed by ``unnest`` of array parameters or by COPY
into the per-session staging table (both sources are the common core's).
Each lane (queue, priority, shard) gets its positions from ``awa.qs_reserve_lane``, which locks the
lane's enqueue head until the producer commits -- so positions become
visible in lane order and a claimer can never pass a position still to
commit -- and reads the lane's end from the entries themselves: enqueue
updates no row at all.

``APPEND_READY`` is shared by every path that makes a job runnable again
(promotion, admin retry, callback retry, DLQ redrive): given a CTE ``src``
of full job rows it appends them to their lanes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row, tuple_row

from awa.statements import Rows, Steps, query, run_async, run_sync
from awa.storage.common.enqueue import (
    COPY_INTO_STAGING,
    CREATE_STAGING,
    EMPTY_STAGING,
    KEPT_ROWS,
    STAGING_SOURCE,
    UNIQUE_RACE_RETRIES,
    UNNEST_SOURCE,
    UniqueHolders,
    conflict_from,
    copy_rows,
    give_up,
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

# The direct COPY of a plain batch: one reservation per (queue, priority) of the
# batch, in a fixed order (two producers lock lanes the same way round), then
# the rows straight into ready_entries, positions numbered from each lane's base.
RESERVE_LANES = """
SELECT l.queue, l.priority, r.lane_shard, r.base, (SELECT awa.qs_slot('queue')) AS slot
  FROM unnest(%s::text[], %s::smallint[]) WITH ORDINALITY AS l(queue, priority, ord)
  CROSS JOIN LATERAL awa.qs_reserve_lane(l.queue, l.priority) r
 ORDER BY l.ord"""
COPY_INTO_READY = ("COPY awa.ready_entries (ready_slot, queue, priority, shard, lane_seq, kind, "
                   "args, max_attempts, metadata, tags) FROM STDIN")

# A plain batch (no unique key, no run_at) inserted by statement: the installed function
# awa.qs_insert_plain (sql/enqueue.sql), one generic plan per session.
INSERT_PLAIN = Procedure("qs_insert_plain")
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
# Run without parameters, as canonical's staged statements are: the text holds no ``%``.
STAGED_RETURNING = _INSERT.format(source=STAGING_SOURCE) + _RETURNING
STAGED_COUNT = _INSERT.format(source=STAGING_SOURCE) + _COUNT


def _plain_params(batch: EnqueueBatch) -> dict[str, list[Any]]:
    return {name: getattr(batch, name) for name in _PLAIN_COLUMNS}


def _ready_rows(batch: EnqueueBatch,
                reserved: dict[tuple[str, int], list[Any]]) -> Iterator[tuple[Any, ...]]:
    """COPY_INTO_READY's rows: each job at the next position of its lane, from the lane's
    reserved base.  A batch of one lane (the usual one) numbers its rows with a range."""
    columns = (batch.kind, batch.args, batch.max_attempts, batch.metadata, batch.tags)
    if len(reserved) == 1:
        (shard, base, slot), = reserved.values()
        return zip(repeat(slot), batch.queue, batch.priority, repeat(shard),
                   range(base, base + len(batch)), *columns)
    lanes = [reserved[lane] for lane in zip(batch.queue, batch.priority)]
    shards, seqs = [lane[0] for lane in lanes], []
    for lane in lanes:
        seqs.append(lane[1])
        lane[1] += 1
    return zip(repeat(lanes[0][2]), batch.queue, batch.priority, shards, seqs, *columns)


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
        """A plain batch by ``awa.qs_insert_plain``; any other by one statement, a lost
        unique race retried."""
        if not len(batch):
            return InsertOutcome([], 0, 0)
        if not batch.needs_general:
            rows = yield from query(self.sql(INSERT_PLAIN.call), _plain_params(batch))
            return insert_outcome(batch, rows, returning)
        rows = yield from insert_steps(
            self.sql(INSERT_RETURNING if returning else INSERT_COUNT), unnest_params(batch),
            has_unique=batch.has_unique, in_transaction_now=in_transaction_now)
        return insert_outcome(batch, rows, returning)

    async def copy_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                         returning: bool = True) -> InsertOutcome:
        """COPY the batch in: straight into ready_entries when it can (a plain batch whose
        ids are not asked for), else into the session's staging table and one append."""
        if not len(batch):
            return InsertOutcome([], 0, 0)
        if not returning and not batch.needs_general:
            await self._copy_plain(conn, batch)
            return InsertOutcome([], len(batch), 0)
        sql = STAGED_RETURNING if returning else STAGED_COUNT
        async with conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(self.sql(CREATE_STAGING))
                await cur.execute(self.sql(EMPTY_STAGING))
                async with cur.copy(self.sql(COPY_INTO_STAGING)) as copy:
                    for row in copy_rows(batch, with_ord=True):
                        await copy.write_row(row)
                for attempt in range(UNIQUE_RACE_RETRIES):
                    try:
                        async with conn.transaction():
                            await cur.execute(self.sql(sql))
                        return insert_outcome(batch, Rows(await cur.fetchall()), returning)
                    except pg_errors.UniqueViolation as exc:
                        if give_up(exc, attempt):
                            raise conflict_from(exc) from None
        raise AssertionError("unreachable")

    async def _copy_plain(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch) -> None:
        """Reserve each (queue, priority) lane of the batch, then COPY the rows with their
        positions; the lanes stay locked to commit, so both run in one transaction."""
        lanes = sorted(set(zip(batch.queue, batch.priority, strict=True)))
        async with conn.transaction():
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(self.sql(RESERVE_LANES),
                                  ([q for q, _ in lanes], [p for _, p in lanes]))
                reserved = {(q, p): [shard, base, slot]
                            for q, p, shard, base, slot in await cur.fetchall()}
                async with cur.copy(self.sql(COPY_INTO_READY)) as copy:
                    for row in _ready_rows(batch, reserved):
                        await copy.write_row(row)
