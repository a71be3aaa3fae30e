"""One definition of a statement sequence for both kinds of connection.

Some work runs on an ``AsyncConnection`` (the runtime, the async client) and on a blocking
``Connection`` (the CLI, the sync client, test templates, a user's own connection through
the bridge): reading the layout, migrating, installing queue storage.  Written twice, the
two copies drift.  Here it is written once, as a generator of ``Query`` (and
``InTransaction``) steps that receives each query's rows as dicts; ``run_sync`` and
``run_async`` send the steps down one connection or the other.  The steps themselves never
touch a connection, so the logic between the statements is the same code on both paths.

Statements themselves live in ``.sql`` files; ``named_statements`` is the one reader of
files of named queries (``-- name: <name>`` sections).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, TypeVar, cast

import psycopg
from psycopg.rows import dict_row

T = TypeVar("T")

_SECTION = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)


@cache
def named_statements(package: str, path: str) -> dict[str, str]:
    """Every statement of the named-query file ``path`` (relative to ``package``), by name.

    A statement starts at a ``-- name: <name>`` line and runs to the next one; lines that
    start with ``--`` (its description) and empty lines are left out, so what is sent is the
    statement as written.  The one loader of named queries (the storage transition's
    ``transition.sql``, queue storage's ``sql/reads.sql`` ...)."""
    text = resources.files(package).joinpath(*path.split("/")).read_text()
    parts = _SECTION.split(text)[1:]
    found = {}
    for name, body in zip(parts[::2], parts[1::2], strict=True):
        if name in found:
            raise ValueError(f"{package}/{path}: two statements named {name!r}")
        lines = [line for line in body.splitlines() if line and not line.startswith("--")]
        found[name] = "\n".join(lines).strip()
    return found


@dataclass(frozen=True)
class Query:
    """One statement; its rows (dicts; none for a statement without a result) come back."""

    sql: str
    params: Mapping[str, Any] | Sequence[Any] | None = None


@dataclass(frozen=True)
class InTransaction:
    """Steps run inside one transaction (rolled back when they raise); their result comes
    back."""

    steps: Steps[Any]


Step = Query | InTransaction


class Rows(list[dict[str, Any]]):
    """A query's rows (dicts; none for a statement without a result), with ``rowcount``:
    how many rows the statement touched (an INSERT without RETURNING says it only here)."""

    rowcount: int = -1


# Yields the steps, receives what each returns (``Rows``, or a nested transaction's result),
# returns the sequence's result.  A step that raises (a unique violation, say) is thrown
# into the steps at their ``yield``, so they may catch it and go on.
Steps = Generator[Step, Any, T]


def _rows(fetched: list[dict[str, Any]], rowcount: int) -> Rows:
    rows = Rows(fetched)
    rows.rowcount = rowcount
    return rows


def run_sync(conn: psycopg.Connection[Any], steps: Steps[T]) -> T:
    """Run ``steps`` on a blocking connection; their result."""
    advance, reply = steps.send, None
    while True:
        try:
            step = advance(reply)
        except StopIteration as end:
            return cast(T, end.value)
        try:
            if isinstance(step, InTransaction):
                with conn.transaction():
                    reply = run_sync(conn, step.steps)
            else:
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(step.sql, step.params)
                    reply = _rows(cur.fetchall() if cur.description is not None else [],
                                  cur.rowcount)
            advance = steps.send
        except Exception as exc:  # noqa: BLE001 (not swallowed: thrown into the steps)
            advance, reply = steps.throw, exc


async def run_async(conn: psycopg.AsyncConnection[Any], steps: Steps[T]) -> T:
    """Run ``steps`` on an async connection; their result."""
    advance, reply = steps.send, None
    while True:
        try:
            step = advance(reply)
        except StopIteration as end:
            return cast(T, end.value)
        try:
            if isinstance(step, InTransaction):
                async with conn.transaction():
                    reply = await run_async(conn, step.steps)
            else:
                async with conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(step.sql, step.params)
                    fetched = await cur.fetchall() if cur.description is not None else []
                    reply = _rows(fetched, cur.rowcount)
            advance = steps.send
        except Exception as exc:  # noqa: BLE001 (not swallowed: thrown into the steps)
            advance, reply = steps.throw, exc


def query(sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> Steps[Rows]:
    """One statement as steps of its own (``yield from``), typed: its rows."""
    rows: Rows = yield Query(sql, params)
    return rows


def transaction(steps: Steps[T]) -> Steps[T]:
    """``steps`` inside one transaction, as a part of a longer sequence (``yield from``)."""
    result: T = yield InTransaction(steps)
    return result


def first_value(rows: Rows) -> Any:
    """The first column of the first row, or None when there is none."""
    return next(iter(rows[0].values())) if rows else None
