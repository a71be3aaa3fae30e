"""Conformance: DELETE and UPDATE through the awa.jobs view, as awa-pg 0.6.9 suites use them.

Canonical routes each row to ``jobs_hot`` / ``scheduled_jobs`` (migration
0002); queue storage tombstones, closes, re-appends or updates in place
(``awa/storage/queue_storage/sql/jobs_view.sql``).  Observed through the view and the client.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa


def _future() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


@pytest.fixture
async def client(engine_url: str):
    c = awa.AsyncClient(engine_url)
    yield c
    await c.close()


async def _rows(aconn: psycopg.AsyncConnection[Any], sql: str, params: Any = None) -> list:
    cur = await aconn.execute(sql, params)
    return await cur.fetchall()


async def test_delete_from_the_view_removes_rows_of_every_state(client, aconn):
    await client.insert({"n": 1}, kind="k")
    await client.insert({"n": 2}, kind="k", run_at=_future())
    keep = await client.insert({"n": 3}, kind="other")
    cur = await aconn.execute("DELETE FROM awa.jobs WHERE kind = 'k'")
    assert cur.rowcount == 2
    assert [r["id"] for r in await _rows(aconn, "SELECT id FROM awa.jobs")] == [keep.id]
    assert await _rows(aconn, "DELETE FROM awa.jobs RETURNING kind") == [{"kind": "other"}]
    assert (await _rows(aconn, "SELECT count(*) AS n FROM awa.jobs"))[0]["n"] == 0


async def test_a_deleted_available_job_is_never_claimed(engine, client, aconn):
    gone = await client.insert({"n": 1}, kind="k", queue="q")
    kept = await client.insert({"n": 2}, kind="k", queue="q")
    await aconn.execute("DELETE FROM awa.jobs WHERE id = %s", (gone.id,))
    claimed = await engine.claim_batch(aconn, "q", 10, 60_000)
    assert [j.id for j in claimed] == [kept.id]


async def test_delete_frees_the_unique_key(client, aconn):
    await client.insert({"n": 1}, kind="u", unique_opts={"by_args": True})
    await aconn.execute("DELETE FROM awa.jobs")
    again = await client.insert({"n": 1}, kind="u", unique_opts={"by_args": True})
    assert again.state == awa.JobState.Available


async def test_update_in_place_and_across_states(client, aconn):
    job = await client.insert({"n": 1}, kind="k")
    cur = await aconn.execute("UPDATE awa.jobs SET priority = 1, metadata = metadata || "
                              "'{\"a\": 1}' WHERE id = %s", (job.id,))
    assert cur.rowcount == 1
    got = await client.get_job(job.id)
    assert got.priority == 1 and got.metadata == {"a": 1}

    await aconn.execute("UPDATE awa.jobs SET state = 'scheduled', "
                        "run_at = now() + interval '1 hour' WHERE id = %s", (job.id,))
    assert (await client.get_job(job.id)).state == awa.JobState.Scheduled
    await aconn.execute("UPDATE awa.jobs SET state = 'available', run_at = now() WHERE id = %s",
                        (job.id,))
    assert (await client.get_job(job.id)).state == awa.JobState.Available
    await aconn.execute("UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() "
                        "WHERE id = %s", (job.id,))
    assert (await client.get_job(job.id)).state == awa.JobState.Cancelled
    assert (await _rows(aconn, "SELECT count(*) AS n FROM awa.jobs WHERE id = %s",
                        (job.id,)))[0]["n"] == 1


async def test_update_of_no_row_and_returning(client, aconn):
    job = await client.insert({"n": 1}, kind="k", run_at=_future())
    assert (await aconn.execute("UPDATE awa.jobs SET priority = 3 WHERE id = -1")).rowcount == 0
    rows = await _rows(aconn, "UPDATE awa.jobs SET tags = '{x}' WHERE id = %s RETURNING id, tags",
                       (job.id,))
    assert rows == [{"id": job.id, "tags": ["x"]}]
    assert (await client.get_job(job.id)).tags == ["x"]


async def test_a_running_attempt_keeps_running_when_its_heartbeat_is_set(engine, client, aconn):
    """The runbook move "make this attempt look stale": rescue then sees it as stale."""
    job = await client.insert({"n": 1}, kind="k", queue="q")
    [claimed] = await engine.claim_batch(aconn, "q", 1, 60_000)
    cur = await aconn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' "
                              "WHERE id = %s AND state = 'running'", (job.id,))
    assert cur.rowcount == 1
    [row] = await _rows(aconn, "SELECT state::text AS state, run_lease, "
                               "heartbeat_at < now() - interval '59 minutes' AS stale "
                               "FROM awa.jobs WHERE id = %s", (job.id,))
    assert row == {"state": "running", "run_lease": claimed.run_lease, "stale": True}
    rescued = await engine.rescue_stale_heartbeats(aconn, staleness_s=60, limit=10,
                                                   dlq_enabled=lambda queue: False)
    assert [r.id for r in rescued.rescued] == [job.id]


async def test_an_update_of_a_running_attempt_keeps_who_claimed_it(engine, client, aconn):
    """Queue storage materializes the receipt into a lease the way a heartbeat does, so the
    runtime that claimed the attempt stays named (the console's live-workers view reads it)."""
    worker = uuid.uuid4()
    job = await client.insert({"n": 1}, kind="k", queue="q")
    await engine.claim_batch(aconn, "q", 1, 60_000, instance_id=worker)
    cur = await aconn.execute("UPDATE awa.jobs SET deadline_at = now() + interval '1 hour' "
                              "WHERE id = %s AND state = 'running'", (job.id,))
    assert cur.rowcount == 1
    assert await _rows(aconn, "SELECT state::text AS state, claimed_by FROM awa.jobs "
                              "WHERE id = %s", (job.id,)) == [
        {"state": "running", "claimed_by": worker}]


async def test_an_update_read_before_a_claim_commits_leaves_the_claimed_attempt_alone(
        engine, client, aconn, engine_url):
    """An UPDATE through the view that saw the job available, then waited for a claim of
    it to commit, updates nothing: it neither re-places the job (to run a second time
    while the claimed attempt runs) nor writes the available row back over the claim."""
    job = await client.insert({"n": 1}, kind="k", queue="race")
    async with await psycopg.AsyncConnection.connect(engine_url) as claimer, \
            await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as updater:
        [claimed] = await engine.claim_batch(claimer, "race", 1, 60_000)  # not committed
        update = asyncio.create_task(updater.execute(
            "UPDATE awa.jobs SET priority = 1 WHERE id = %s", (job.id,)))
        await asyncio.sleep(0.5)
        assert not update.done()  # waiting for the claim's locks
        await claimer.commit()
        cur = await asyncio.wait_for(update, 10)
    assert cur.rowcount == 0
    rows = await _rows(aconn, "SELECT state::text AS state, run_lease, attempt FROM awa.jobs "
                              "WHERE id = %s", (job.id,))
    assert rows == [{"state": "running", "run_lease": claimed.run_lease, "attempt": 1}]
    assert await engine.claim_batch(aconn, "race", 10, 60_000) == []
