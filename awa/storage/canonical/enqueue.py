"""Enqueue on the canonical engine: rows of awa.jobs_hot / awa.scheduled_jobs.

The batch arrives built (``awa.storage.common.enqueue.build_batch``); one statement
per batch writes it, fed either by ``unnest`` of array parameters or by ``COPY``
into the per-session staging table (both sources are the common core's).  Rows
without a ``run_at`` go to ``jobs_hot`` as ``available`` (the schema's statement
trigger sends ``NOTIFY "awa:<queue>"`` at commit); rows with an explicit
``run_at``, even a past one, go to ``scheduled_jobs`` as ``scheduled`` (as
awa-pg 0.6.9), for promotion to make available once due.

Unique jobs: the claim is taken by a trigger, so ``ON CONFLICT`` cannot skip
duplicates; the statement keeps the rows ``KEPT_ROWS`` keeps, and a lost race
with a concurrent producer is retried (``common.enqueue.give_up``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from awa.statements import Rows, Steps, run_async, run_sync
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

# The common case (no unique keys, nothing deferred) needs no staging at all.
COPY_INTO_HOT = ("COPY awa.jobs_hot (kind, queue, args, priority, max_attempts, metadata, tags) "
                 "FROM STDIN")

# --- the insert statements, parameterised by their source -------------------
# Plain: every row is available now and none is unique.
_PLAIN_INSERT = """
INSERT INTO awa.jobs_hot (kind, queue, args, priority, max_attempts, metadata, tags)
SELECT s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata, s.tags::text[]
  FROM {source}
 ORDER BY s.ord
"""
_GENERAL_INSERT = KEPT_ROWS + """
, hot AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, max_attempts, run_at,
                              metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'available', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE NOT deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
), later AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                                    metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'scheduled', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
)
"""
_GENERAL_RETURNING = """
SELECT kept.ord, j.id, j.state, j.run_at, j.created_at
  FROM (SELECT * FROM hot UNION ALL SELECT * FROM later) j
  JOIN kept USING (id)
 ORDER BY kept.ord"""
_GENERAL_COUNT = "SELECT (SELECT count(*) FROM hot) + (SELECT count(*) FROM later) AS inserted"

# Only what the database decides comes back; the rest of each Job is the input.
_RETURNING = "RETURNING id, state, run_at, created_at"
PLAIN_INSERT_RETURNING = _PLAIN_INSERT.format(source=UNNEST_SOURCE) + _RETURNING
PLAIN_INSERT_COUNT = _PLAIN_INSERT.format(source=UNNEST_SOURCE)
GENERAL_INSERT_RETURNING = _GENERAL_INSERT.format(source=UNNEST_SOURCE) + _GENERAL_RETURNING
GENERAL_INSERT_COUNT = _GENERAL_INSERT.format(source=UNNEST_SOURCE) + _GENERAL_COUNT
STAGED_PLAIN_RETURNING = _PLAIN_INSERT.format(source=STAGING_SOURCE) + _RETURNING
STAGED_GENERAL_RETURNING = _GENERAL_INSERT.format(source=STAGING_SOURCE) + _GENERAL_RETURNING
STAGED_GENERAL_COUNT = _GENERAL_INSERT.format(source=STAGING_SOURCE) + _GENERAL_COUNT


def _statement(batch: EnqueueBatch, returning: bool) -> str:
    if batch.needs_general:
        return GENERAL_INSERT_RETURNING if returning else GENERAL_INSERT_COUNT
    return PLAIN_INSERT_RETURNING if returning else PLAIN_INSERT_COUNT


def _insert_steps(batch: EnqueueBatch, returning: bool,
                  in_transaction_now: Callable[[], bool]) -> Steps[InsertOutcome]:
    """One statement for the whole batch; a lost unique race is retried."""
    if not len(batch):
        return InsertOutcome([], 0, 0)
    rows = yield from insert_steps(
        _statement(batch, returning), unnest_params(batch),
        has_unique=batch.has_unique, in_transaction_now=in_transaction_now)
    return insert_outcome(batch, rows, returning)


class CanonicalEnqueue(UniqueHolders):
    """The enqueue group of the Engine protocol on the canonical engine."""

    async def insert_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                           returning: bool = True) -> InsertOutcome:
        return await run_async(conn, _insert_steps(batch, returning, lambda: in_transaction(conn)))

    def insert_batch_sync(self, conn: psycopg.Connection[Any], batch: EnqueueBatch,
                          returning: bool = True) -> InsertOutcome:
        """``insert_batch`` for the caller's own blocking connection."""
        return run_sync(conn, _insert_steps(batch, returning, lambda: in_transaction(conn)))

    async def copy_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                         returning: bool = True) -> InsertOutcome:
        """COPY the batch in: straight into jobs_hot when it can, else via staging."""
        if not len(batch):
            return InsertOutcome([], 0, 0)
        if not returning and not batch.needs_general:
            async with conn.cursor() as plain:
                async with plain.copy(COPY_INTO_HOT) as copy:
                    for row in copy_rows(batch, with_ord=False):
                        await copy.write_row(row)
            return InsertOutcome([], len(batch), 0)
        if returning:
            sql = STAGED_GENERAL_RETURNING if batch.needs_general else STAGED_PLAIN_RETURNING
        else:
            sql = STAGED_GENERAL_COUNT
        async with conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(CREATE_STAGING)
                await cur.execute(EMPTY_STAGING)
                async with cur.copy(COPY_INTO_STAGING) as copy:
                    for row in copy_rows(batch, with_ord=True):
                        await copy.write_row(row)
                for attempt in range(UNIQUE_RACE_RETRIES):
                    try:
                        async with conn.transaction():
                            await cur.execute(sql)
                        # (not returning implies needs_general here: the count arrives as a row)
                        return insert_outcome(batch, Rows(await cur.fetchall()), returning)
                    except pg_errors.UniqueViolation as exc:
                        if give_up(exc, attempt):
                            raise conflict_from(exc) from None
        raise AssertionError("unreachable")
