"""One statement sequence, two kinds of connection (``awa.statements``).

The layout check, the migrations and queue storage's install are each written once as steps;
here the drivers themselves: the same steps give the same result on a blocking and an async
connection, a nested transaction commits or rolls back as a whole, and a migration through
either driver leaves the same database.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from awa import storage
from awa.schema.layout import describe_layout, describe_layout_sync
from awa.statements import Query, Steps, run_async, run_sync, transaction
from support.databases import create_database, drop_database


def _count_and_insert(fail: bool) -> Steps[int]:
    """Insert a row inside a transaction (failing after it when ``fail``), then count."""
    yield Query("CREATE TABLE IF NOT EXISTS steps_probe (n int)")
    yield from transaction(_insert(fail))
    [row] = yield Query("SELECT count(*) AS n FROM steps_probe")
    return int(row["n"])


def _insert(fail: bool) -> Steps[None]:
    yield Query("INSERT INTO steps_probe VALUES (%s)", (1,))
    if fail:
        raise ValueError("refused after the insert")


async def test_the_same_steps_on_both_kinds_of_connection(empty_database_url):
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        assert run_sync(conn, _count_and_insert(False)) == 1
        with pytest.raises(ValueError, match="refused"):
            run_sync(conn, _count_and_insert(True))
        assert run_sync(conn, _count_and_insert(False)) == 2  # the refused insert rolled back
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as aconn:
        assert await run_async(aconn, _count_and_insert(False)) == 3
        with pytest.raises(ValueError, match="refused"):
            await run_async(aconn, _count_and_insert(True))
        assert await run_async(aconn, _count_and_insert(False)) == 4


@pytest.mark.parametrize("engine_name", ["canonical", "queue_storage"])
async def test_migrating_through_either_driver_gives_the_same_layout(admin_url, engine_name):
    names = [create_database(admin_url), create_database(admin_url)]
    try:
        urls = [make_conninfo(admin_url, dbname=n) for n in names]
        with psycopg.connect(urls[0], autocommit=True) as conn:
            applied_sync = storage.migrate_sync(conn, engine_name)
            layout_sync = describe_layout_sync(conn)
            assert storage.migrate_sync(conn, engine_name) == []  # idempotent
        async with await psycopg.AsyncConnection.connect(urls[1], autocommit=True) as aconn:
            applied_async = await storage.migrate(aconn, engine_name)
            layout_async = await describe_layout(aconn)
        assert applied_sync == applied_async and applied_sync
        assert layout_sync == layout_async
        assert layout_sync.engine == engine_name and not layout_sync.behind
    finally:
        for name in names:
            drop_database(admin_url, name)


def _catching_a_failed_step() -> Steps[str]:
    """A step that fails is raised at its ``yield``; the steps catch it and go on."""
    yield Query("CREATE TABLE IF NOT EXISTS steps_once (n int PRIMARY KEY)")
    yield Query("INSERT INTO steps_once VALUES (1) ON CONFLICT DO NOTHING")
    try:
        yield from transaction(_insert_once())
    except psycopg.errors.UniqueViolation:
        rows = yield Query("SELECT count(*) AS n FROM steps_once")
        return f"caught, {rows[0]['n']} row"
    return "not raised"


def _insert_once() -> Steps[None]:
    yield Query("INSERT INTO steps_once VALUES (1)")


async def test_a_failed_step_is_raised_in_the_steps(empty_database_url):
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        assert run_sync(conn, _catching_a_failed_step()) == "caught, 1 row"
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as aconn:
        assert await run_async(aconn, _catching_a_failed_step()) == "caught, 1 row"
