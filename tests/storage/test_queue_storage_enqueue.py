"""Queue storage only: every enqueue of a batch is one round trip (issue 48).

Round trips are counted on the client, from libpq's trace of the connection's protocol
messages: one round trip is the client's messages followed by the server's answer (a
COPY is two: the server answers the COPY statement before the client sends the rows).
The batches go through the client's own paths (``insert_many``, ``insert_many_copy``,
``enqueue_many_copy``) on its own pooled connection.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import awa
from awa.storage.common.enqueue import InsertOptions, build_batch

QS = pytest.mark.parametrize("engine_name", ["queue_storage"])
UNIQUE = {"by_args": True}


def round_trips(trace: str) -> int:
    """How many times the client waited for the server: its messages (F) answered (B)."""
    turns, last = 0, ""
    for line in trace.splitlines():
        side = line[:1]
        if side == "B" and last == "F":
            turns += 1
        if side in ("F", "B"):
            last = side
    return turns


async def traced(pgconn: Any, call: Callable[[], Awaitable[Any]]) -> int:
    """The round trips ``call`` made on ``pgconn``."""
    with tempfile.TemporaryFile("w+") as out:
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            await call()
        finally:
            pgconn.untrace()
        out.seek(0)
        return round_trips(out.read())


@QS
async def test_every_batch_path_is_one_round_trip(engine_url):
    async with awa.AsyncClient(engine_url, max_connections=1) as client:
        pool = await client._get_pool()
        async with pool.connection() as conn:  # the pool's one connection, used by every call
            pgconn = conn.pgconn
        paths: dict[str, Callable[[list[Any]], Awaitable[Any]]] = {
            "insert_many": lambda jobs: client.insert_many(jobs, kind="k"),
            "insert_many_copy": lambda jobs: client.insert_many_copy(jobs, kind="k"),
            "enqueue_many_copy": lambda jobs: client.enqueue_many_copy(jobs, kind="k"),
            "enqueue_many_copy, unique": lambda jobs: client.enqueue_many_copy(
                jobs, kind="u", unique_opts=UNIQUE),
            "insert_many_copy, run_at": lambda jobs: client.insert_many_copy(
                jobs, kind="k", run_at=timedelta(hours=1)),
            "enqueue_many_copy, two queues": lambda jobs: client.enqueue_many_copy(
                jobs, kind="k", opts=[{"queue": f"q{i % 2}"} for i in range(len(jobs))]),
        }
        counts = {}
        for name, path in paths.items():
            for size in (1, 100, 1000):
                # Enough calls to pass psycopg's prepare threshold (a prepare is a round trip
                # of its own, once per connection and statement); the last one is counted.
                for call in range(7):
                    jobs = [{"n": i, "size": size, "call": call} for i in range(size)]
                    counts[name, size] = await traced(pgconn, lambda p=path, j=jobs: p(j))
        assert counts == dict.fromkeys(counts, 1), counts


@QS
async def test_a_copy_in_the_callers_transaction_is_atomic_with_it(engine, engine_url, aconn):
    """A COPY batch inside the caller's transaction: invisible and its lane held until the
    commit (another producer of the lane waits), gone with a rollback, and the queue's
    dispatchers are woken at the commit only."""
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as listener:
        await listener.execute('LISTEN "awa:copy"')
        async with await psycopg.AsyncConnection.connect(engine_url) as conn:
            for returning in (False, True):
                batch = build_batch([{"n": i} for i in range(3)],
                                    InsertOptions(kind="k", queue="copy"))
                assert (await engine.copy_batch(conn, batch, returning)).inserted == 3
                await conn.rollback()
            assert (await (await aconn.execute("SELECT count(*) AS n FROM awa.jobs")).fetchone()
                    )["n"] == 0
            batch = build_batch([{"n": i} for i in range(3)], InsertOptions(kind="k", queue="copy"))
            assert (await engine.copy_batch(conn, batch, returning=False)).inserted == 3
            async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as other:
                await other.execute("SET lock_timeout = '200ms'")
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    await engine.copy_batch(other, build_batch([{"n": 9}], InsertOptions(
                        kind="k", queue="copy")), returning=False)
            notifies = listener.notifies(timeout=0.3)
            assert [n async for n in notifies] == []  # nothing before the commit
            await conn.commit()
        woken = listener.notifies(timeout=5, stop_after=1)
        assert [n.channel async for n in woken] == ["awa:copy"]
    rows = await (await aconn.execute(
        "SELECT job_id, ready_id, lane_seq, (args->>'n')::int AS n FROM awa.ready_entries "
        "ORDER BY lane_seq")).fetchall()
    # One lane, numbered in input order from 0: ids and ready ids follow the positions.
    assert [(r["lane_seq"], r["n"]) for r in rows] == [(0, 0), (1, 1), (2, 2)]
    assert [r["job_id"] for r in rows] == sorted(r["job_id"] for r in rows)
    assert [r["ready_id"] for r in rows] == sorted(r["ready_id"] for r in rows)
    claimed = await engine.claim_batch(aconn, "copy", 10, 60_000)
    assert [j.args for j in claimed] == [{"n": 0}, {"n": 1}, {"n": 2}]


@QS
async def test_concurrent_copies_into_one_lane_keep_it_dense(engine, engine_url, aconn):
    """Producers racing on one lane, every one autocommit: each batch is one statement that
    holds the lane for itself only, and the positions stay dense and unique."""
    async def produce(p: int) -> None:
        async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as conn:
            for b in range(5):
                batch = build_batch([{"p": p, "b": b, "n": i} for i in range(20)],
                                    InsertOptions(kind="k", queue="race"))
                assert (await engine.copy_batch(conn, batch, returning=False)).inserted == 20

    await asyncio.gather(*(produce(p) for p in range(4)))
    [lane] = await (await aconn.execute(
        "SELECT count(*) AS n, count(DISTINCT lane_seq) AS d, min(lane_seq) AS lo, "
        "max(lane_seq) AS hi FROM awa.ready_entries WHERE queue = 'race'")).fetchall()
    assert (lane["n"], lane["d"], lane["lo"], lane["hi"]) == (400, 400, 0, 399)
    claimed = [j.id for j in await engine.claim_batch(aconn, "race", 1000, 60_000)]
    assert len(claimed) == len(set(claimed)) == 400
