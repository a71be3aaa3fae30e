"""Every callback transition with its guard, driven against real rows."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

import awa
from awa import callbacks
from awa.callbacks import CallbackAlreadyResolved, CallbackWaitInterrupted
from awa.storage.canonical.callbacks import PARK_FOR_WAIT
from support.arrange import insert_job
from support.rows import job_row

# These drive canonical's own statements against
# canonical rows; tests/storage/test_callbacks.py is where every engine is checked.
pytestmark = pytest.mark.engine("canonical")


async def park(pool, job_id: int, run_lease: int, token) -> bool:
    """The runtime's WaitForCallback write: guarded by lease, state and callback id."""
    async with pool.connection() as conn:
        cur = await conn.execute(PARK_FOR_WAIT, {
            "job_id": job_id, "run_lease": run_lease, "callback_id": uuid.UUID(token.id)})
        return cur.rowcount == 1


@pytest.fixture
def waiting(pool, running_job):
    async def make(**cel):
        job_id, lease = running_job()
        token = await callbacks.register_callback(pool, job_id, lease, 60, **cel)
        assert await park(pool, job_id, lease, token)
        return job_id, lease, token
    return make


async def test_register_sets_callback_columns_guarded_by_lease_and_state(db, pool, running_job):
    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 90, filter="payload.ok",
                                              transform="payload.value")
    row = job_row(db, job_id)
    assert str(row["callback_id"]) == token.id
    assert row["callback_filter"] == "payload.ok" and row["callback_transform"] == "payload.value"
    seconds = db.execute("SELECT extract(epoch FROM callback_timeout_at - now()) AS s "
                         "FROM awa.jobs_hot WHERE id = %s", (job_id,)).fetchone()["s"]
    assert 85 < seconds <= 90

    with pytest.raises(awa.AwaError, match="no longer running under run lease 2"):
        await callbacks.register_callback(pool, job_id, lease - 1, 60)
    db.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = %s", (job_id,))
    with pytest.raises(awa.AwaError, match="not registered"):
        await callbacks.register_callback(pool, job_id, lease, 60)
    assert str(job_row(db, job_id)["callback_id"]) == token.id  # neither write applied


@pytest.mark.parametrize("kwargs, message", [
    ({"filter": "payload.status =="}, "invalid CEL filter"),
    ({"on_fail": "paylod.error != null"}, "unknown variable 'paylod'"),
    ({"transform": ""}, "non-empty"),
    ({"timeout_seconds": 0}, "positive number"),
    ({"timeout_seconds": float("inf")}, "positive number"),
])
async def test_register_rejects_bad_expressions_and_timeouts(db, pool, running_job, kwargs,
                                                            message):
    job_id, lease = running_job()
    params = {"timeout_seconds": 60, **kwargs}
    with pytest.raises(awa.ValidationError, match=message):
        await callbacks.register_callback(pool, job_id, lease, **params)
    assert job_row(db, job_id)["callback_id"] is None


async def test_complete_external_once(db, client, waiting):
    job_id, _, token = await waiting()
    job = await client.complete_external(token.id, {"receipt": 7})
    assert job.id == job_id and job.state is awa.JobState.Completed
    row = job_row(db, job_id)
    assert row["state"] == "completed" and row["finalized_at"] is not None
    assert row["metadata"][callbacks.RESULT_KEY] == {"receipt": 7}
    assert row["callback_timeout_at"] is None

    with pytest.raises(CallbackAlreadyResolved, match="already resolved: job .* is completed"):
        await client.complete_external(token.id, {"receipt": 8})
    with pytest.raises(awa.CallbackNotFound):
        await client.fail_external(token.id, "late")
    after = job_row(db, job_id)
    assert after["metadata"] == row["metadata"] and after["errors"] is None


async def test_fail_external_records_the_error(db, client, waiting):
    job_id, _, token = await waiting()
    job = await client.fail_external(token.id, "provider rejected the charge")
    assert job.state is awa.JobState.Failed
    row = job_row(db, job_id)
    assert row["state"] == "failed" and row["finalized_at"] is not None
    [entry] = row["errors"]
    assert entry["error"] == "provider rejected the charge"
    assert entry["attempt"] == 1 and entry["terminal"] is True
    with pytest.raises(awa.CallbackNotFound, match="not found or already resolved"):
        await client.fail_external(token.id, "again")
    assert len(job_row(db, job_id)["errors"]) == 1
    with pytest.raises(awa.ValidationError, match="non-empty error"):
        await client.fail_external(str(uuid.uuid4()), " ")


