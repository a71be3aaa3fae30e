"""Callbacks through the real worker runtime: park, wait, resume, early callbacks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import awa
from awa import callbacks
from support.polling import eventually
from support.rows import job_row

FAST = {"poll_interval_ms": 50, "heartbeat_interval_ms": 100, "run_maintenance": False}


def state_is(db, job_id: int, state: str) -> Callable[[], bool]:
    return lambda: (job_row(db, job_id) or {}).get("state") == state


async def test_wait_for_callback_resumes_the_live_handler(db, client):
    tokens: asyncio.Queue[str] = asyncio.Queue()
    seen: list[Any] = []

    @client.task(dict, kind="approval", queue="cb")
    async def approval(job):
        token = await job.register_callback(timeout_seconds=30)
        await tokens.put(token.id)
        payload = await job.wait_for_callback(token)
        seen.append((job.attempt, payload))
        return None

    await client.start([("cb", 2)], **FAST)
    job = await client.insert({"doc": 1}, kind="approval", queue="cb")
    token = await asyncio.wait_for(tokens.get(), 10)
    await eventually(state_is(db, job.id, "waiting_external"), message="parked")
    resumed = await client.resume_external(token, {"approved": True})
    assert resumed.state is awa.JobState.Running
    await eventually(state_is(db, job.id, "completed"), message="completed after resume")
    assert seen == [(1, {"approved": True})]
    row = job_row(db, job.id)
    assert row["attempt"] == 1 and row["errors"] is None  # one attempt throughout
    with pytest.raises(awa.CallbackNotFound):
        await client.resume_external(token, {"approved": False})


async def test_returning_wait_for_callback_parks_until_complete(db, client):
    tokens: asyncio.Queue[str] = asyncio.Queue()

    @client.task(dict, kind="export", queue="cb")
    async def export(job):
        token = await job.register_callback(timeout_seconds=30, on_complete="payload.ok")
        await tokens.put(token.id)
        return awa.WaitForCallback(token)

    await client.start([("cb", 2)], **FAST)
    job = await client.insert({}, kind="export", queue="cb")
    token = await asyncio.wait_for(tokens.get(), 10)
    await eventually(state_is(db, job.id, "waiting_external"), message="parked")
    ignored = await client.resolve_callback(token, {"ok": False})
    assert ignored.is_ignored() and job_row(db, job.id)["state"] == "waiting_external"
    done = await client.resolve_callback(token, {"ok": True})
    assert done.is_completed() and job_row(db, job.id)["state"] == "completed"


async def test_early_callback_before_the_handler_returns(db, client):
    @client.task(dict, kind="fast_external", queue="cb")
    async def fast_external(job):
        token = await job.register_callback(timeout_seconds=30)
        # The outside system answers before this handler hands back WaitForCallback.
        await client.complete_external(token.id, {"fast": True})
        return awa.WaitForCallback(token)

    await client.start([("cb", 1)], **FAST)
    job = await client.insert({}, kind="fast_external", queue="cb")
    await eventually(state_is(db, job.id, "completed"), message="completed")
    await asyncio.sleep(0.3)  # the stale park has been written (and ignored) by now
    row = job_row(db, job.id)
    assert row["state"] == "completed"
    assert row["metadata"][callbacks.RESULT_KEY] == {"fast": True}


async def test_bad_cel_is_rejected_at_registration_inside_the_handler(db, client):
    errors: list[str] = []

    @client.task(dict, kind="bad_rules", queue="cb")
    async def bad_rules(job):
        try:
            await job.register_callback(filter="payload.status ==")
        except awa.ValidationError as exc:
            errors.append(str(exc))
            raise awa.TerminalError(str(exc)) from exc

    await client.start([("cb", 1)], **FAST)
    job = await client.insert({}, kind="bad_rules", queue="cb", max_attempts=1)
    await eventually(state_is(db, job.id, "failed"), message="failed")
    assert errors and errors[0].startswith("invalid CEL filter 'payload.status =='")
    assert job_row(db, job.id)["callback_id"] is None


async def test_shutdown_interrupts_a_waiting_handler_and_leaves_the_job_parked(db, client):
    tokens: asyncio.Queue[str] = asyncio.Queue()
    outcomes: list[str] = []

    @client.task(dict, kind="long_wait", queue="cb")
    async def long_wait(job):
        token = await job.register_callback(timeout_seconds=60)
        await tokens.put(token.id)
        try:
            await job.wait_for_callback(token)
        except callbacks.CallbackWaitInterrupted as exc:
            outcomes.append(str(exc))
            raise

    await client.start([("cb", 1)], **FAST)
    job = await client.insert({}, kind="long_wait", queue="cb")
    token = await asyncio.wait_for(tokens.get(), 10)
    await eventually(state_is(db, job.id, "waiting_external"), message="parked")
    await client.shutdown(timeout_ms=5000)
    assert outcomes and "interrupted" in outcomes[0]
    row = job_row(db, job.id)
    assert row["state"] == "waiting_external" and row["errors"] is None  # stale write ignored
    # The callback still resolves the parked job after the worker is gone.
    assert (await client.complete_external(token, {"late": 1})).state is awa.JobState.Completed


async def test_timed_out_wait_is_rescued_and_a_late_callback_is_refused(db, client):
    tokens: list[str] = []

    @client.task(dict, kind="slow_partner", queue="cb")
    async def slow_partner(job):
        token = await job.register_callback(timeout_seconds=0.3)
        tokens.append(token.id)
        return awa.WaitForCallback(token)

    await client.start([("cb", 1)], **{**FAST, "run_maintenance": True},
                       leader_election_interval_ms=100, callback_rescue_interval_ms=100)
    job = await client.insert({}, kind="slow_partner", queue="cb", max_attempts=1)
    await eventually(state_is(db, job.id, "failed"), timeout=15, message="callback timeout rescue")
    row = job_row(db, job.id)
    assert row["errors"][-1]["error"] == "callback timed out"
    with pytest.raises(awa.CallbackNotFound, match="already resolved: job .* is failed"):
        await client.complete_external(tokens[0], {"too": "late"})
    assert job_row(db, job.id)["state"] == "failed"
