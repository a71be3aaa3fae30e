"""Conformance: the execution group (claim, outcome batches, heartbeat, progress, snapshot).

Jobs are arranged through the public client API and observed through the
``awa.jobs`` view (and the client's DLQ lookup), so every engine runs these
tests unchanged.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from awa import callbacks, lifecycle
from awa.job import JobState
from awa.storage.engine import AppliedBatch, AttemptWrite, RuntimeSnapshot

DEADLINE_MS = 60_000
COLLIDING = {"states": ["available", "retryable", "scheduled"]}  # running not in the mask


@dataclass
class Work:
    n: int = 0


@pytest.fixture
async def client(engine_url: str):
    c = awa.AsyncClient(engine_url)
    yield c
    await c.close()


async def row(aconn: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any] | None:
    cur = await aconn.execute("SELECT *, state::text AS state FROM awa.jobs WHERE id = %s",
                              (job_id,))
    return await cur.fetchone()


async def state(aconn: psycopg.AsyncConnection[Any], job_id: int) -> str | None:
    r = await row(aconn, job_id)
    return None if r is None else r["state"]


def write(job: awa.Job[Any], **kw: Any) -> AttemptWrite:
    return AttemptWrite(job.id, job.run_lease, attempt=job.attempt, **kw)


async def claim_all(engine, aconn, n: int, queue: str = "default") -> list[awa.Job[Any]]:
    jobs = await engine.claim_batch(aconn, queue, n, DEADLINE_MS)
    assert len(jobs) == n
    return jobs


# -- claim ---------------------------------------------------------------------------
async def test_warm_up_claims_and_writes_nothing(engine, engine_url, client, aconn):
    """Warming a connection claims, ends and writes nothing (the waiting job stays
    available), and the connection then claims and completes as any other."""
    job = await client.insert(Work(1), queue="default")
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as fresh:
        await engine.warm_up(fresh)
        await engine.warm_up(fresh)  # again: still nothing
        cur = await aconn.execute("SELECT state::text AS state, count(*) AS n FROM awa.jobs "
                                  "GROUP BY 1")
        assert {r["state"]: r["n"] for r in await cur.fetchall()} == {"available": 1}
        [claimed] = await claim_all(engine, fresh, 1)
        assert claimed.id == job.id
        assert (await engine.complete_batch(fresh, [write(claimed)])).applied == [job.id]
    assert await state(aconn, job.id) == "completed"


async def test_claim_takes_priority_then_run_at_order(engine, aconn, client):
    now = datetime.now(UTC)
    spec = [(3, 50), (1, 10), (2, 40), (1, 30), (1, 20), (4, 60)]  # (priority, seconds ago)
    ids = {}
    for priority, ago in spec:
        job = await client.insert(Work(ago), priority=priority, run_at=now - timedelta(seconds=ago))
        ids[(priority, ago)] = job.id
    await engine.promote_due(aconn, limit=10)  # an explicit run_at starts scheduled
    first = await engine.claim_batch(aconn, "default", 2, DEADLINE_MS)
    # Priority 1 first; among equals the oldest run_at first.
    assert [j.id for j in first] == [ids[(1, 30)], ids[(1, 20)]]
    rest = await engine.claim_batch(aconn, "default", 10, DEADLINE_MS)
    assert [j.id for j in rest] == [ids[(1, 10)], ids[(2, 40)], ids[(3, 50)], ids[(4, 60)]]
    assert await engine.claim_batch(aconn, "default", 10, DEADLINE_MS) == []


async def test_claim_starts_an_attempt(engine, aconn, client):
    inserted = await client.insert(Work(7), tags=["t"], metadata={"m": 1}, max_attempts=4)
    before = await row(aconn, inserted.id)
    [job] = await engine.claim_batch(aconn, "default", 5, 1_500)
    after = await row(aconn, inserted.id)
    assert job.id == inserted.id and job.kind == "work" and job.queue == "default"
    assert job.state is JobState.Running and after["state"] == "running"
    assert job.attempt == after["attempt"] == before["attempt"] + 1
    assert job.run_lease == after["run_lease"] == before["run_lease"] + 1
    assert job.max_attempts == 4 and job.tags == ["t"] and job.metadata == {"m": 1}
    assert job.args == {"n": 7}  # raw: the executor decodes
    assert after["heartbeat_at"] is not None and job.attempted_at is not None
    assert job.deadline_at - job.attempted_at == timedelta(milliseconds=1_500)
    assert after["deadline_at"] == job.deadline_at


async def test_claimed_args_read_back_as_stored(engine, aconn, client):
    """A claimed job keeps its args as the row's JSON text until they are read (issue 48);
    the first read gives back exactly what was stored, and later reads the same object."""
    stored = {"text": "zoë \u2603 \"quoted\"\n", "n": 2**62, "x": 1.5, "neg": -0.25,
              "nested": {"list": [1, None, True, {"k": []}], "empty": {}}, "": "blank key"}
    inserted = await client.insert(stored, kind="any_args")
    [job] = await engine.claim_batch(aconn, "default", 1, DEADLINE_MS)
    assert job.id == inserted.id
    assert "args" not in vars(job)  # not parsed at the claim
    assert job.args == stored and job.args is job.args
    assert vars(job)["args"] is job.args  # parsed once, then a plain attribute


async def test_claim_records_the_claiming_runtime(engine, aconn, client):
    """Who runs what: the instance id given to the claim stays with the attempt while it
    runs -- in ``awa.jobs``, the running-attempt reads and the job record -- also once it
    is materialized (heartbeat) or waits for a callback; the next claim records its own."""
    first, second = uuid.uuid4(), uuid.uuid4()
    a = (await client.insert(Work(1))).id
    b = (await client.insert(Work(2))).id
    c = (await client.insert(Work(3))).id
    [ja] = await engine.claim_batch(aconn, "default", 1, DEADLINE_MS, first)
    [jb, jc] = await engine.claim_batch(aconn, "default", 2, DEADLINE_MS, second)
    assert [ja.id, jb.id, jc.id] == [a, b, c]
    await engine.heartbeat_batch(aconn, [write(jb)])  # materializes on queue storage
    token = await callbacks.register_callback(await client._get_pool(), jc.id, jc.run_lease, 60)
    await engine.park_batch(aconn, [write(jc, callback_id=token.id)])

    want = {a: str(first), b: str(second), c: str(second)}
    for job_id, instance in want.items():
        assert str((await row(aconn, job_id))["claimed_by"]) == instance
        record = await engine.job_record(aconn, job_id)
        assert record is not None and record.claimed_by == instance
    running = await engine.running_attempts(aconn, limit=10)
    assert {r.id: r.claimed_by for r in running} == {a: str(first), b: str(second)}
    by_id = await engine.running_attempts(aconn, job_ids=[b], limit=10)
    assert [r.claimed_by for r in by_id] == [str(second)]

    # Retried, promoted and claimed again by another runtime: that one is named now.
    assert (await engine.retry_batch(aconn, [write(ja, delay_s=0.0)])).applied == [a]
    await engine.promote_due(aconn, limit=10)
    third = uuid.uuid4()
    [again] = await engine.claim_batch(aconn, "default", 1, DEADLINE_MS, third)
    assert again.id == a and again.attempt == 2
    assert str((await row(aconn, a))["claimed_by"]) == str(third)
    assert (await engine.job_record(aconn, a)).claimed_by == str(third)


async def test_an_attempt_ended_in_place_keeps_its_runtime(engine, aconn, client):
    """Completed, failed or cancelled by its handler: the job still names who ran it
    (a short attempt and one materialized by a heartbeat alike)."""
    instance = uuid.uuid4()
    ids = [(await client.insert(Work(n))).id for n in range(3)]
    done, failed, cancelled = await engine.claim_batch(aconn, "default", 3, DEADLINE_MS,
                                                       instance)
    await engine.heartbeat_batch(aconn, [write(failed)])
    assert (await engine.complete_batch(aconn, [write(done)])).applied == [done.id]
    assert (await engine.fail_batch(aconn, [write(failed, error={"error": "x"})])).applied \
        == [failed.id]
    assert (await engine.cancel_batch(aconn, [write(cancelled)])).applied == [cancelled.id]
    for job_id in ids:
        assert str((await row(aconn, job_id))["claimed_by"]) == str(instance)
        assert (await engine.job_record(aconn, job_id)).claimed_by == str(instance)


async def test_a_claim_without_an_instance_records_none(engine, aconn, client):
    job = await client.insert(Work())
    [claimed] = await engine.claim_batch(aconn, "default", 1, DEADLINE_MS)
    assert claimed.id == job.id
    assert (await row(aconn, job.id))["claimed_by"] is None
    [attempt] = await engine.running_attempts(aconn, limit=10)
    assert attempt.claimed_by is None


async def test_claim_respects_paused_queues_and_other_queues(engine, aconn, client):
    job = await client.insert(Work(), queue="q1")
    other = await client.insert(Work(), queue="q2")
    await client.pause_queue("q1")
    assert await engine.claim_batch(aconn, "q1", 10, DEADLINE_MS) == []
    assert await state(aconn, job.id) == "available"
    await client.resume_queue("q1")
    assert [j.id for j in await engine.claim_batch(aconn, "q1", 10, DEADLINE_MS)] == [job.id]
    assert await state(aconn, other.id) == "available"


async def test_claim_skips_future_and_non_available_jobs(engine, aconn, client):
    later = await client.insert(Work(), run_at=datetime.now(UTC) + timedelta(hours=1))
    now = await client.insert(Work())
    [claimed] = await engine.claim_batch(aconn, "default", 10, DEADLINE_MS)
    assert claimed.id == now.id
    assert await engine.claim_batch(aconn, "default", 10, DEADLINE_MS) == []
    assert await state(aconn, later.id) == "scheduled"


async def test_available_counts(engine, aconn, client):
    await client.insert_many([Work(i) for i in range(3)], queue="a")
    await client.insert(Work(), queue="b")
    await engine.claim_batch(aconn, "a", 1, DEADLINE_MS)
    counts = await engine.available_counts(aconn, ["a", "b", "empty"])
    assert counts == {"a": 2, "b": 1}


# -- outcome batches ---------------------------------------------------------------------
async def test_complete_batch(engine, aconn, client):
    await client.insert_many([Work(i) for i in range(3)])
    jobs = await claim_all(engine, aconn, 3)
    result = await engine.complete_batch(aconn, [write(j) for j in jobs])
    assert isinstance(result, AppliedBatch)
    assert sorted(result.applied) == sorted(j.id for j in jobs) and result.superseded == []
    for j in jobs:
        r = await row(aconn, j.id)
        assert r["state"] == "completed" and r["finalized_at"] is not None


async def test_complete_batch_writes_buffered_progress_and_merges_metadata(engine, aconn, client):
    a = await client.insert(Work(1), metadata={"keep": 1, "over": 1})
    b = await client.insert(Work(2), metadata={"keep": 2})
    ja, jb = await claim_all(engine, aconn, 2)
    result = await engine.complete_batch(aconn, [
        write(ja, progress={"percent": 50.0}, metadata={"over": 2, "new": True}),
        write(jb)])
    assert sorted(result.applied) == sorted([a.id, b.id])
    ra, rb = await row(aconn, a.id), await row(aconn, b.id)
    assert ra["progress"] is None  # completion clears the progress (awa-pg 0.6.9)
    assert ra["metadata"] == {"keep": 1, "over": 2, "new": True}
    assert rb["metadata"] == {"keep": 2} and rb["state"] == "completed"


async def test_retry_batch(engine, aconn, client):
    await client.insert(Work(), max_attempts=5)
    [job] = await claim_all(engine, aconn, 1)
    error = lifecycle.error_entry("boom", job.attempt)
    result = await engine.retry_batch(aconn, [write(job, delay_s=3600.0, error=error,
                                                    progress={"percent": 10.0})])
    assert result.applied == [job.id] and result.superseded == []
    r = await row(aconn, job.id)
    assert r["state"] == "retryable" and r["attempt"] == 1
    assert r["errors"][-1]["error"] == "boom" and r["progress"] == {"percent": 10.0}
    assert r["run_at"] > datetime.now(UTC) + timedelta(minutes=59)
    assert r["heartbeat_at"] is None and r["deadline_at"] is None
    # awa-pg 0.6.9: a retryable row records when its attempt ended.
    assert r["finalized_at"] is not None and r["finalized_at"] <= datetime.now(UTC)


async def test_snooze_batch_gives_the_attempt_back(engine, aconn, client):
    await client.insert(Work())
    [job] = await claim_all(engine, aconn, 1)
    assert job.attempt == 1
    result = await engine.snooze_batch(aconn, [write(job, delay_s=600.0)])
    assert result.applied == [job.id]
    r = await row(aconn, job.id)
    assert r["state"] == "scheduled" and r["attempt"] == 0
    assert r["run_at"] > datetime.now(UTC) + timedelta(minutes=9)
    assert r["finalized_at"] is None  # a snooze ends no attempt


@pytest.mark.parametrize("method, expected", [("cancel_batch", "cancelled"),
                                              ("fail_batch", "failed")])
async def test_terminal_batches(engine, aconn, client, method, expected):
    await client.insert_many([Work(i) for i in range(2)])
    jobs = await claim_all(engine, aconn, 2)
    errors = [lifecycle.error_entry(f"e{j.id}", j.attempt) for j in jobs]
    result = await getattr(engine, method)(aconn, [write(j, error=e) for j, e in zip(jobs, errors)])
    assert sorted(result.applied) == sorted(j.id for j in jobs)
    for j in jobs:
        r = await row(aconn, j.id)
        assert r["state"] == expected and r["finalized_at"] is not None
        assert r["errors"][-1]["error"] == f"e{j.id}"


async def test_terminal_batch_without_error_keeps_errors(engine, aconn, client):
    await client.insert(Work())
    [job] = await claim_all(engine, aconn, 1)
    result = await engine.cancel_batch(aconn, [write(job)])
    assert result.applied == [job.id]
    r = await row(aconn, job.id)
    assert r["state"] == "cancelled" and list(r["errors"] or []) == []


async def test_dead_letter_batch(engine, aconn, client):
    await client.insert(Work(3), max_attempts=1)
    [job] = await claim_all(engine, aconn, 1)
    error = lifecycle.error_entry("gave up", job.attempt, terminal=True)
    result = await engine.dead_letter_batch(aconn, [write(job, error=error,
                                                          reason=lifecycle.DLQ_TERMINAL_ERROR)])
    assert result.applied == [job.id]
    assert await row(aconn, job.id) is None  # out of the job tables
    entry = await client.get_dlq_job(job.id)
    assert entry is not None and entry.reason == lifecycle.DLQ_TERMINAL_ERROR
    assert entry.original_run_lease == job.run_lease
    assert entry.job.state is JobState.Failed and entry.job.errors[-1]["error"] == "gave up"


async def test_park_batch_only_while_the_callback_is_current(engine, aconn, client):
    await client.insert_many([Work(1), Work(2)])
    a, b = await claim_all(engine, aconn, 2)
    pool = await client._get_pool()
    token_a = await callbacks.register_callback(pool, a.id, a.run_lease, 60)
    await callbacks.register_callback(pool, b.id, b.run_lease, 60)
    # b's handler parks on a callback id that is no longer the job's.
    result = await engine.park_batch(aconn, [write(a, callback_id=token_a.id),
                                             write(b, callback_id=str(uuid.uuid4()))])
    assert result.applied == [a.id]
    assert await state(aconn, a.id) == "waiting_external"
    assert await state(aconn, b.id) == "running"
    # The parked attempt's deadline no longer applies (the callback timeout does).
    assert (await row(aconn, a.id))["deadline_at"] is None
    assert (await row(aconn, b.id))["deadline_at"] is not None


async def test_empty_batches_write_nothing(engine, aconn):
    for method in ("complete_batch", "retry_batch", "snooze_batch", "cancel_batch",
                   "fail_batch", "dead_letter_batch", "park_batch"):
        assert await getattr(engine, method)(aconn, []) == AppliedBatch()
    assert await engine.heartbeat_batch(aconn, []) == []
    assert await engine.flush_progress_batch(aconn, []) == []
    assert await engine.cancel_superseded(aconn, []) == []


# -- stale writes ----------------------------------------------------------------------
OUTCOMES = ["complete_batch", "retry_batch", "snooze_batch", "cancel_batch", "fail_batch",
            "dead_letter_batch"]


@pytest.mark.parametrize("method", OUTCOMES)
async def test_a_write_with_an_old_run_lease_is_stale(engine, aconn, client, method):
    await client.insert_many([Work(1), Work(2)])
    current, old = await claim_all(engine, aconn, 2)
    stale = AttemptWrite(old.id, old.run_lease - 1, error=lifecycle.error_entry("x", 1),
                         reason=lifecycle.DLQ_MANUAL)
    result = await getattr(engine, method)(aconn, [write(current, reason=lifecycle.DLQ_MANUAL),
                                                   stale])
    assert result.applied == [current.id] and result.superseded == []
    r = await row(aconn, old.id)
    assert r["state"] == "running" and r["run_lease"] == old.run_lease


@pytest.mark.parametrize("method", OUTCOMES)
async def test_a_second_write_for_a_finished_attempt_is_stale(engine, aconn, client, method):
    await client.insert(Work())
    [job] = await claim_all(engine, aconn, 1)
    assert (await engine.complete_batch(aconn, [write(job)])).applied == [job.id]
    result = await getattr(engine, method)(aconn, [write(job, reason=lifecycle.DLQ_MANUAL)])
    assert result.applied == [] and result.superseded == []
    assert await state(aconn, job.id) == "completed"


@pytest.mark.parametrize("method", OUTCOMES + ["heartbeat_batch"])
async def test_a_batch_one_of_whose_attempts_another_closer_ended_applies_the_rest(
        engine, aconn, client, method):
    """One attempt of the batch was cancelled by an operator first: that one is stale,
    every other attempt of the batch still gets its outcome, once."""
    await client.insert_many([Work(i) for i in range(4)], max_attempts=5)
    jobs = await claim_all(engine, aconn, 4)
    await client.cancel(jobs[1].id)
    result = await getattr(engine, method)(aconn, [write(j, reason=lifecycle.DLQ_MANUAL)
                                                   for j in jobs])
    applied = result if isinstance(result, list) else result.applied
    assert sorted(applied) == sorted(j.id for j in jobs if j is not jobs[1])
    assert await state(aconn, jobs[1].id) == "cancelled"


async def test_a_batch_racing_an_uncommitted_closer_waits_and_applies_the_rest(
        engine, engine_url, aconn, client):
    """Another transaction has ended one attempt of the batch and not committed yet: the
    batch waits for it, then completes every other attempt; each job ends once."""
    await client.insert_many([Work(i) for i in range(3)])
    jobs = await claim_all(engine, aconn, 3)
    async with await psycopg.AsyncConnection.connect(engine_url) as rival:
        assert (await engine.cancel_batch(rival, [write(jobs[0])])).applied == [jobs[0].id]
        completing = asyncio.ensure_future(engine.complete_batch(aconn, [write(j) for j in jobs]))
        await asyncio.sleep(0.3)
        assert not completing.done()  # waiting for the rival's outcome
        await rival.commit()
        result = await asyncio.wait_for(completing, 10)
    assert sorted(result.applied) == sorted([jobs[1].id, jobs[2].id])
    assert [await state(aconn, j.id) for j in jobs] == ["cancelled", "completed", "completed"]
    cur = await aconn.execute("SELECT id, count(*) AS n FROM awa.jobs WHERE id = ANY(%s) "
                              "GROUP BY id", ([j.id for j in jobs],))
    assert {r["n"] for r in await cur.fetchall()} == {1}


async def test_a_batch_naming_an_attempt_twice_ends_it_once(engine, aconn, client):
    await client.insert_many([Work(1), Work(2)])
    a, b = await claim_all(engine, aconn, 2)
    result = await engine.complete_batch(aconn, [write(a), write(b), write(a)])
    assert sorted(result.applied) == sorted([a.id, b.id])
    cur = await aconn.execute("SELECT count(*) AS n FROM awa.jobs WHERE id = %s", (a.id,))
    assert (await cur.fetchone())["n"] == 1


async def test_a_write_for_a_reclaimed_attempt_is_stale(engine, aconn, client):
    await client.insert(Work(), max_attempts=5)
    [first] = await claim_all(engine, aconn, 1)
    await engine.fail_batch(aconn, [write(first)])
    # Runnable again through the admin API; the next claim is a new attempt.
    await client.retry(first.id)
    [second] = await claim_all(engine, aconn, 1)
    assert second.id == first.id and second.run_lease > first.run_lease
    assert (await engine.complete_batch(aconn, [write(first)])).applied == []
    assert (await engine.heartbeat_batch(aconn, [write(first)])) == []
    assert (await engine.retry_batch(aconn, [write(first)])).applied == []
    assert (await engine.complete_batch(aconn, [write(second)])).applied == [second.id]


# -- unique collisions ---------------------------------------------------------------------
async def _superseded_setup(engine, aconn, client):
    """A running attempt whose unique key a newer job took meanwhile, plus a plain one."""
    wedged = await client.insert(Work(1), unique_opts=COLLIDING, max_attempts=5)
    plain = await client.insert(Work(2), max_attempts=5)
    jobs = {j.id: j for j in await claim_all(engine, aconn, 2)}
    newer = await client.insert(Work(1), unique_opts=COLLIDING)
    assert newer.id != wedged.id
    return jobs[wedged.id], jobs[plain.id], newer


@pytest.mark.parametrize("method, moved", [("retry_batch", "retryable"),
                                           ("snooze_batch", "scheduled")])
async def test_a_move_colliding_with_a_newer_unique_holder_cancels_the_superseded_attempt(
        engine, aconn, client, method, moved):
    wedged, plain, newer = await _superseded_setup(engine, aconn, client)
    error = lifecycle.error_entry("boom", 1)
    result = await getattr(engine, method)(aconn, [write(wedged, error=error, delay_s=60.0),
                                                   write(plain, error=error, delay_s=60.0)])
    assert result.applied == [plain.id] and result.superseded == [wedged.id]
    assert await state(aconn, plain.id) == moved
    w = await row(aconn, wedged.id)
    assert w["state"] == "cancelled" and w["finalized_at"] is not None
    assert w["errors"][-1]["error"] == lifecycle.RESCUED_AS_DUPLICATE
    assert w["errors"][-1]["attempt"] == wedged.attempt
    assert await state(aconn, newer.id) == "available"


async def test_a_colliding_retry_inside_the_callers_transaction(engine, engine_url, aconn, client):
    """The caller owns the transaction: the fallback stays inside it."""
    wedged, plain, newer = await _superseded_setup(engine, aconn, client)
    async with await psycopg.AsyncConnection.connect(engine_url) as conn, conn.transaction():
        result = await engine.retry_batch(conn, [write(wedged, delay_s=60.0),
                                                 write(plain, delay_s=60.0)])
        assert await state(aconn, plain.id) == "running"  # not committed yet
    assert result.applied == [plain.id] and result.superseded == [wedged.id]
    assert await state(aconn, plain.id) == "retryable"
    assert await state(aconn, wedged.id) == "cancelled"
    assert await state(aconn, newer.id) == "available"


async def test_a_stale_row_in_a_colliding_batch_is_neither_applied_nor_superseded(
        engine, aconn, client):
    wedged, plain, _ = await _superseded_setup(engine, aconn, client)
    result = await engine.retry_batch(aconn, [
        write(wedged, delay_s=60.0),
        AttemptWrite(plain.id, plain.run_lease + 7, delay_s=60.0)])
    assert result.applied == [] and result.superseded == [wedged.id]
    assert await state(aconn, plain.id) == "running"


async def test_cancel_superseded_is_guarded(engine, aconn, client):
    await client.insert_many([Work(1), Work(2)])
    a, b = await claim_all(engine, aconn, 2)
    done = await engine.cancel_superseded(aconn, [write(a), AttemptWrite(b.id, b.run_lease + 1)])
    assert done == [a.id]
    r = await row(aconn, a.id)
    assert r["state"] == "cancelled"
    assert r["errors"][-1]["error"] == lifecycle.RESCUED_AS_DUPLICATE
    assert await state(aconn, b.id) == "running"


# -- heartbeat and progress ----------------------------------------------------------------
async def test_heartbeat_touches_only_matching_attempts(engine, aconn, client):
    await client.insert_many([Work(1), Work(2)], metadata={"k": 0})
    ours, lost = await claim_all(engine, aconn, 2)
    before = {j.id: (await row(aconn, j.id))["heartbeat_at"] for j in (ours, lost)}
    await asyncio.sleep(0.02)
    matched = await engine.heartbeat_batch(aconn, [
        write(ours, progress={"percent": 30.0}, metadata={"k": 1}),
        AttemptWrite(lost.id, lost.run_lease - 1, progress={"percent": 99.0}, metadata={"k": 9})])
    assert matched == [ours.id]
    r_ours, r_lost = await row(aconn, ours.id), await row(aconn, lost.id)
    assert r_ours["heartbeat_at"] > before[ours.id]
    assert r_ours["progress"] == {"percent": 30.0} and r_ours["metadata"] == {"k": 1}
    assert r_lost["heartbeat_at"] == before[lost.id]
    assert r_lost["progress"] is None and r_lost["metadata"] == {"k": 0}


async def test_heartbeat_without_buffered_values_keeps_them(engine, aconn, client):
    await client.insert(Work(), metadata={"k": 0})
    [job] = await claim_all(engine, aconn, 1)
    await engine.heartbeat_batch(aconn, [write(job, progress={"percent": 5.0})])
    assert await engine.heartbeat_batch(aconn, [write(job)]) == [job.id]
    r = await row(aconn, job.id)
    assert r["progress"] == {"percent": 5.0} and r["metadata"] == {"k": 0}


async def test_heartbeat_matches_a_parked_attempt(engine, aconn, client):
    await client.insert(Work())
    [job] = await claim_all(engine, aconn, 1)
    token = await callbacks.register_callback(await client._get_pool(), job.id, job.run_lease, 60)
    await engine.park_batch(aconn, [write(job, callback_id=token.id)])
    assert await engine.heartbeat_batch(aconn, [write(job)]) == [job.id]


async def test_progress_survives_failure_and_retry_but_not_completion(engine, aconn, client):
    # awa-pg 0.6.9: progress carries over to the next attempt; completion clears it.
    await client.insert_many([Work(1), Work(2), Work(3)])
    done, failed, retried = await claim_all(engine, aconn, 3)
    assert await engine.flush_progress_batch(aconn, [
        write(j, progress={"percent": 40.0}) for j in (done, failed, retried)]) == sorted(
        j.id for j in (done, failed, retried))
    await engine.complete_batch(aconn, [write(done)])
    await engine.fail_batch(aconn, [write(failed, error=lifecycle.error_entry("x", 1))])
    await engine.retry_batch(aconn, [write(retried, delay_s=0.0,
                                           error=lifecycle.error_entry("y", 1))])
    assert (await row(aconn, done.id))["progress"] is None
    assert (await row(aconn, failed.id))["progress"] == {"percent": 40.0}
    assert (await row(aconn, retried.id))["progress"] == {"percent": 40.0}
    await engine.promote_due(aconn, limit=10)
    [again] = await claim_all(engine, aconn, 1)
    assert again.id == retried.id and again.progress == {"percent": 40.0}


async def test_heartbeat_of_a_finished_attempt_matches_nothing(engine, aconn, client):
    await client.insert(Work())
    [job] = await claim_all(engine, aconn, 1)
    await engine.complete_batch(aconn, [write(job)])
    assert await engine.heartbeat_batch(aconn, [write(job)]) == []
    assert await engine.flush_progress_batch(aconn, [write(job, progress={"p": 1})]) == []
    assert (await row(aconn, job.id))["progress"] is None


async def test_flush_progress_touches_only_matching_attempts_and_not_the_heartbeat(
        engine, aconn, client):
    await client.insert_many([Work(1), Work(2)])
    ours, lost = await claim_all(engine, aconn, 2)
    before = (await row(aconn, ours.id))["heartbeat_at"]
    await asyncio.sleep(0.02)
    matched = await engine.flush_progress_batch(aconn, [
        write(ours, progress={"percent": 60.0}, metadata={"m": "x"}),
        AttemptWrite(lost.id, lost.run_lease + 1, progress={"percent": 1.0})])
    assert matched == [ours.id]
    r = await row(aconn, ours.id)
    assert r["progress"] == {"percent": 60.0} and r["metadata"]["m"] == "x"
    assert r["heartbeat_at"] == before
    assert (await row(aconn, lost.id))["progress"] is None


# -- runtime snapshot ------------------------------------------------------------------------
def _snapshot(instance_id: uuid.UUID, **kw: Any) -> RuntimeSnapshot:
    values: dict[str, Any] = {
        "instance_id": instance_id, "hostname": "host-a", "pid": 123, "version": "9.9.9",
        "started_at": datetime.now(UTC) - timedelta(minutes=1),
        "snapshot_interval_ms": 10_000, "healthy": True, "postgres_connected": True,
        "poll_loop_alive": True, "heartbeat_alive": True, "maintenance_alive": False,
        "leader": False, "shutting_down": False, "global_max_workers": None,
        "queues": [{"queue": "default", "max_workers": 4, "in_flight": 0}]}
    values.update(kw)
    return RuntimeSnapshot(**values)


async def test_runtime_snapshot_upsert(engine, aconn):
    instance = uuid.uuid4()
    await engine.upsert_runtime_snapshot(aconn, _snapshot(instance))
    cur = await aconn.execute("SELECT * FROM awa.runtime_instances WHERE instance_id = %s",
                              (instance,))
    first = await cur.fetchone()
    assert first["hostname"] == "host-a" and first["pid"] == 123 and first["healthy"] is True
    assert first["queues"] == [{"queue": "default", "max_workers": 4, "in_flight": 0}]
    await asyncio.sleep(0.01)
    await engine.upsert_runtime_snapshot(aconn, _snapshot(
        instance, healthy=False, leader=True, shutting_down=True, global_max_workers=8,
        queues=[]))
    cur = await aconn.execute("SELECT * FROM awa.runtime_instances WHERE instance_id = %s",
                              (instance,))
    rows = await cur.fetchall()
    assert len(rows) == 1
    [second] = rows
    assert second["healthy"] is False and second["leader"] is True
    assert second["shutting_down"] is True and second["global_max_workers"] == 8
    assert second["queues"] == [] and second["last_seen_at"] > first["last_seen_at"]
    assert second["started_at"] == first["started_at"]


# -- SKIP LOCKED exactly-once across processes -----------------------------------------------
CLAIMER = r"""
import asyncio, json, sys
import psycopg
from awa.storage import open_engine
from awa.storage.engine import AttemptWrite

