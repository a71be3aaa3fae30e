"""awa.bridge on the connections an application already has: SQLAlchemy (sync and async
Session/Connection, psycopg or asyncpg driver), asyncpg and Django, each inside the caller's
transaction and through the database's own engine (issue 15, item 7)."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

import awa
from awa.bridge import insert_job, insert_job_sync

sqlalchemy = pytest.importorskip("sqlalchemy")


def _sa_url(database_url: str, driver: str = "psycopg") -> str:
    p = conninfo_to_dict(database_url)
    return (f"postgresql+{driver}://{p.get('user', 'postgres')}@{p.get('host', '127.0.0.1')}:"
            f"{p.get('port', 5432)}/{p['dbname']}")


def _count(db: Any) -> int:
    return db.execute("SELECT count(*) AS n FROM awa.jobs").fetchone()["n"]


def test_sqlalchemy_session_and_connection(database_url, db):
    from sqlalchemy.orm import Session
    engine = sqlalchemy.create_engine(_sa_url(database_url))
    try:
        with Session(engine) as session:
            row = insert_job_sync(session, {"n": 1}, kind="sa")
            assert _count(db) == 0  # not committed yet: the session's own transaction
            session.commit()
        assert row["state"] == "available" and _count(db) == 1
        with engine.connect() as conn:
            insert_job_sync(conn, {"n": 2}, kind="sa")
            conn.rollback()
        assert _count(db) == 1
    finally:
        engine.dispose()


async def test_sqlalchemy_async_session_and_connection(database_url, db):
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    engine = create_async_engine(_sa_url(database_url))
    try:
        async with AsyncSession(engine) as session:
            await insert_job(session, {"n": 1}, kind="sa_async")
            await session.commit()
        async with engine.connect() as conn:
            await insert_job(conn, {"n": 2}, kind="sa_async")
            await conn.rollback()
        assert _count(db) == 1
    finally:
        await engine.dispose()


def test_django_connection(database_url, db):
    django = pytest.importorskip("django")
    from django.conf import settings
    p = conninfo_to_dict(database_url)
    if not settings.configured:
        settings.configure(DATABASES={"default": {
            "ENGINE": "django.db.backends.postgresql", "NAME": p["dbname"],
            "USER": p.get("user", "postgres"), "HOST": p.get("host", "127.0.0.1"),
            "PORT": str(p.get("port", 5432))}})
        django.setup()
    from django.db import connection, transaction
    connection.settings_dict["NAME"] = p["dbname"]
    connection.close()
    try:
        with transaction.atomic():
            row = insert_job_sync(connection, {"n": 1}, kind="dj")
        assert row["kind"] == "dj" and _count(db) == 1
        with pytest.raises(RuntimeError), transaction.atomic():
            insert_job_sync(connection, {"n": 2}, kind="dj")
            raise RuntimeError("roll back")
        assert _count(db) == 1
    finally:
        connection.close()


def test_unsupported_object_is_a_type_error():
    with pytest.raises(TypeError):
        insert_job_sync(object(), {"n": 1}, kind="x")
    with pytest.raises(awa.ValidationError):
        insert_job_sync(42, {"n": 1}, kind="x")


def _bridge_then_claim(database_url: str) -> tuple[str, list[int]]:
    """insert_job_sync on a plain psycopg connection, then a claim through the database's
    own engine: the row must be where that engine looks (queue storage or canonical)."""
    import asyncio

    import psycopg

    from awa.storage import open_engine

    with psycopg.connect(database_url) as conn:
        row = insert_job_sync(conn, {"n": 1}, kind="bridged", queue="bridge_q")

    async def claim() -> tuple[str, list[int]]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as a:
            engine = await open_engine(a)
            return engine.name, [j.id for j in await engine.claim_batch(a, "bridge_q", 5, 60_000)]

    name, claimed = asyncio.run(claim())
    assert claimed == [row["id"]]
    return name, claimed


@pytest.mark.engine("queue_storage")
def test_sync_bridge_writes_through_queue_storage(database_url):
    assert _bridge_then_claim(database_url)[0] == "queue_storage"


@pytest.mark.engine("canonical")
def test_sync_bridge_writes_through_canonical(database_url):
    assert _bridge_then_claim(database_url)[0] == "canonical"


async def _asyncpg_round_trip(database_url: str, db: Any) -> str:
    """insert_job on an asyncpg connection: inside the caller's transaction, through the
    database's own engine (a claim finds it), with the client's semantics."""
    asyncpg = pytest.importorskip("asyncpg")
    import psycopg

    from awa.storage import open_engine

    conn = await asyncpg.connect(_sa_url(database_url, "asyncpg").replace("+asyncpg", ""))
    try:
        async with conn.transaction():
            row = await insert_job(conn, {"n": 1}, kind="apg", queue="apg_q", tags=["t"])
            assert _count(db) == 0  # the caller's transaction is not committed yet
        assert row["state"] == "available" and row["args"] == {"n": 1} and row["tags"] == ["t"]
        assert _count(db) == 1
        tx = conn.transaction()
        await tx.start()
        await insert_job(conn, {"n": 2}, kind="apg", queue="apg_q")
        await tx.rollback()
        assert _count(db) == 1
        past = await insert_job(conn, {"n": 3}, kind="apg", queue="later_q",
                                run_at="2020-01-01T00:00:00+00:00")
        assert past["state"] == "scheduled"  # any explicit run_at, as awa-pg 0.6.9
        await insert_job(conn, {"n": 4}, kind="apg", queue="apg_q", unique_opts={})
        with pytest.raises(awa.UniqueConflict):
            await insert_job(conn, {"n": 4}, kind="apg", queue="apg_q", unique_opts={})
    finally:
        await conn.close()
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as a:
        engine = await open_engine(a)
        claimed = await engine.claim_batch(a, "apg_q", 5, 60_000)
    assert sorted(j.args["n"] for j in claimed) == [1, 4]
    return engine.name


@pytest.mark.engine("queue_storage")
async def test_asyncpg_connection_on_queue_storage(database_url, db):
    assert await _asyncpg_round_trip(database_url, db) == "queue_storage"


@pytest.mark.engine("canonical")
async def test_asyncpg_connection_on_canonical(database_url, db):
    assert await _asyncpg_round_trip(database_url, db) == "canonical"


async def test_sqlalchemy_async_on_asyncpg(database_url, db):
    pytest.importorskip("asyncpg")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    engine = create_async_engine(_sa_url(database_url, "asyncpg"))
    try:
        async with AsyncSession(engine) as session:
            row = await insert_job(session, {"n": 1}, kind="sa_apg")
            assert _count(db) == 0
            await session.commit()
        assert row["kind"] == "sa_apg" and _count(db) == 1
        async with engine.connect() as conn:
            await insert_job(conn, {"n": 2}, kind="sa_apg")
            await conn.rollback()
        assert _count(db) == 1
    finally:
        await engine.dispose()


def test_sync_bridge_refuses_asyncpg(database_url):
    asyncpg = pytest.importorskip("asyncpg")
    import asyncio

    async def go() -> None:
        conn = await asyncpg.connect(_sa_url(database_url, "asyncpg").replace("+asyncpg", ""))
        try:
            with pytest.raises(TypeError):
                insert_job_sync(conn, {"n": 1}, kind="x")
        finally:
            await conn.close()
    asyncio.run(go())
