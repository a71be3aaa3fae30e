"""Queue storage keeps a completed job's payload once (layout 8): the done entry of a job
completed in its ready entry's slot names the entry instead of repeating its args, and every
reader sees the whole row."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from awa.storage.common.enqueue import InsertOptions, build_batch
from awa.storage.engine import AttemptWrite
from awa.storage.queue_storage import rings

QS = pytest.mark.parametrize("engine_name", ["queue_storage"])

DONE_ROWS = """
SELECT d.id, d.state::text AS state, d.args IS NULL AS compact, d.ready_id
  FROM awa.done_entries d ORDER BY d.id"""
VIEW_ARGS = "SELECT id, state::text AS state, args FROM awa.jobs ORDER BY id"


async def _all(conn: psycopg.AsyncConnection[Any], sql: str) -> list[dict[str, Any]]:
    cur = await conn.execute(sql)
    return list(await cur.fetchall())


async def _claimed(engine: Any, aconn: psycopg.AsyncConnection[Any], n: int,
                   queue: str = "h") -> list[Any]:
    await engine.insert_batch(aconn, build_batch([{"n": i, "pad": "x" * 200} for i in range(n)],
                                                 InsertOptions(kind="k", queue=queue)))
    jobs = await engine.claim_batch(aconn, queue, n, 60_000)
    assert len(jobs) == n
    return jobs


@QS
async def test_a_completion_keeps_the_args_once_and_every_reader_sees_them(engine, aconn):
    """Completed by either statement (the plain one, and the full one a buffered field
    takes), the done entry holds no args of its own; failed and cancelled ones stay
    whole; the view, the job lists and get_job show every row's args."""
    jobs = await _claimed(engine, aconn, 6)
    plain, buffered, failed, cancelled = jobs[:2], jobs[2:4], jobs[4], jobs[5]
    await engine.complete_batch(aconn, [AttemptWrite(j.id, j.run_lease) for j in plain])
    await engine.complete_batch(aconn, [AttemptWrite(j.id, j.run_lease, metadata={"m": 1})
                                        for j in buffered])
    await engine.fail_batch(aconn, [AttemptWrite(failed.id, failed.run_lease,
                                                 error={"error": "boom"})])
    await engine.cancel_batch(aconn, [AttemptWrite(cancelled.id, cancelled.run_lease)])
    done = {r["id"]: r for r in await _all(aconn, DONE_ROWS)}
    for job in plain + buffered:
        assert done[job.id]["state"] == "completed" and done[job.id]["compact"], done[job.id]
        assert done[job.id]["ready_id"] is not None
    for job in (failed, cancelled):
        assert not done[job.id]["compact"] and done[job.id]["ready_id"] is None, done[job.id]
    expected = {j.id: j.args for j in jobs}
    seen = {r["id"]: r["args"] for r in await _all(aconn, VIEW_ARGS)}
    assert seen == expected
    for job in jobs:
        got = await engine.get_job(aconn, job.id)
        assert got is not None and got.args == job.args, job.id
    done_states = {"completed", "failed", "cancelled"}
    listed = await _all(aconn, "SELECT id, args FROM awa.qs_done_rows ORDER BY id")
    assert {r["id"]: r["args"] for r in listed} == expected
    assert {r["state"] for r in await _all(aconn, VIEW_ARGS)} == done_states


@QS
async def test_a_job_whose_entry_is_in_an_older_slot_is_kept_whole(engine, aconn):
    """The queue ring rotated between the claim and the completion: the entry's slot goes
    first, so the done entry keeps its own args."""
    jobs = await _claimed(engine, aconn, 2)
    assert await rings.rotate(aconn, "queue")
    await engine.complete_batch(aconn, [AttemptWrite(j.id, j.run_lease) for j in jobs])
    done = await _all(aconn, DONE_ROWS)
    assert [r["compact"] for r in done] == [False, False], done
    assert {r["id"]: r["args"] for r in await _all(aconn, VIEW_ARGS)} == {
        j.id: j.args for j in jobs}


@QS
async def test_a_done_entry_without_args_must_name_a_completed_entry(engine, aconn):
    """The table refuses a row that neither holds its args nor names its ready entry as a
    completion."""
    jobs = await _claimed(engine, aconn, 1)
    await engine.fail_batch(aconn, [AttemptWrite(jobs[0].id, jobs[0].run_lease,
                                                 error={"error": "boom"})])
    with pytest.raises(psycopg.errors.CheckViolation):  # corruption on purpose: refused
        await aconn.execute("UPDATE awa.done_entries SET args = NULL")


@QS
async def test_history_at_one_copy_takes_fewer_bytes_per_job(engine, aconn):
    """The done entries of completions carry no payload: with 1 kB of args per job,
    done_entries grow by far less than the ready entries do."""
    jobs = await _claimed(engine, aconn, 300)
    await engine.complete_batch(aconn, [AttemptWrite(j.id, j.run_lease) for j in jobs])
    sizes = {r["t"]: r["bytes"] for r in await _all(aconn, """
        SELECT 'ready' AS t, sum(pg_column_size(r.args))::bigint AS bytes
          FROM awa.ready_entries r
        UNION ALL
        SELECT 'done', coalesce(sum(pg_column_size(d.args)), 0)::bigint FROM awa.done_entries d""")}
    assert sizes["ready"] > 300 * 200 and sizes["done"] == 0, sizes