async def main(url, engine_name, batch):
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        engine = await open_engine(conn)  # the engine the database is laid out for
        assert engine.name == engine_name, engine.name
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        claimed, stale, empty = [], 0, 0
        while empty < 3:
            jobs = await engine.claim_batch(conn, "default", batch, 60_000)
            if not jobs:
                empty += 1
                await asyncio.sleep(0.02)
                continue
            empty = 0
            claimed.extend(j.id for j in jobs)
            done = await engine.complete_batch(
                conn, [AttemptWrite(j.id, j.run_lease) for j in jobs])
            stale += len(jobs) - len(done.applied)
        print(json.dumps({"claimed": claimed, "stale": stale}), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""

PROCESSES = 4
JOBS = 2_000


@pytest.mark.timeout(120)
async def test_skip_locked_claims_every_job_exactly_once_across_processes(
        engine, engine_url, aconn, client):
    inserted = await client.insert_many([Work(i) for i in range(JOBS)])
    ids = sorted(j.id for j in inserted)
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLAIMER, engine_url, engine.name, str(7 + 3 * i),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        for i in range(PROCESSES)]
    try:
        for p in procs:  # every claimer connected before any claims: they contend
            assert (await asyncio.wait_for(p.stdout.readline(), 60)).strip() == b"ready"
        for p in procs:
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        results = [json.loads(await asyncio.wait_for(p.stdout.readline(), 90)) for p in procs]
        for p in procs:
            assert await p.wait() == 0
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    claimed = [i for r in results for i in r["claimed"]]
    assert len(claimed) == len(set(claimed)) == JOBS  # none twice, none missed
    assert sorted(claimed) == ids
    assert sum(r["stale"] for r in results) == 0
    assert sum(1 for r in results if r["claimed"]) >= 2, "the claimers never overlapped"
    cur = await aconn.execute("SELECT state::text AS state, attempt, count(*) AS n FROM awa.jobs "
                              "GROUP BY 1, 2")
    assert await cur.fetchall() == [{"state": "completed", "attempt": 1, "n": JOBS}]
