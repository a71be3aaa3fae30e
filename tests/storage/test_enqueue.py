"""Conformance: the enqueue group (insert batch, COPY batch, unique-holder lookup).

Batches come from the shared builder (``build_batch``); what was written is
observed through the ``awa.jobs`` view, so every engine runs these unchanged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import awa
from awa.job import JobState
from awa.storage.common.enqueue import InsertOptions, build_batch

UNIQUE = {"by_args": True}


async def jobs(aconn: psycopg.AsyncConnection[Any], **where: Any) -> list[dict[str, Any]]:
    sql = "SELECT id, kind, queue, args, state::text AS state, priority FROM awa.jobs"
    if where:
        sql += " WHERE " + " AND ".join(f"{k} = %({k})s" for k in where)
    cur = await aconn.execute(sql + " ORDER BY id", where)
    return await cur.fetchall()


async def test_insert_batch_returns_the_jobs_in_input_order(engine, aconn):
    args = [{"n": i} for i in range(3)]
    batch = build_batch(args, InsertOptions(kind="k", queue="q", priority=3, tags=["a"],
                                            metadata={"m": 1}))
    outcome = await engine.insert_batch(aconn, batch)
    assert (outcome.inserted, outcome.skipped) == (3, 0)
    assert [j.args for j in outcome.jobs] == args
    assert all(j.args is a for j, a in zip(outcome.jobs, args))  # the caller's own objects
    assert {(j.state, j.kind, j.queue, j.priority) for j in outcome.jobs} == {
        (JobState.Available, "k", "q", 3)}
    assert outcome.jobs[0].tags == ["a"] and outcome.jobs[0].metadata == {"m": 1}
    assert all(j.created_at is not None and j.run_at is not None for j in outcome.jobs)
    rows = await jobs(aconn)
    assert [r["id"] for r in rows] == [j.id for j in outcome.jobs]
    assert [r["args"] for r in rows] == args


async def test_insert_batch_without_returning_counts(engine, aconn):
    batch = build_batch([{"n": 1}, {"n": 2}], InsertOptions(kind="k"))
    outcome = await engine.insert_batch(aconn, batch, returning=False)
    assert (outcome.jobs, outcome.inserted, outcome.skipped) == ([], 2, 0)
    later = build_batch([{"n": 3}], InsertOptions(kind="k", run_at=timedelta(hours=1)))
    outcome = await engine.insert_batch(aconn, later, returning=False)
    assert (outcome.inserted, outcome.skipped) == (1, 0)
    assert [r["state"] for r in await jobs(aconn)] == ["available", "available", "scheduled"]


async def test_an_explicit_run_at_is_scheduled_even_when_past(engine, aconn):
    # awa-pg 0.6.9: any explicit run_at starts scheduled; promotion makes it available.
    batch = build_batch([{"n": 1}, {"n": 2}], InsertOptions(kind="k"),
                        opts=[{"run_at": timedelta(hours=-1)}, None])
    [past, plain] = (await engine.insert_batch(aconn, batch)).jobs
    assert (past.state, plain.state) == (JobState.Scheduled, JobState.Available)
    copied = build_batch([{"n": 3}], InsertOptions(kind="k", run_at=timedelta(seconds=-5)))
    [copy] = (await engine.copy_batch(aconn, copied)).jobs
    assert copy.state is JobState.Scheduled
    assert [r["state"] for r in await jobs(aconn)] == ["scheduled", "available", "scheduled"]
    promoted = await engine.promote_due(aconn, limit=10)
    assert sorted(p.id for p in promoted.promoted) == sorted([past.id, copy.id])
    assert [r["state"] for r in await jobs(aconn)] == ["available"] * 3


async def test_a_future_run_at_is_scheduled(engine, aconn):
    batch = build_batch([{"n": 1}], InsertOptions(kind="k"), opts=[{"run_at": timedelta(hours=1)}])
    [job] = (await engine.insert_batch(aconn, batch)).jobs
    assert job.state is JobState.Scheduled
    assert [r["state"] for r in await jobs(aconn)] == ["scheduled"]


async def test_an_empty_batch_writes_nothing(engine, aconn):
    for write in (engine.insert_batch, engine.copy_batch):
        outcome = await write(aconn, build_batch([], InsertOptions(kind="k")))
        assert (outcome.jobs, outcome.inserted, outcome.skipped) == ([], 0, 0)
    assert await jobs(aconn) == []


@pytest.mark.parametrize("returning", [True, False])
@pytest.mark.parametrize("general", [False, True], ids=["plain", "deferred+unique"])
async def test_copy_batch(engine, aconn, returning, general) -> None:
    args = [{"n": i} for i in range(5)]
    options: dict[str, Any] = {}
    if general:
        options = {"opts": [{"run_at": timedelta(hours=1)}] + [None] * 4}
    batch = build_batch(args, InsertOptions(kind="k", queue="copy"), **options)
    outcome = await engine.copy_batch(aconn, batch, returning)
    assert (outcome.inserted, outcome.skipped) == (5, 0)
    rows = await jobs(aconn)
    assert sorted(r["args"]["n"] for r in rows) == list(range(5))
    assert {r["queue"] for r in rows} == {"copy"}
    expected = ["scheduled"] + ["available"] * 4 if general else ["available"] * 5
    if returning:
        assert [j.args for j in outcome.jobs] == args
        assert [j.state.value for j in outcome.jobs] == expected
        assert [r["id"] for r in rows] == sorted(j.id for j in outcome.jobs)
    else:
        assert outcome.jobs == []
        assert sorted(r["state"] for r in rows) == sorted(expected)


@pytest.mark.parametrize("returning", [True, False])
async def test_copy_batches_in_one_transaction_write_each_row_once(engine, aconn, returning):
    """The client writes a big COPY as several chunks in one transaction."""
    chunks = [build_batch([{"n": i} for i in range(c * 3, c * 3 + 3)],
                          InsertOptions(kind="k", queue="copy"),
                          opts=[{"run_at": timedelta(hours=1)}, None, None]) for c in range(3)]
    async with aconn.transaction():
        outcomes = [await engine.copy_batch(aconn, chunk, returning) for chunk in chunks]
    assert [o.inserted for o in outcomes] == [3, 3, 3]
    assert sorted(r["args"]["n"] for r in await jobs(aconn)) == list(range(9))


@pytest.mark.parametrize("copy", [False, True], ids=["insert", "copy"])
async def test_bulk_insert_skips_unique_duplicates(engine, aconn, copy):
    write = engine.copy_batch if copy else engine.insert_batch
    first = await write(aconn, build_batch([{"n": 1}], InsertOptions(kind="u", unique_opts=UNIQUE)))
    assert first.inserted == 1
    # One already claimed, one twice within the batch, one new.
    batch = build_batch([{"n": 1}, {"n": 2}, {"n": 2}, {"n": 3}],
                        InsertOptions(kind="u", unique_opts=UNIQUE))
    outcome = await write(aconn, batch)
    assert (outcome.inserted, outcome.skipped) == (2, 2)
    assert [j.args for j in outcome.jobs] == [{"n": 2}, {"n": 3}]
    assert sorted(r["args"]["n"] for r in await jobs(aconn, kind="u")) == [1, 2, 3]
    counted = await write(aconn, batch, returning=False)
    assert (counted.inserted, counted.skipped) == (0, 4)


async def test_unique_holder(engine, aconn):
    batch = build_batch([{"n": 1}], InsertOptions(kind="u", unique_opts=UNIQUE))
    key = batch.unique_key[0]
    assert key is not None
    assert await engine.unique_holder(aconn, key) is None
    [job] = (await engine.insert_batch(aconn, batch)).jobs
    holder = await engine.unique_holder(aconn, key)
    assert holder is not None and (holder.job_id, holder.state) == (job.id, JobState.Available)
    # A duplicate single insert is skipped; the caller reports it with the holder.
    again = await engine.insert_batch(aconn, build_batch([{"n": 1}], InsertOptions(kind="u",
                                                         unique_opts=UNIQUE)))
    assert (again.inserted, again.skipped, again.jobs) == (0, 1, [])


async def test_a_single_duplicate_insert_is_a_unique_conflict(engine_url, aconn):
    async with awa.AsyncClient(engine_url) as client:
        job = await client.insert({"n": 1}, kind="u", unique_opts=UNIQUE)
        with pytest.raises(awa.UniqueConflict, match=f"job {job.id} \\(available\\) holds"):
            await client.insert({"n": 1}, kind="u", unique_opts=UNIQUE)
        many = await client.insert_many([{"n": 1}, {"n": 2}], kind="u", unique_opts=UNIQUE)
        assert [j.args for j in many] == [{"n": 2}] and many.skipped == 1
    assert len(await jobs(aconn, kind="u")) == 2


async def test_insert_stays_in_the_callers_transaction(engine, engine_url, aconn):
    async with await psycopg.AsyncConnection.connect(engine_url) as conn:
        async with conn.transaction(force_rollback=True):
            outcome = await engine.insert_batch(
                conn, build_batch([{"n": 1}], InsertOptions(kind="u", unique_opts=UNIQUE)))
            assert outcome.inserted == 1
            assert await jobs(aconn) == []  # not visible before commit
        async with conn.transaction():
            again = await engine.insert_batch(
                conn, build_batch([{"n": 1}], InsertOptions(kind="u", unique_opts=UNIQUE)))
            assert again.inserted == 1  # the rolled-back claim is gone
    assert len(await jobs(aconn)) == 1


def test_sync_twins_on_a_users_connection(engine, engine_url):
    batch = build_batch([{"n": 1}], InsertOptions(kind="u", unique_opts=UNIQUE))
    key = batch.unique_key[0]
    assert key is not None
    with psycopg.connect(engine_url, row_factory=dict_row) as conn:
        with conn.transaction(force_rollback=True):
            [job] = engine.insert_batch_sync(conn, batch).jobs
            holder = engine.unique_holder_sync(conn, key)
            assert holder is not None and holder.job_id == job.id
            assert holder.state is JobState.Available
            again = engine.insert_batch_sync(conn, build_batch([{"n": 1}], InsertOptions(kind="u",
                                                               unique_opts=UNIQUE)))
            assert (again.inserted, again.skipped) == (0, 1)
        assert engine.unique_holder_sync(conn, key) is None
        counted = engine.insert_batch_sync(conn, build_batch([{"n": 2}], InsertOptions(kind="k")),
                                           returning=False)
        assert (counted.inserted, counted.skipped, counted.jobs) == (1, 0, [])
        conn.commit()
        n = conn.execute("SELECT count(*) AS n FROM awa.jobs").fetchone()
        assert n is not None and n["n"] == 1


async def test_a_copy_the_server_refuses_writes_nothing_and_holds_no_lane(engine, aconn,
                                                                          database_url):
    """A plain COPY that fails half-way (the server refuses a row) is rolled back whole:
    the connection is idle again and no lane stays reserved (another producer goes on)."""
    batch = build_batch([{"n": i} for i in range(5)], InsertOptions(kind="k", queue="copy"))
    batch.args[3] = '{"n": '  # not JSON: only the server finds out, mid-COPY
    with pytest.raises(psycopg.errors.DataError):
        await engine.copy_batch(aconn, batch, returning=False)
    assert aconn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await jobs(aconn) == []
    good = build_batch([{"n": 9}], InsertOptions(kind="k", queue="copy"))
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as other:
        await other.execute("SET lock_timeout = '5s'")
        assert (await engine.copy_batch(other, good, returning=False)).inserted == 1
    assert (await engine.copy_batch(aconn, good, returning=False)).inserted == 1
    assert [r["args"]["n"] for r in await jobs(aconn)] == [9, 9]
