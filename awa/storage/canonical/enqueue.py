"""Enqueue on the canonical engine: rows of awa.jobs_hot / awa.scheduled_jobs.

The batch arrives built (``awa.storage.common.enqueue.build_batch``); one statement
per batch writes it (``sql/enqueue.sql``), fed either by ``unnest`` of array parameters or
by ``COPY`` into the per-session staging table (the staging table is the common core's).  Rows
without a ``run_at`` go to ``jobs_hot`` as ``available`` (the schema's statement
trigger sends ``NOTIFY "awa:<queue>"`` at commit); rows with an explicit
``run_at``, even a past one, go to ``scheduled_jobs`` as ``scheduled`` (as
awa-pg 0.6.9), for promotion to make available once due.

Unique jobs: the claim is taken by a trigger, so ``ON CONFLICT`` cannot skip
duplicates; the statement keeps the rows ``common.enqueue.KEPT_ROWS`` keeps, and a lost race
with a concurrent producer is retried (``common.enqueue.give_up``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from awa.statements import Rows, Steps, named_statements, run_async, run_sync
from awa.storage.common.enqueue import (
    COPY_INTO_STAGING,
    CREATE_STAGING,
    EMPTY_STAGING,
    UNIQUE_RACE_RETRIES,
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

# One statement per source (array parameters, the staging table), shape (plain, general) and
# result (rows, count), each whole in sql/enqueue.sql.
_SQL = named_statements("awa.storage.canonical", "sql/enqueue.sql")
COPY_INTO_HOT = _SQL["copy_into_hot"]
PLAIN_INSERT_RETURNING = _SQL["plain_insert_returning"]
PLAIN_INSERT_COUNT = _SQL["plain_insert_count"]
GENERAL_INSERT_RETURNING = _SQL["general_insert_returning"]
GENERAL_INSERT_COUNT = _SQL["general_insert_count"]
STAGED_PLAIN_RETURNING = _SQL["staged_plain_returning"]
STAGED_GENERAL_RETURNING = _SQL["staged_general_returning"]
STAGED_GENERAL_COUNT = _SQL["staged_general_count"]


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
