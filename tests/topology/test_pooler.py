"""The runtime behind a real PgBouncer in transaction mode (issue 35).

No session state on pooled connections: no server-side prepared statements, no
LISTEN and no session lock through the pooler.  A direct URL carries the session
work; without one the runtime polls, holds its leader lock in an open transaction,
and says so once.  Configurations that cannot be right are refused in one line.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.rows import dict_row

import awa
from awa import config, db
from awa.runtime.leader import (
    SESSION_LOCK,
    TRANSACTION_LOCK,
    LeaderElector,
    leader_application_name,
)
from support.polling import eventually


@dataclass
class Ping:
    n: int


def _leader_lock_holders(database_url: str) -> list[dict]:
    """Who holds the leader's advisory lock now (the key split as pg_locks shows it)."""
    key = config.ADVISORY_LOCK_LEADER
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT a.application_name, a.state FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = %s AND l.objid = %s",
            ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchall()


async def test_pool_detects_the_pooler_and_concurrent_producers_never_prepare(
        pooled_url, database_url):
    direct = await db.open_pool(database_url, config.APP_NAME_WORKER, max_size=1)
    try:
        assert direct.server is not None and not direct.server.pooled
    finally:
        await direct.close()
    # Three producers sharing the pooler's server connections, each repeating the same
    # statements well past psycopg's prepare threshold: the issue's
    # 'prepared statement "_pg3_0" already exists' came from exactly this.
    clients = [awa.AsyncClient(pooled_url, max_connections=2) for _ in range(3)]
    try:
        async def produce(c: awa.AsyncClient, base: int) -> None:
            for i in range(12):
                await c.insert_many([Ping(n=base + i * 10 + j) for j in range(10)])
                await c.insert(Ping(n=-1))

        await asyncio.gather(*(produce(c, k * 1000) for k, c in enumerate(clients)))
        pool = await clients[0]._get_pool()
        assert db.behind_pooler(pool)
        async with pool.connection() as conn:
            assert conn.prepare_threshold is None
    finally:
        for c in clients:
            await c.close()
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0] == 3 * 12 * 11


async def test_runtime_through_the_pooler_polls_leads_in_a_transaction_and_says_so_once(
        pooled_url, database_url, caplog):
    caplog.set_level(logging.WARNING, logger="awa.runtime")
    client = awa.AsyncClient(pooled_url)
    done: set[int] = set()

    @client.task(Ping)
    async def handle(job):  # noqa: ANN001 -- awa hands a Job[Ping]
        done.add(job.args.n)

    try:
        await client.insert_many([Ping(n=i) for i in range(200)])
        await client.start([("default", 8)], poll_interval_ms=50,
                           leader_election_interval_ms=100, snapshot_interval_ms=200)
        rt = client.runtime
        assert rt.behind_pooler and rt.session_url is None
        assert rt.listener is None and rt.cancel_listener is None
        assert rt.leader_lock_scope == TRANSACTION_LOCK
        await eventually(lambda: len(done) == 200, timeout=30, message="200 jobs done")
        await eventually(lambda: rt.health.leader, timeout=10, message="a leader")
        holders = _leader_lock_holders(database_url)
        assert [h["application_name"] for h in holders] == [
            leader_application_name(rt.instance_id)]
        # Between pings the lock's transaction sits open (a ping may be running right now).
        await eventually(lambda: _leader_lock_holders(database_url)[0]["state"]
                         == "idle in transaction", timeout=5, message="the open transaction")
        # The budget, in the snapshot: the pool, no LISTEN connections, the leader.
        with psycopg.connect(database_url, row_factory=dict_row) as conn:
            row = conn.execute("SELECT queues FROM awa.runtime_instances "
                               "WHERE instance_id = %s", (rt.instance_id,)).fetchone()
        assert row["queues"][0]["server_connections"] == {
            "pool": config.MAX_CONNECTIONS, "queue_listener": 0, "cancel_listener": 0,
            "leader": 1, "total": config.MAX_CONNECTIONS + 1}
    finally:
        await client.close()
    notices = [r for r in caplog.records if "poll-only dispatch" in r.getMessage()]
    assert len(notices) == 1
    assert "\n" not in notices[0].getMessage()


