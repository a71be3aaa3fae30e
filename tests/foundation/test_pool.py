"""The pool every runtime and client uses (awa.db.ResilientPool): a connection the server
ended is replaced before use, and a busy pool hands its connections out without a round
trip (issue 32: a check query on every checkout cost a round trip per claim and per flush).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from awa import config, db


async def _traced_checkouts(pool, n: int) -> str:
    """libpq's own trace of the pool's one connection over ``n`` checkouts: every message
    the client sent and received (the driver's record, nothing stubbed)."""
    async with pool.connection() as conn:
        pgconn = conn.pgconn
    with tempfile.TemporaryDirectory(prefix="wta-trace-") as scratch:
        path = Path(scratch) / "trace"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        pgconn.trace(fd)
        try:
            for _ in range(n):
                async with pool.connection() as conn:
                    assert conn.pgconn is pgconn  # the same connection, from the pool
        finally:
            pgconn.untrace()
            os.close(fd)
        return path.read_text()


async def test_a_busy_pool_checks_out_without_a_round_trip(database_url):
    pool = await db.open_pool(database_url, config.APP_NAME_WORKER, max_size=1)
    try:
        trace = await _traced_checkouts(pool, 50)
    finally:
        await pool.close()
    # Not one message from the client ("F"): psycopg_pool's check would send Query "".
    assert "\tF\t" not in trace, trace[:2000]


async def test_a_connection_idle_past_the_limit_is_checked_with_a_round_trip(database_url):
    pool = await db.open_pool(database_url, config.APP_NAME_WORKER, max_size=1)
    try:
        async with pool.connection() as conn:
            assert not db.connection_suspect(conn, time.monotonic())
            assert db.connection_suspect(conn, time.monotonic() - config.POOL_CHECK_IDLE_S - 1)
            assert db.connection_suspect(conn, None)
    finally:
        await pool.close()


async def test_a_terminated_connection_is_replaced_before_use(database_url, db):
    pool = await awa_pool(database_url)
    try:
        async with pool.connection() as conn:
            first = conn.info.backend_pid
        # The timeout makes pg_terminate_backend wait until the backend has exited.
        db.execute("SELECT pg_terminate_backend(%s, 5000)", (first,))
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
        assert row is not None and row["pid"] != first
    finally:
        await pool.close()


async def test_a_server_restart_like_termination_of_every_backend_is_survived(database_url,
                                                                              db):
    """Every pooled connection ended at once (as a restart ends them): each checkout after
    it gets a live connection, none raises."""
    pool = await awa_pool(database_url, size=3)
    try:
        conns = [await pool.getconn() for _ in range(3)]
        pids = {c.info.backend_pid for c in conns}
        for c in conns:
            await pool.putconn(c)
        for pid in pids:
            db.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        for _ in range(6):
            async with pool.connection() as conn:
                row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
            assert row is not None and row["pid"] not in pids
    finally:
        await pool.close()


async def awa_pool(url: str, size: int = 1):
    pool = await db.open_pool(url, config.APP_NAME_WORKER, max_size=size, min_size=size)
    await pool.wait()
    return pool

