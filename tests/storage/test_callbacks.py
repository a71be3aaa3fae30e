"""Conformance: the callbacks group (``CallbackOps``) of every engine.

Running attempts are arranged the engine-agnostic way: a real worker claims
each job and its handler holds the attempt (``(id, run_lease)``) until the
test ends.  State is observed through the ``awa.jobs`` view and the engine's
own return values only.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import awa
from awa.storage.engine import (
    CALLBACK_RESULT_KEY,
    CALLBACK_RESUME_CHANNEL,
    CallbackHolder,
    CallbackSpec,
)

QUEUE = "cb_conformance"
Hold = Callable[[], Awaitable[tuple[int, int]]]


@pytest.fixture
async def hold(engine_url: str) -> AsyncIterator[Hold]:
    """``await hold()`` -> ``(job_id, run_lease)`` of a running attempt a live handler owns."""
    client = awa.AsyncClient(engine_url)
    claimed: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    release = asyncio.Event()

    @client.task(dict, kind="held", queue=QUEUE)
    async def held(job: awa.Job[Any]) -> None:
        await claimed.put((job.id, job.run_lease))
        await release.wait()

    await client.start([(QUEUE, 8)], poll_interval_ms=50, heartbeat_interval_ms=200,
                       run_maintenance=False)

    async def make() -> tuple[int, int]:
        job = await client.insert({}, kind="held", queue=QUEUE)
        while True:
            job_id, lease = await asyncio.wait_for(claimed.get(), 10)
            if job_id == job.id:
                return job_id, lease

    try:
        yield make
    finally:
        release.set()
        await client.shutdown(2000)
        await client.close()


async def job_row(aconn: Any, job_id: int) -> dict[str, Any]:
    cur = await aconn.execute(
        "SELECT *, extract(epoch FROM callback_timeout_at - now()) AS timeout_in "
        "FROM awa.jobs WHERE id = %s", (job_id,))
    row = await cur.fetchone()
    assert row is not None
    return dict(row)


def spec(timeout_s: float = 60, **cel: str) -> CallbackSpec:
    return CallbackSpec(callback_id=uuid.uuid4(), timeout_s=timeout_s, **cel)


async def registered(engine: Any, aconn: Any, hold: Hold, *, park: bool = True,
                     **cel: str) -> tuple[int, int, uuid.UUID]:
    job_id, lease = await hold()
    s = spec(60, **cel)
    assert await engine.register_callback(aconn, job_id, lease, s)
    if park:
        assert await engine.park_for_callback(aconn, job_id, lease, s.callback_id)
    return job_id, lease, s.callback_id


def result(cid: uuid.UUID, action: str, payload: Any) -> Any:
    """What awa.callbacks stores for a resolution: the bare payload (as awa-pg 0.6.9)."""
    return payload


async def test_register_is_guarded_by_run_lease_and_running_state(engine, aconn, hold):
    job_id, lease = await hold()
    stale = spec()
    assert await engine.register_callback(aconn, job_id, lease - 1, stale) is False
    assert (await job_row(aconn, job_id))["callback_id"] is None  # the stale write did nothing

    s = spec(90, filter="payload.ok", on_complete="payload.done", on_fail="payload.bad",
             transform="payload.value")
    assert await engine.register_callback(aconn, job_id, lease, s) is True
    row = await job_row(aconn, job_id)
    assert row["state"] == "running" and row["callback_id"] == s.callback_id
    assert 85 < row["timeout_in"] <= 90
    assert (row["callback_filter"], row["callback_on_complete"], row["callback_on_fail"],
            row["callback_transform"]) == ("payload.ok", "payload.done", "payload.bad",
                                           "payload.value")

    # Once the attempt is no longer running, a registration is refused.
    assert await engine.complete_external(aconn, s.callback_id, result(s.callback_id,
                                                                       "complete", 1))
    assert await engine.register_callback(aconn, job_id, lease, spec()) is False
    assert (await job_row(aconn, job_id))["callback_id"] == s.callback_id


async def test_park_for_callback_moves_the_attempt_to_waiting_external(engine, aconn, hold):
    job_id, lease, cid = await registered(engine, aconn, hold, park=False)
    assert await engine.park_for_callback(aconn, job_id, lease, uuid.uuid4()) is False
    assert await engine.park_for_callback(aconn, job_id, lease - 1, cid) is False
    assert (await job_row(aconn, job_id))["state"] == "running"
    assert (await job_row(aconn, job_id))["deadline_at"] is not None

    assert await engine.park_for_callback(aconn, job_id, lease, cid) is True
    parked = await job_row(aconn, job_id)
    # Parked, the attempt's deadline no longer applies (awa-pg 0.6.9: deadline None).
    assert parked["state"] == "waiting_external" and parked["deadline_at"] is None
    wait = await engine.poll_callback_wait(aconn, job_id)
    assert wait is not None
    assert (wait.state, wait.run_lease, wait.callback_id, wait.result) == (
        "waiting_external", lease, cid, None)
    # Parking twice matches nothing: the attempt is no longer running.
    assert await engine.park_for_callback(aconn, job_id, lease, cid) is False


async def test_complete_external_then_already_resolved(engine, aconn, hold):
    job_id, _lease, cid = await registered(engine, aconn, hold)
    runner = (await job_row(aconn, job_id))["claimed_by"]
    done = await engine.complete_external(aconn, cid, result(cid, "complete", {"receipt": 7}))
    assert done is not None and done.id == job_id
    assert done.state is awa.JobState.Completed and done.queue == QUEUE and done.kind == "held"
    row = await job_row(aconn, job_id)
    assert row["state"] == "completed" and row["finalized_at"] is not None
    assert row["callback_timeout_at"] is None and row["deadline_at"] is None
    assert row["metadata"][CALLBACK_RESULT_KEY] == {"receipt": 7}
    assert row["callback_id"] == cid  # kept as a record
    # The runtime that ran the attempt stays on record, as when its handler completes it.
    assert runner is not None and row["claimed_by"] == runner

    # A second resolution of any kind matches nothing: never a double transition.
    assert await engine.complete_external(aconn, cid, result(cid, "complete", None)) is None
    assert await engine.fail_external(aconn, cid, {"error": "late"}) is None
    assert await engine.retry_external(aconn, cid) is None
    assert await engine.resume_external(aconn, cid, result(cid, "resume", None)) is None
    assert await engine.heartbeat_callback(aconn, cid, 60) is None
    assert await engine.find_callback(aconn, cid) == CallbackHolder(job_id, "completed")
    assert (await job_row(aconn, job_id))["state"] == "completed"


async def test_fail_external_records_the_error_for_the_attempt(engine, aconn, hold):
    job_id, _lease, cid = await registered(engine, aconn, hold)
    runner = (await job_row(aconn, job_id))["claimed_by"]
    failed = await engine.fail_external(aconn, cid, {"error": "card declined", "terminal": True})
    assert failed is not None and failed.state is awa.JobState.Failed
    row = await job_row(aconn, job_id)
    assert row["state"] == "failed" and row["callback_timeout_at"] is None
    assert runner is not None and row["claimed_by"] == runner
    [entry] = row["errors"]
    assert entry["error"] == "card declined" and entry["attempt"] == row["attempt"] == 1
    assert await engine.fail_external(aconn, cid, {"error": "again"}) is None
    assert await engine.find_callback(aconn, cid) == CallbackHolder(job_id, "failed")


async def test_retry_external_is_a_fresh_start(engine, aconn, hold, engine_url):
    job_id, _lease, cid = await registered(engine, aconn, hold)
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as listener:
        await listener.execute(f'LISTEN "awa:{QUEUE}"')
        async with aconn.transaction():
            retried = await engine.retry_external(aconn, cid)
        note = await asyncio.wait_for(anext(listener.notifies()), 5)  # dispatchers woken
        assert note.channel == f"awa:{QUEUE}"
    assert retried is not None and retried.id == job_id
    assert retried.state is awa.JobState.Available and retried.attempt == 0
    assert retried.callback_id is None and retried.callback_timeout_at is None
    assert retried.deadline_at is None and retried.finalized_at is None
    # The callback is spent: it resolves nothing and names no job any more.
    assert await engine.complete_external(aconn, cid, result(cid, "complete", None)) is None
    assert await engine.find_callback(aconn, cid) is None


async def test_resume_external_returns_to_running_and_notifies(engine, aconn, hold, engine_url):
    job_id, lease, cid = await registered(engine, aconn, hold)
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as listener:
        await listener.execute(f'LISTEN "{CALLBACK_RESUME_CHANNEL}"')
        resumed = await engine.resume_external(aconn, cid, result(cid, "resume", {"step": 2}))
        note = await asyncio.wait_for(anext(listener.notifies()), 5)
    assert note.payload == str(job_id)
    assert resumed is not None and resumed.state is awa.JobState.Running
    assert resumed.run_lease == lease and resumed.callback_id is None

    wait = await engine.poll_callback_wait(aconn, job_id)
    assert wait is not None and wait.state == "running" and wait.run_lease == lease
    assert wait.callback_id is None
    assert wait.result == {"step": 2}  # the bare payload
    assert await engine.resume_external(aconn, cid, result(cid, "resume", None)) is None


async def test_an_early_callback_resolves_a_still_running_attempt(engine, aconn, hold):
    job_id, lease, cid = await registered(engine, aconn, hold, park=False)
    done = await engine.complete_external(aconn, cid, result(cid, "complete", {"fast": True}))
    assert done is not None and done.state is awa.JobState.Completed
    # The handler's later park is a stale write.
    assert await engine.park_for_callback(aconn, job_id, lease, cid) is False
    assert (await job_row(aconn, job_id))["state"] == "completed"


async def test_heartbeat_extends_the_callback_timeout(engine, aconn, hold):
    job_id, _lease, cid = await registered(engine, aconn, hold)
    before = (await job_row(aconn, job_id))["callback_timeout_at"]
    beaten = await engine.heartbeat_callback(aconn, cid, 600)
    assert beaten is not None and beaten.state is awa.JobState.WaitingExternal
    assert beaten.callback_timeout_at is not None
    assert beaten.callback_timeout_at - before > timedelta(seconds=500)
    row = await job_row(aconn, job_id)
    assert 595 < row["timeout_in"] <= 600 and row["state"] == "waiting_external"


async def test_lock_open_callback_sees_the_rules_until_resolved(engine, aconn, hold):
    job_id, _lease, cid = await registered(engine, aconn, hold, filter="payload.ok",
                                          transform="payload.value")
    async with aconn.transaction():
        locked = await engine.lock_open_callback(aconn, cid)
        assert locked is not None and locked.id == job_id
        assert locked.callback_filter == "payload.ok"
        assert locked.callback_transform == "payload.value"
        assert locked.state is awa.JobState.WaitingExternal
    assert await engine.complete_external(aconn, cid, result(cid, "complete", 1)) is not None
    assert await engine.lock_open_callback(aconn, cid) is None


async def test_unknown_callback_id_is_not_found(engine, aconn):
    cid = uuid.uuid4()
    assert await engine.find_callback(aconn, cid) is None
    assert await engine.lock_open_callback(aconn, cid) is None
    assert await engine.complete_external(aconn, cid, result(cid, "complete", None)) is None
    assert await engine.fail_external(aconn, cid, {"error": "x"}) is None
    assert await engine.retry_external(aconn, cid) is None
    assert await engine.resume_external(aconn, cid, result(cid, "resume", None)) is None
    assert await engine.heartbeat_callback(aconn, cid, 60) is None
    assert await engine.poll_callback_wait(aconn, 987654321) is None
    assert await engine.register_callback(aconn, 987654321, 1, spec()) is False
    assert await engine.park_for_callback(aconn, 987654321, 1, cid) is False