async def test_a_direct_url_carries_listen_and_the_session_lock(pooled_url, database_url):
    client = awa.AsyncClient(pooled_url, direct_database_url=database_url)

    @client.task(Ping)
    async def handle(job):  # noqa: ANN001 -- awa hands a Job[Ping]
        return None

    try:
        await client.start([("default", 2)], poll_interval_ms=5_000,
                           leader_election_interval_ms=100)
        rt = client.runtime
        assert rt.behind_pooler and rt.session_url == database_url
        assert rt.leader_lock_scope == SESSION_LOCK
        assert rt.listener is not None and rt.listener.connected.is_set()
        assert rt.connections["queue_listener"] == rt.connections["cancel_listener"] == 1
        await eventually(lambda: rt.health.leader, timeout=10, message="a leader")
        holders = _leader_lock_holders(database_url)
        assert [h["application_name"] for h in holders] == [
            leader_application_name(rt.instance_id)]
        # A session lock: between pings no transaction is held open.
        await eventually(lambda: _leader_lock_holders(database_url)[0]["state"] == "idle",
                         timeout=5, message="an idle lock session")
        # A NOTIFY wakes the dispatcher long before its 5 s poll would.
        await client.insert(Ping(n=1))
        await eventually(lambda: client.runtime is not None and _completed(database_url) == 1,
                         timeout=3, message="the job done through the LISTEN wake-up")
    finally:
        await client.close()


def _completed(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()
        return int(row[0]) if row else 0


@pytest.mark.parametrize("how", ["argument", "environment"])
async def test_a_direct_url_through_the_pooler_is_refused_in_one_line(
        pooled_url, how, monkeypatch):
    if how == "argument":
        client = awa.AsyncClient(pooled_url, direct_database_url=pooled_url)
    else:
        monkeypatch.setenv(db.DIRECT_DATABASE_URL_ENV, pooled_url)
        client = awa.AsyncClient(pooled_url)

    @client.task(Ping)
    async def handle(job):  # noqa: ANN001 -- awa hands a Job[Ping]
        return None

    try:
        with pytest.raises(awa.DatabaseError) as err:
            await client.start([("default", 1)])
    finally:
        await client.close()
    message = str(err.value)
    assert "\n" not in message
    assert "goes through a connection pooler" in message
    assert db.DIRECT_DATABASE_URL_ENV in message and "PostgreSQL itself" in message


async def test_a_direct_url_to_another_database_is_refused(pooled_url, empty_database_url):
    client = awa.AsyncClient(pooled_url, direct_database_url=empty_database_url)

    @client.task(Ping)
    async def handle(job):  # noqa: ANN001 -- awa hands a Job[Ping]
        return None

    try:
        with pytest.raises(awa.DatabaseError, match="both must reach the same one"):
            await client.start([("default", 1)])
    finally:
        await client.close()


async def test_transaction_and_session_leaders_exclude_each_other(pooled_url, database_url):
    pooled = LeaderElector(pooled_url, lock_scope=TRANSACTION_LOCK, ping_interval_ms=100)
    direct = LeaderElector(database_url, lock_scope=SESSION_LOCK, ping_interval_ms=100)
    try:
        assert await pooled.try_acquire()
        assert not await direct.try_acquire()
        assert await pooled.still_leader()
        await pooled.release()
        assert await direct.try_acquire()
        assert not await pooled.try_acquire()
        await direct.release()
        assert await pooled.try_acquire()
    finally:
        await pooled.release()
        await direct.release()


async def test_a_silent_transaction_leader_is_fenced_by_the_server(pooled_url):
    frozen = LeaderElector(pooled_url, lock_scope=TRANSACTION_LOCK, ping_interval_ms=100)
    other = LeaderElector(pooled_url, lock_scope=TRANSACTION_LOCK, ping_interval_ms=100)
    try:
        assert await frozen.try_acquire()
        assert not await other.try_acquire()
        # No ping for longer than the fence: the server ends the idle transaction.
        await asyncio.sleep(frozen.fence_ms / 1000 + 1.0)
        assert await other.try_acquire()
        assert not await frozen.confirmed()
    finally:
        await frozen.release()
        await other.release()


async def test_ops_session_through_the_pooler_leaves_no_session_state(pooled_url):
    from awa_ops.session import OpsSession

    session = await OpsSession.open(pooled_url, read_only=True)
    try:
        assert session.conn.prepare_threshold is None
        for _ in range(12):  # past psycopg's prepare threshold
            row = await session.fetch_one("SELECT count(*) AS n FROM awa.runtime_instances")
            assert row is not None and row["n"] == 0
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            async with session.write() as cur:
                await cur.execute("DELETE FROM awa.runtime_instances")
        # The server connection the read-only console used writes fine for the next client.
        client = awa.AsyncClient(pooled_url, max_connections=1)
        try:
            for n in range(3):
                await client.insert(Ping(n=n))
        finally:
            await client.close()
    finally:
        await session.close()
