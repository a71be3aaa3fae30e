"""Durable batch operations (awa.batch_operations) on both engines: preview, submit, the chunked
runner, cancellation, refusals, and a chunk racing a claim."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

import awa
from awa.batch_operations import FILTER_KEYS, run_batch_operations
from awa.storage.engine import ChunkOutcome
from support.arrange import insert_job
from support.rows import job_row

ENGINES = [pytest.param("queue_storage", marks=pytest.mark.engine("queue_storage"),
                        id="queue_storage"),
           pytest.param("canonical", marks=pytest.mark.engine("canonical"), id="canonical")]


async def run_until_idle(client: awa.AsyncClient, **kw) -> dict[str, float]:
    pool, engine = await client._get_pool(), await client._get_engine()
    total: dict[str, float] = {"processed": 0, "skipped": 0, "errored": 0, "finished": 0}
    for _ in range(1_000):
        done = await run_batch_operations(pool, engine, runner=uuid.uuid4(), **kw)
        for k in total:
            total[k] += done[k]
        if done["steps"] == 0:
            return total
    raise AssertionError("the runner never went idle")


@pytest.mark.parametrize("engine_name", ENGINES)
async def test_move_queue_previews_then_moves_exactly_the_matching_jobs(client, db, engine_name):
    moved = [insert_job(db, "available", kind="k", queue="src", priority=2) for _ in range(230)]
    moved += [insert_job(db, "scheduled", kind="k", queue="src") for _ in range(20)]
    other_kind = insert_job(db, "available", kind="other", queue="src")
    running = insert_job(db, "running", kind="k", queue="src")
    failed = insert_job(db, "failed", kind="k", queue="src")

    count, sample = await client.preview_batch_operation(
        "move_queue", {"queue": "src", "kind": "k"}, {"queue": "dst", "priority": 1})
    assert count == 250
    assert [j.id for j in sample] == sorted(moved)[:10]

    op = await client.submit_batch_operation("move_queue", {"queue": "src", "kind": "k"},
                                             {"queue": "dst", "priority": 1},
                                             submitted_by="tester")
    assert op.state == "pending" and op.spec == {"op_kind": "move_queue",
                                                 "queue": "dst", "priority": 1}
    assert set(op.filter) == set(FILTER_KEYS)
    done = await run_until_idle(client, chunk=64, scan_page=100)
    assert done["processed"] == 250 and done["finished"] == 1
    final = await client.get_batch_operation(op.id)
    assert final.state == "completed" and final.total_matched == 250
    assert (final.processed, final.skipped, final.errored) == (250, 0, 0)
    assert final.finalized_at is not None and final.retention_until is not None
    for job_id in moved:
        row = job_row(db, job_id)
        assert row["queue"] == "dst" and row["priority"] == 1
        assert row["metadata"]["_awa_original_queue"] == "src"
        assert row["metadata"]["_awa_original_priority"] == 2
    for job_id in (other_kind, running, failed):
        assert job_row(db, job_id)["queue"] == "src"
    # A second run finds nothing: the change is not applied twice.
    assert (await run_until_idle(client))["processed"] == 0
    assert_each_job_once(db)
    # Workers find the moved jobs in their new queue only.
    pool, engine = await client._get_pool(), await client._get_engine()
    async with pool.connection() as conn:
        from_dst = await engine.claim_batch(conn, "dst", 1_000, 60_000)
        from_src = await engine.claim_batch(conn, "src", 1_000, 60_000)
    assert sorted(j.id for j in from_dst) == sorted(moved[:230])
    assert [j.id for j in from_src] == [other_kind]


def assert_each_job_once(db) -> None:
    """No job shows up twice in awa.jobs (on queue storage: live in one lane at most)."""
    twice = db.execute("SELECT id, count(*) AS n FROM awa.jobs GROUP BY id "
                       "HAVING count(*) > 1").fetchall()
    assert twice == []


@pytest.mark.parametrize("engine_name", ENGINES)
async def test_a_chunk_waits_for_a_claim_in_flight_and_skips_what_it_took(client, db,
                                                                        database_url,
                                                                        engine_name):
    jobs = [insert_job(db, "available", kind="k", queue="src", priority=3) for _ in range(40)]
    op = await client.submit_batch_operation("move_queue", {"queue": "src"}, {"queue": "dst"})
    pool, engine = await client._get_pool(), await client._get_engine()
    while (await client.get_batch_operation(op.id)).state != "running":
        await run_batch_operations(pool, engine, runner=uuid.uuid4(), budget_s=0.0)

    async def one_chunk() -> ChunkOutcome | None:
        async with pool.connection() as conn, conn.transaction():
            active = await engine.batch_next_active(conn)
            assert active is not None
            return await engine.batch_apply_chunk(conn, active, 100)

    async with await psycopg.AsyncConnection.connect(database_url) as claimer:
        async with claimer.transaction():
            claimed = await engine.claim_batch(claimer, "src", 5, 60_000)
            assert len(claimed) == 5
            chunk = asyncio.create_task(one_chunk())
            await asyncio.sleep(0.5)
            # The claim's locks (its lane on queue storage, its rows on canonical) hold
            # the chunk back until the claim commits.
            assert not chunk.done()
        assert await chunk == ChunkOutcome(35, 5, 0)
    # The counters agree with the items (queue storage records both before the lock and
    # corrects the five the claim took, in the move's own statement).
    counted = await client.get_batch_operation(op.id)
    assert (counted.processed, counted.skipped) == (35, 5)
    taken = {j.id for j in claimed}
    items = db.execute("SELECT job_id, state FROM awa.batch_operation_items "
                       "WHERE operation_id = %s", (op.id,)).fetchall()
    assert {r["job_id"] for r in items if r["state"] == "skipped"} == taken
    assert sum(r["state"] == "processed" for r in items) == 35
    for job_id in jobs:
        row = job_row(db, job_id)
        if job_id in taken:
            assert (row["queue"], row["state"]) == ("src", "running")
        else:
            assert (row["queue"], row["state"]) == ("dst", "available")
    assert_each_job_once(db)
    async with pool.connection() as conn:
        assert await engine.claim_batch(conn, "src", 100, 60_000) == []
        again = await engine.claim_batch(conn, "dst", 100, 60_000)
    assert sorted(j.id for j in again) == sorted(set(jobs) - taken)


@pytest.mark.parametrize("engine_name", ENGINES)
async def test_set_priority_skips_jobs_already_at_the_target(client, db, engine_name):
    low = [insert_job(db, "available", kind="k", queue="q", priority=3) for _ in range(5)]
    top = [insert_job(db, "available", kind="k", queue="q", priority=1) for _ in range(3)]
    op = await client.submit_batch_operation("set_priority", {"queue": "q"}, {"priority": 1})
    await run_until_idle(client)
    final = await client.get_batch_operation(op.id)
    assert (final.processed, final.skipped) == (5, 3)
    assert all(job_row(db, j)["priority"] == 1 for j in low + top)


@pytest.mark.parametrize("engine_name", ENGINES)
async def test_cancelling_stops_an_operation_and_skips_what_is_left(client, db, engine_name):
    for _ in range(40):
        insert_job(db, "available", kind="k", queue="q", priority=3)
    op = await client.submit_batch_operation("set_priority", {"queue": "q"}, {"priority": 4})
    pool, engine = await client._get_pool(), await client._get_engine()
    # Scan it and apply one chunk of 10, then cancel.
    for _ in range(10):  # one step each: pending -> scanning -> ... -> running
        if (await client.get_batch_operation(op.id)).state == "running":
            break
        await run_batch_operations(pool, engine, runner=uuid.uuid4(), chunk=10,
                                   budget_s=0.0)
    assert (await client.get_batch_operation(op.id)).state == "running"
    async with pool.connection() as conn, conn.transaction():
        active = await engine.batch_next_active(conn)
        assert active is not None
        assert await engine.batch_apply_chunk(conn, active, 10) == ChunkOutcome(10, 0, 0)
    cancelling = await client.cancel_batch_operation(op.id)
    assert cancelling.state == "cancelling"
    await run_until_idle(client)
    final = await client.get_batch_operation(op.id)
    assert final.state == "cancelled"
    assert (final.processed, final.skipped) == (10, 30)
    with pytest.raises(awa.ValidationError, match="cannot be cancelled"):
        await client.cancel_batch_operation(op.id)


@pytest.mark.parametrize("engine_name", ENGINES)
async def test_refusals_name_the_fix(client, engine_name):
    with pytest.raises(awa.ValidationError, match="without a filter"):
        await client.submit_batch_operation("set_priority", {}, {"priority": 1})
    op = await client.submit_batch_operation("set_priority", {}, {"priority": 1},
                                             allow_all=True)
    assert op.state == "pending"
    with pytest.raises(awa.ValidationError, match="only supports available or scheduled"):
        await client.preview_batch_operation("move_queue", {"state": "running"},
                                             {"queue": "x"})
    with pytest.raises(awa.ValidationError, match="priority must be an integer from 1 to 4"):
        await client.submit_batch_operation("set_priority", {"queue": "q"}, {"priority": 9})
    with pytest.raises(awa.ValidationError, match="queue name must be a non-empty string"):
        await client.submit_batch_operation("move_queue", {"queue": "q"}, {"queue": ""})
    # The one queue-name rule: a target no worker could LISTEN on is refused (issue 50).
    with pytest.raises(awa.ValidationError, match="at most 59 fit the LISTEN channel"):
        await client.submit_batch_operation("move_queue", {"queue": "q"}, {"queue": "q" * 100})
    with pytest.raises(awa.ValidationError, match="at most 59 fit the LISTEN channel"):
        await client.preview_batch_operation("set_priority", {"queue": "q" * 60},
                                             {"priority": 1})
    with pytest.raises(awa.ValidationError, match="unknown op_kind"):
        await client.submit_batch_operation("delete", {"queue": "q"}, {})
    with pytest.raises(awa.ValidationError, match="batch operation not found"):
        await client.get_batch_operation(uuid.uuid4())


@pytest.mark.parametrize("engine_name", ENGINES)
async def test_the_runner_rests_pace_times_each_step(client, db, engine_name):
    """Each step is followed by a rest of ``pace`` times its own duration (its lanes free
    for claims meanwhile); pace 0 runs the steps back to back."""
    for _ in range(120):
        insert_job(db, "available", kind="k", queue="src", priority=2)
    pool, engine = await client._get_pool(), await client._get_engine()
    for pace in (3.0, 0.0):
        await client.submit_batch_operation("set_priority", {"queue": "src"},
                                            {"priority": 1 if pace else 2})
        busy = rested = steps = 0.0
        while True:
            done = await run_batch_operations(pool, engine, runner=uuid.uuid4(),
                                              chunk=20, budget_s=0.0, pace=pace)
            if done["steps"] == 0:
                break
            busy, rested, steps = busy + done["busy_s"], rested + done["rested_s"], steps + 1
        assert steps >= 6  # the scan, six chunks of 20, the finish
        if pace:
            # asyncio may wake a timer up to its clock resolution early: 2 ms a step, at most
            assert rested >= pace * busy - 0.002 * steps
        else:
            assert rested < busy


@pytest.mark.engine("queue_storage")
async def test_a_scanned_operation_leaves_the_ready_entries_analysed(client, db):
    """Queue storage: the ready partitions have statistics once the scan ends, so each
    chunk probes its ids instead of walking the whole locked lane (a fresh partition's
    default estimates pick the lane's index)."""
    for _ in range(300):
        insert_job(db, "available", kind="k", queue="src", priority=2)
    stats = ("SELECT count(*) AS n FROM pg_stats WHERE schemaname = 'awa' "
             "AND tablename LIKE 'ready_entries%%' AND attname = 'job_id'")
    before = db.execute(stats).fetchone()["n"]
    op = await client.submit_batch_operation("set_priority", {"queue": "src"}, {"priority": 1})
    pool, engine = await client._get_pool(), await client._get_engine()
    while (await client.get_batch_operation(op.id)).state != "running":
        await run_batch_operations(pool, engine, runner=uuid.uuid4(), budget_s=0.0)
    assert before == 0
    assert db.execute(stats).fetchone()["n"] > 0


@pytest.mark.engine("queue_storage")
async def test_a_moved_lane_s_claim_head_follows_the_move(client, db):
    """Queue storage: each chunk settles its source lanes' claim heads past the entries it
    moved, so a queue nobody claimed from during the move does not leave every later claim
    walking the moved entries (each one a tombstone probe, under the queue's lane locks)."""
    moved = [insert_job(db, "available", kind="k", queue="src", priority=4) for _ in range(300)]
    left = insert_job(db, "available", kind="other", queue="src", priority=4)
    await client.submit_batch_operation("set_priority", {"queue": "src", "kind": "k"},
                                        {"priority": 3})
    await run_until_idle(client, chunk=50, pace=0)
    heads = {r["priority"]: r["claim_seq"] for r in db.execute(
        "SELECT priority, claim_seq FROM awa.queue_claim_heads WHERE queue = 'src'")}
    lane_seq = db.execute("SELECT lane_seq FROM awa.ready_entries WHERE job_id = %s",
                          (left,)).fetchone()["lane_seq"]
    assert heads[4] == lane_seq  # the first live entry of the lane: the one left behind
    pool, engine = await client._get_pool(), await client._get_engine()
    async with pool.connection() as conn:
        claimed = await engine.claim_batch(conn, "src", 1_000, 60_000)
    assert sorted(j.id for j in claimed) == sorted([*moved, left])
