"""The one way storage code reads rows as dicts, whatever row factory the caller's connection
has (an application's connection may have any): each engine module used to carry its own copy."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row


async def fetch_all(conn: psycopg.AsyncConnection[Any], query: Any,
                    params: Any = None) -> list[dict[str, Any]]:
    """Every row of ``query`` as a dict (none for a statement that returns no rows)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description is not None else []


async def fetch_one(conn: psycopg.AsyncConnection[Any], query: Any,
                    params: Any = None) -> dict[str, Any] | None:
    """The first row of ``query`` as a dict, or None."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchone() if cur.description is not None else None


def float_or_none(value: Any) -> float | None:
    """A numeric column as float (PostgreSQL numeric arrives as Decimal), None kept."""
    return None if value is None else float(value)
