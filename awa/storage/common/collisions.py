"""The unique-collision fallback, the one copy every batch write uses.

A batch that moves jobs into a state of their unique mask (retry, rescue,
promotion, admin retry, DLQ redrive) can collide with a newer holder of the
same key.  One wedged row must not stop the rest, so the batch degrades to
one row at a time, each in its own savepoint; a row that still collides is
the superseded attempt and goes to ``on_collision`` (normally: cancelled as
``rescued as duplicate``), or is left as it was when there is none.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg

log = logging.getLogger("awa.storage")

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class FallbackOutcome(Generic[T, R]):
    """What a batch write did, once its collisions were dealt with."""

    applied: list[R] = field(default_factory=list)
    """Rows the batch (or each row alone) wrote."""
    superseded: list[R] = field(default_factory=list)
    """What ``on_collision`` wrote for the rows that collided."""
    left: list[T] = field(default_factory=list)
    """Items that collided and were left unchanged (no handler, or it collided too)."""
    degraded: bool = False
    """The batch collided and went row by row."""
    statements: int = 0


async def apply_batch_or_each(
    conn: psycopg.AsyncConnection[Any],
    items: Sequence[T],
    *,
    batch: Callable[[Sequence[T]], Awaitable[list[R]]],
    each: Callable[[T], Awaitable[list[R]]] | None = None,
    on_collision: Callable[[T], Awaitable[list[R]]] | None = None,
    what: str = "batch",
) -> FallbackOutcome[T, R]:
    """Run ``batch(items)``; on a unique violation, ``each`` row in a savepoint.

    ``each`` defaults to ``batch`` of one item.  The fallback runs inside one
    transaction, so the rows it moves commit together.
    """
    outcome: FallbackOutcome[T, R] = FallbackOutcome()
    if not items:
        return outcome
    try:
        async with conn.transaction():
            outcome.statements += 1
            outcome.applied = await batch(items)
        return outcome
    except psycopg.errors.UniqueViolation as exc:
        log.warning("%s collided on a unique key (%s); retrying row by row",
                    what, " ".join(str(exc).split()))
    outcome.degraded = True
    one = each or (lambda item: batch([item]))
    async with conn.transaction():
        for item in items:
            try:
                async with conn.transaction():
                    outcome.statements += 1
                    outcome.applied.extend(await one(item))
                continue
            except psycopg.errors.UniqueViolation:
                pass
            if on_collision is None:
                outcome.left.append(item)
                continue
            try:
                async with conn.transaction():
                    outcome.statements += 1
                    outcome.superseded.extend(await on_collision(item))
            except psycopg.errors.UniqueViolation:
                # Only a mask that includes the fallback state gets here.
                log.error("%s: an item can be neither moved nor cancelled: a newer job holds its "
                          "unique key and its unique_states mask includes cancelled; cancel the "
                          "newer job or fix the mask (see the unique-claim wedge runbook)", what)
                outcome.left.append(item)
    return outcome


async def lock_then_apply(
    conn: psycopg.AsyncConnection[Any],
    select: Callable[[], Awaitable[list[T]]],
    *,
    batch: Callable[[Sequence[T]], Awaitable[list[R]]],
    on_collision: Callable[[T], Awaitable[list[R]]] | None = None,
    what: str = "batch",
) -> tuple[int, FallbackOutcome[T, R]]:
    """Rescue and promotion on every engine: lock the candidates ``select`` finds, then
    ``apply_batch_or_each`` over those same rows, all in one transaction.

    Returns how many candidates were found and what was written; the outcome's
    ``statements`` include the select.
    """
    async with conn.transaction():
        rows = await select()
        if not rows:
            return 0, FallbackOutcome(statements=1)
        done = await apply_batch_or_each(conn, rows, batch=batch, on_collision=on_collision,
                                         what=what)
    done.statements += 1
    return len(rows), done
