"""The only way the ops layer talks to a database (docs/architecture.md §10).

Every read runs in its own short ``READ ONLY`` transaction with
``statement_timeout`` and ``lock_timeout`` set locally, under an
``application_name`` of ``awa-ops`` or ``awa-tui``; no snapshot outlives the
call.  ``read_only=True`` also makes the whole session read-only
(``default_transaction_read_only``), so an operator action attempted from a
read-only console is refused by PostgreSQL itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.numeric import FloatLoader

from awa import config, db

SQL_DIR = Path(__file__).parent / "sql"


def load_sql(name: str) -> str:
    """A named query from ``awa_ops/sql/<name>.sql``."""
    return (SQL_DIR / f"{name}.sql").read_text()


@dataclass
class OpsSession:
    """One autocommit connection; each ``read()`` is a bounded read-only transaction."""

    conn: psycopg.AsyncConnection[Any]
    url: str
    statement_timeout_ms: int = config.OPS_STATEMENT_TIMEOUT_MS
    lock_timeout_ms: int = config.OPS_LOCK_TIMEOUT_MS
    read_only: bool = False
    # Facts that cannot change while a session lives (storage engine, schema
    # shape), so each is asked once per session rather than once per check.
    cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    async def open(cls, url: str, *, application_name: str = config.APP_NAME_OPS,
                   read_only: bool = False,
                   statement_timeout_ms: int = config.OPS_STATEMENT_TIMEOUT_MS,
                   lock_timeout_ms: int = config.OPS_LOCK_TIMEOUT_MS) -> OpsSession:
        conn = await db.connect(url, application_name, pooled=True)
        # Through a transaction pooler (PgBouncer) the session is not ours: nothing is
        # prepared server-side, and read-only is set per transaction instead of on a
        # server connection the pooler hands to others next.
        pooled = (await db.server_identity(conn)).pooled
        if not pooled:
            conn.prepare_threshold = db.DEFAULT_PREPARE_THRESHOLD
        # Numbers at the SQL boundary: a bare EXTRACT(EPOCH ...) is numeric, and a Decimal
        # next to a float is a TypeError in the middle of an incident.  Every numeric
        # this layer reads is an age, a ratio or a count: a float.
        conn.adapters.register_loader("numeric", FloatLoader)
        if read_only and not pooled:
            await conn.execute("SET default_transaction_read_only = on")
        return cls(conn, url, statement_timeout_ms, lock_timeout_ms, read_only)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[psycopg.AsyncCursor[dict[str, Any]]]:
        async with self.conn.transaction():
            await self.conn.execute("SET TRANSACTION READ ONLY")
            await self._set_timeouts()
            async with self.conn.cursor(row_factory=dict_row) as cur:
                yield cur

    @asynccontextmanager
    async def write(self) -> AsyncIterator[psycopg.AsyncCursor[dict[str, Any]]]:
        """An operator action; still bounded by the timeouts, refused when read-only."""
        async with self.conn.transaction():
            if self.read_only:  # PostgreSQL refuses the write, pooler or not
                await self.conn.execute("SET TRANSACTION READ ONLY")
            await self._set_timeouts()
            async with self.conn.cursor(row_factory=dict_row) as cur:
                yield cur

    async def fetch_all(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        async with self.read() as cur:
            await cur.execute(query, params)
            return await cur.fetchall()

    async def fetch_one(self, query: str, params: Any = None) -> dict[str, Any] | None:
        async with self.read() as cur:
            await cur.execute(query, params)
            return await cur.fetchone()

    async def fetch_sets(self, *queries: tuple[str, Any]) -> list[list[dict[str, Any]]]:
        """Several queries in ONE bounded read transaction: one consistent, short snapshot."""
        results = []
        async with self.read() as cur:
            for query, params in queries:
                await cur.execute(query, params)
                results.append(await cur.fetchall())
        return results

    async def _set_timeouts(self) -> None:
        await self.conn.execute(
            # Parallel workers would only add start-up latency and load to these
            # small index-backed reads; so would JIT, whose cost estimate the queue-storage
            # ``awa.jobs`` view inflates: it compiled for 3 s before an empty read.
            "SELECT set_config('statement_timeout', %s, true),"
            " set_config('lock_timeout', %s, true),"
            " set_config('max_parallel_workers_per_gather', '0', true),"
            " set_config('jit', 'off', true)",
            (f"{self.statement_timeout_ms}ms", f"{self.lock_timeout_ms}ms"))

    async def close(self) -> None:
        await self.conn.close()

    async def __aenter__(self) -> OpsSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