async def test_retry_external_starts_from_scratch_and_wakes_the_queue(db, database_url, client,
                                                                      waiting):
    job_id, _, token = await waiting()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute('LISTEN "awa:cb"')
        job = await client.retry_external(token.id)
        notes = [n.channel for n in listener.notifies(timeout=2, stop_after=1)]
    assert notes == ["awa:cb"]
    assert job.state is awa.JobState.Available and job.attempt == 0
    row = job_row(db, job_id)
    assert row["state"] == "available" and row["attempt"] == 0
    assert row["callback_id"] is None and row["callback_timeout_at"] is None
    assert row["heartbeat_at"] is None and row["deadline_at"] is None
    with pytest.raises(awa.CallbackNotFound, match="not found or already resolved$"):
        await client.retry_external(token.id)
    assert job_row(db, job_id)["attempt"] == 0


async def test_resume_external_returns_the_job_to_running(db, client, waiting):
    job_id, lease, token = await waiting()
    job = await client.resume_external(token.id, {"step": 2})
    assert job.state is awa.JobState.Running and job.run_lease == lease
    row = job_row(db, job_id)
    assert row["state"] == "running" and row["callback_id"] is None
    assert row["metadata"][callbacks.RESULT_KEY] == {"step": 2}
    with pytest.raises(awa.CallbackNotFound):
        await client.resume_external(token.id, {"step": 3})
    assert job_row(db, job_id)["metadata"][callbacks.RESULT_KEY] == {"step": 2}


async def test_heartbeat_extends_the_wait(db, client, waiting):
    job_id, _, token = await waiting()
    before = job_row(db, job_id)["callback_timeout_at"]
    job = await client.heartbeat_callback(token.id, timeout_seconds=7200)
    assert job.callback_timeout_at > before
    assert job_row(db, job_id)["state"] == "waiting_external"
    with pytest.raises(awa.ValidationError, match="positive"):
        await client.heartbeat_callback(token.id, timeout_seconds=-1)
    await client.complete_external(token.id)
    with pytest.raises(awa.CallbackNotFound):
        await client.heartbeat_callback(token.id, 60)


async def test_unknown_and_malformed_ids(client):
    with pytest.raises(awa.CallbackNotFound, match="not found or already resolved"):
        await client.complete_external(str(uuid.uuid4()))
    with pytest.raises(awa.CallbackNotFound, match="is a UUID"):
        await client.resume_external("not-a-uuid")


async def test_early_complete_wins_and_the_late_park_is_stale(db, pool, client, running_job):
    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 60)
    await client.complete_external(token.id, {"fast": True})  # before the handler returned
    assert job_row(db, job_id)["state"] == "completed"
    assert not await park(pool, job_id, lease, token)
    assert job_row(db, job_id)["state"] == "completed"


async def test_concurrent_resolutions_apply_exactly_once(db, client, waiting):
    job_id, _, token = await waiting()
    actions = [client.complete_external(token.id, {"n": i}) for i in range(4)]
    actions += [client.fail_external(token.id, f"e{i}") for i in range(4)]
    results = await asyncio.gather(*actions, return_exceptions=True)
    applied = [r for r in results if isinstance(r, awa.Job)]
    refused = [r for r in results if isinstance(r, awa.CallbackNotFound)]
    assert len(applied) == 1 and len(refused) == 7
    row = job_row(db, job_id)
    assert row["state"] == applied[0].state.value
    assert row["errors"] is None or len(row["errors"]) == 1


async def test_wait_for_resume_parks_then_returns_the_payload(db, pool, client, running_job):
    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 60)
    waiter = asyncio.create_task(
        callbacks.wait_for_resume(pool, job_id, lease, token, lambda: False))
    for _ in range(100):
        if job_row(db, job_id)["state"] == "waiting_external":
            break
        await asyncio.sleep(0.02)
    assert job_row(db, job_id)["state"] == "waiting_external"
    assert not waiter.done()
    await client.resume_external(token.id, {"approved": True})
    assert await asyncio.wait_for(waiter, 5) == {"approved": True}
    assert job_row(db, job_id)["state"] == "running"


async def test_early_resume_is_returned_without_parking(db, pool, client, running_job):
    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 60)
    await client.resume_external(token.id, {"early": 1})
    payload = await asyncio.wait_for(
        callbacks.wait_for_resume(pool, job_id, lease, token, lambda: False), 5)
    assert payload == {"early": 1}
    assert job_row(db, job_id)["state"] == "running"


