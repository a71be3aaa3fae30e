"""Transactional enqueue: the client's transaction and the caller's own connection."""

from __future__ import annotations

import psycopg
import pytest

import awa
from awa.bridge import insert_job, insert_job_sync

from .conftest import SendEmail, count_jobs


async def test_client_transaction_rollback_leaves_nothing(client, db, listen):
    listener = listen("awa:tx")
    with pytest.raises(RuntimeError):
        async with await client.transaction() as tx:
            await tx.insert(SendEmail("x"), queue="tx")
            await tx.insert_many([SendEmail("y"), SendEmail("z")], queue="tx")
            await tx.execute("INSERT INTO awa.queue_meta (queue) VALUES ($1)", "tx")
            raise RuntimeError("the business write failed")
    assert count_jobs(db) == 0
    assert db.execute("SELECT count(*) AS n FROM awa.queue_meta").fetchone()["n"] == 0
    assert listener.received(timeout=0.3) == []


async def test_client_transaction_commit_is_visible_and_wakes_listener(client, db, listen):
    listener = listen("awa:tx")
    async with await client.transaction() as tx:
        job = await tx.insert(SendEmail("x"), queue="tx")
        # not visible to others before commit
        assert count_jobs(db) == 0
        seen = await tx.fetch_one("SELECT count(*) AS n FROM awa.jobs WHERE id = $1", job.id)
        assert seen == {"n": 1}
        assert await tx.fetch_optional("SELECT id FROM awa.jobs WHERE id = %s", -1) is None
        assert len(await tx.fetch_all("SELECT id FROM awa.jobs")) == 1
    assert count_jobs(db, queue="tx") == 1
    assert listener.received() == [("awa:tx", "")]


async def test_explicit_commit_and_rollback(client, db):
    tx = await client.transaction()
    await tx.insert(SendEmail("kept"))
    await tx.commit()
    tx = await client.transaction()
    await tx.insert(SendEmail("dropped"))
    await tx.rollback()
    with pytest.raises(awa.AwaError, match="already been committed"):
        await tx.insert(SendEmail("late"))
    assert count_jobs(db) == 1


async def test_unique_conflict_inside_a_transaction_keeps_it_usable(client, db):
    await client.insert(SendEmail("u"), unique_opts={})
    async with await client.transaction() as tx:
        with pytest.raises(awa.UniqueConflict):
            await tx.insert(SendEmail("u"), unique_opts={})
        await tx.insert(SendEmail("after"))
    assert count_jobs(db) == 2


def test_sync_client_transaction(database_url, db):
    with awa.Client(database_url) as client:
        with client.transaction() as tx:
            tx.insert(SendEmail("sync"))
        with pytest.raises(ZeroDivisionError):
            with client.transaction() as tx:
                tx.insert(SendEmail("gone"))
                raise ZeroDivisionError
    assert count_jobs(db) == 1


async def test_bridge_on_callers_async_connection(database_url, db, listen):
    listener = listen("awa:bridge")
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await conn.execute("CREATE TABLE orders (id int)")
        await conn.commit()
        await conn.execute("INSERT INTO orders VALUES (1)")
        row = await insert_job(conn, SendEmail("order"), queue="bridge", tags=["order"])
        assert row["kind"] == "send_email" and row["state"] == "available"
        await conn.rollback()
        assert count_jobs(db) == 0
        await conn.execute("INSERT INTO orders VALUES (2)")
        row = await insert_job(conn, SendEmail("order"), queue="bridge")
        assert count_jobs(db) == 0  # not yet committed
        await conn.commit()
    assert count_jobs(db, queue="bridge") == 1
    assert listener.received() == [("awa:bridge", "")]


def test_bridge_on_callers_sync_connection(database_url, db):
    with psycopg.connect(database_url) as conn:
        with conn.transaction():
            row = insert_job_sync(conn, {"n": 1}, kind="raw", run_at="2099-01-01T00:00:00Z")
            assert row["state"] == "scheduled"
        with pytest.raises(RuntimeError):
            with conn.transaction():
                insert_job_sync(conn, {"n": 2}, kind="raw")
                raise RuntimeError("rolled back")
    assert count_jobs(db) == 1
    with psycopg.connect(database_url) as conn:
        with pytest.raises(awa.ValidationError, match="priority"):
            insert_job_sync(conn, {"n": 3}, kind="raw", priority=9)
        with pytest.raises(awa.ValidationError, match="psycopg.AsyncConnection"):
            import asyncio
            asyncio.run(insert_job(conn, {"n": 3}, kind="raw"))


def test_bridge_unique_conflict_names_holder(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        first = insert_job_sync(conn, {"n": 1}, kind="raw", unique_opts={})
        with pytest.raises(awa.UniqueConflict, match=f"job {first['id']}"):
            insert_job_sync(conn, {"n": 1}, kind="raw", unique_opts={})