async def test_wait_is_interrupted_by_a_finalizing_callback_and_by_cancel(db, pool, client,
                                                                          running_job):
    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 60)
    waiter = asyncio.create_task(
        callbacks.wait_for_resume(pool, job_id, lease, token, lambda: False))
    await asyncio.sleep(0.1)
    await client.complete_external(token.id, {"done": True})
    with pytest.raises(CallbackWaitInterrupted, match="the job is completed"):
        await asyncio.wait_for(waiter, 5)

    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 60)
    cancelled = asyncio.Event()
    waiter = asyncio.create_task(
        callbacks.wait_for_resume(pool, job_id, lease, token, cancelled.is_set))
    await asyncio.sleep(0.1)
    cancelled.set()
    with pytest.raises(CallbackWaitInterrupted, match="cancelled"):
        await asyncio.wait_for(waiter, 5)
    assert job_row(db, job_id)["state"] == "waiting_external"  # left for callback or timeout
    await client.resume_external(token.id)  # still resolvable afterwards


def test_sync_client_forwards_the_resolutions(database_url, db, running_job):
    job_id, lease = running_job()
    client = awa.Client(database_url)
    try:
        pool = client._loop.run(client.async_client._get_pool())
        token = client._loop.run(callbacks.register_callback(pool, job_id, lease, 60))
        assert client.heartbeat_callback(token.id, 120).state is awa.JobState.Running
        assert client.complete_external(token.id, {"ok": 1}).state is awa.JobState.Completed
        with pytest.raises(awa.CallbackNotFound):
            client.complete_external(token.id)
    finally:
        client.close()


LISTENERS = """
SELECT count(*) AS n FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = 'awa-callback-listener'
   AND query LIKE 'LISTEN%%'"""


async def test_one_listener_serves_all_waiters_and_closes_after(db, pool, client, running_job):
    jobs = [running_job() for _ in range(3)]
    tokens = [await callbacks.register_callback(pool, j, lease, 60) for j, lease in jobs]
    waiters = [asyncio.create_task(callbacks.wait_for_resume(pool, j, lease, t, lambda: False))
               for (j, lease), t in zip(jobs, tokens)]
    for _ in range(100):
        if db.execute(LISTENERS).fetchone()["n"] == 1:
            break
        await asyncio.sleep(0.02)
    assert db.execute(LISTENERS).fetchone()["n"] == 1
    for i, token in enumerate(tokens):
        await client.resume_external(token.id, {"i": i})
    assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [{"i": 0}, {"i": 1}, {"i": 2}]
    for _ in range(100):
        if db.execute(LISTENERS).fetchone()["n"] == 0:
            break
        await asyncio.sleep(0.02)
    assert db.execute(LISTENERS).fetchone()["n"] == 0


async def test_a_lost_notification_is_caught_by_the_fallback_poll(db, pool, running_job):
    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 60)
    waiter = asyncio.create_task(
        callbacks.wait_for_resume(pool, job_id, lease, token, lambda: False))
    await asyncio.sleep(0.1)
    # Resume written without the notification (as if it were lost).
    result = {"quiet": True}  # stored bare, as awa-pg 0.6.9
    db.execute("UPDATE awa.jobs SET state = 'running', callback_id = NULL, "
               "metadata = metadata || jsonb_build_object(%s::text, %s::jsonb) WHERE id = %s",
               (callbacks.RESULT_KEY, psycopg.types.json.Jsonb(result), job_id))
    assert await asyncio.wait_for(waiter, 5) == {"quiet": True}


async def test_resolution_into_a_taken_unique_key_is_a_conflict_and_changes_nothing(
        db, client, waiting):
    job_id, _, token = await waiting()
    key = b"\x01" * 16
    # waiting_external is outside the default mask, so another job took the key.
    db.execute("UPDATE awa.jobs SET unique_key = %s, unique_states = B'11111000' "
               "WHERE id = %s", (key, job_id))
    insert_job(db, "available", kind="external", queue="cb", unique_key=key,
               unique_states="11111000")
    before = job_row(db, job_id)
    with pytest.raises(awa.UniqueConflict, match="another live job holds its unique key"):
        await client.complete_external(token.id, {"x": 1})
    with pytest.raises(awa.UniqueConflict):
        await client.retry_external(token.id)
    assert job_row(db, job_id) == before
    await client.fail_external(token.id, "gave up")  # failed is outside the mask: allowed
    assert job_row(db, job_id)["state"] == "failed"
