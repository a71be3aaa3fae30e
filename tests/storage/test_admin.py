"""Conformance: the admin group (jobs, queues, the DLQ).

Jobs are put into each state through the public client API and a real
runtime (``Stage``), and observed through the engine's own reads and the
``awa.jobs`` view, so every engine runs these tests unchanged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import psycopg
import pytest

import awa
from awa.job import JobState
from awa.storage.engine import AttemptWrite, DlqFilter, KindQueueCount, QueueCount

FAST: dict[str, Any] = {"poll_interval_ms": 50, "heartbeat_interval_ms": 100,
                        "run_maintenance": False}
WORK = "work"          # the queue the stage's runtime serves
IDLE = "idle"          # nothing serves it: jobs stay available there
UNIQUE = {"by_args": True}


@dataclass
class Fail:
    n: int = 0


@dataclass
class Flaky:
    n: int = 0


@dataclass
class Block:
    n: int = 0


@dataclass
class Park:
    n: int = 0


@dataclass
class Done:
    n: int = 0


async def state(aconn: psycopg.AsyncConnection[Any], job_id: int) -> str | None:
    cur = await aconn.execute("SELECT state::text AS state FROM awa.jobs WHERE id = %s",
                              (job_id,))
    row = await cur.fetchone()
    return None if row is None else row["state"]


async def settle(aconn: psycopg.AsyncConnection[Any], job_id: int, wanted: str,
                 timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (now := await state(aconn, job_id)) != wanted:
        if loop.time() > deadline:
            raise AssertionError(f"job {job_id} is {now}, waited for {wanted}")
        await asyncio.sleep(0.02)


class Stage:
    """Puts jobs into a state the way production does: inserted, then run by a runtime."""

    ARGS: ClassVar[dict[str, type]] = {"failed": Fail, "retryable": Flaky, "running": Block,
                                       "waiting_external": Park, "completed": Done}

    def __init__(self, client: awa.AsyncClient, aconn: psycopg.AsyncConnection[Any]) -> None:
        self.client = client
        self.aconn = aconn
        self.stop = asyncio.Event()
        self.started = False

    def register(self) -> None:
        @self.client.task(Fail, queue=WORK)
        async def fail(job: awa.Job[Fail]) -> None:
            raise awa.TerminalError("boom")

        @self.client.task(Flaky, queue=WORK)
        async def flaky(job: awa.Job[Flaky]) -> None:
            raise RuntimeError("again later")

        @self.client.task(Block, queue=WORK)
        async def block(job: awa.Job[Block]) -> None:
            while not job.is_cancelled() and not self.stop.is_set():
                await asyncio.sleep(0.02)

        @self.client.task(Park, queue=WORK)
        async def park(job: awa.Job[Park]) -> awa.WaitForCallback:
            token = await job.register_callback(timeout_seconds=600)
            return awa.WaitForCallback(token)

        @self.client.task(Done, queue=WORK)
        async def done(job: awa.Job[Done]) -> None:
            return None

    async def job(self, wanted: str, n: int = 0, **insert: Any) -> awa.Job[Any]:
        """A job in ``wanted``; available/scheduled ones go to the unserved queue."""
        if wanted == "available":
            return await self.client.insert(Done(n), queue=insert.pop("queue", IDLE), **insert)
        if wanted == "scheduled":
            return await self.client.insert(Done(n), queue=insert.pop("queue", IDLE),
                                            run_at=timedelta(hours=1), **insert)
        if not self.started:
            await self.client.start([(WORK, 8)], **FAST)
            self.started = True
        job = await self.client.insert(self.ARGS[wanted](n), queue=WORK, **insert)
        await settle(self.aconn, job.id, wanted)
        return job

    async def halt(self) -> None:
        """Stop the runtime for good: jobs moved back to available stay there."""
        await self.client.shutdown()
        self.started = True


@pytest.fixture
async def client(engine_url: str) -> AsyncIterator[awa.AsyncClient]:
    c = awa.AsyncClient(engine_url)
    yield c
    await c.close()


@pytest.fixture
async def stage(client: awa.AsyncClient, aconn: psycopg.AsyncConnection[Any]
                ) -> AsyncIterator[Stage]:
    s = Stage(client, aconn)
    s.register()
    yield s
    s.stop.set()


class CancelListener:
    """A LISTEN "awa:cancel" connection."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def payloads(self, timeout: float = 0.5) -> list[dict[str, Any]]:
        got = []
        try:
            async with asyncio.timeout(timeout):
                async for note in self.conn.notifies():
                    got.append(json.loads(note.payload))
        except TimeoutError:
            pass
        return got


@pytest.fixture
async def cancels(engine_url: str) -> AsyncIterator[CancelListener]:
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True) as conn:
        await conn.execute('LISTEN "awa:cancel"')
        yield CancelListener(conn)


# -- jobs ---------------------------------------------------------------------------
async def test_get_list_and_dump(engine, aconn, stage):
    a = await stage.job("available", 1, tags=["red"])
    b = await stage.job("scheduled", 2, kind="other")
    got = await engine.get_job(aconn, a.id)
    assert got is not None and (got.id, got.state, got.args) == (a.id, JobState.Available,
                                                                  {"n": 1})
    assert await engine.get_job(aconn, 987654) is None
    assert [j.id for j in await engine.list_jobs(aconn)] == [b.id, a.id]
    assert [j.id for j in await engine.list_jobs(aconn, state=JobState.Scheduled)] == [b.id]
    assert [j.id for j in await engine.list_jobs(aconn, kind="other")] == [b.id]
    assert [j.id for j in await engine.list_jobs(aconn, queue=IDLE, tag="red")] == [a.id]
    assert [j.id for j in await engine.list_jobs(aconn, limit=1)] == [b.id]
    dump = await engine.dump_job(aconn, a.id)
    assert dump is not None and dump.job.id == a.id and dump.dlq_reason is None
    assert await engine.dump_job(aconn, 987654) is None


@pytest.mark.parametrize("wanted", ["available", "scheduled", "retryable"])
async def test_cancel_a_waiting_job(engine, aconn, stage, cancels, wanted):
    job = await stage.job(wanted)
    cancelled = await engine.cancel(aconn, job.id)
    assert cancelled is not None and cancelled.id == job.id
    assert cancelled.state is JobState.Cancelled and cancelled.finalized_at is not None
    assert await state(aconn, job.id) == "cancelled"
    assert await cancels.payloads() == []  # nothing runs it: nobody to tell


@pytest.mark.parametrize("wanted", ["running", "waiting_external"])
async def test_cancel_an_attempt_tells_the_runtime(engine, aconn, stage, cancels, wanted):
    job = await stage.job(wanted)
    lease = (await engine.get_job(aconn, job.id)).run_lease
    cancelled = await engine.cancel(aconn, job.id)
    assert cancelled is not None and cancelled.state is JobState.Cancelled
    assert await cancels.payloads() == [{"job_id": job.id, "run_lease": lease}]
    await asyncio.sleep(0.3)  # the handler sees the flag and returns: its finish is ignored
    assert await state(aconn, job.id) == "cancelled"


@pytest.mark.parametrize("wanted", ["completed", "failed", "cancelled"])
async def test_cancel_a_finished_job_reports_nothing(engine, aconn, stage, wanted):
    if wanted == "cancelled":
        job = await stage.job("available")
        await engine.cancel(aconn, job.id)
    else:
        job = await stage.job(wanted)
    assert await engine.cancel(aconn, job.id) is None
    assert await state(aconn, job.id) == wanted
    assert await engine.cancel(aconn, 987654) is None


async def test_retry_a_failed_or_cancelled_job(engine, aconn, stage):
    failed = await stage.job("failed", max_attempts=3)
    retried = await engine.retry(aconn, failed.id)
    assert retried is not None and retried.id == failed.id
    # The stage's runtime picks it up again and it fails again; the fresh run is what counts.
    assert retried.state is JobState.Available and retried.attempt == 0
    assert retried.finalized_at is None and retried.max_attempts == 3
    cancelled = await stage.job("available", 7)
    await engine.cancel(aconn, cancelled.id)
    again = await engine.retry(aconn, cancelled.id)
    assert again is not None and again.state is JobState.Available
    assert await state(aconn, cancelled.id) == "available"
    live = await stage.job("available", 8)
    assert await engine.retry(aconn, live.id) is None  # not failed or cancelled
    assert await engine.retry(aconn, 987654) is None


async def test_retry_a_job_parked_for_its_callback(engine, aconn, stage):
    # awa-pg 0.6.9: admin retry of a waiting_external job drops its callback and restarts it.
    parked = await stage.job("waiting_external")
    running = await stage.job("running", 1)
    callback_id = (await engine.get_job(aconn, parked.id)).callback_id
    assert callback_id is not None
    assert await engine.retry(aconn, running.id) is None  # a running attempt is left alone
    stage.stop.set()
    await stage.halt()
    retried = await engine.retry(aconn, parked.id)
    assert retried is not None and retried.id == parked.id
    assert retried.state is JobState.Available and retried.attempt == 0
    assert retried.callback_id is None and retried.deadline_at is None
    assert await state(aconn, parked.id) == "available"
    assert await engine.complete_external(aconn, callback_id, None) is None  # spent
    assert await engine.retry(aconn, parked.id) is None  # available: nothing to retry


async def test_drain_cancels_callback_waits_too(engine, aconn, stage):
    parked = [await stage.job("waiting_external", n) for n in range(2)]
    running = await stage.job("running", 9)
    queued = await stage.job("available", 3, queue=WORK, run_at=timedelta(hours=1))
    callback_id = (await engine.get_job(aconn, parked[0].id)).callback_id
    drained = await engine.drain_queue(aconn, WORK)
    assert sorted(drained, key=lambda c: c.kind) == [KindQueueCount("done", WORK, 1),
                                                     KindQueueCount("park", WORK, 2)]
    for job in (*parked, queued):
        assert await state(aconn, job.id) == "cancelled"
        got = await engine.get_job(aconn, job.id)
        assert got is not None and got.finalized_at is not None
    assert await state(aconn, running.id) == "running"  # running attempts finish
    assert await engine.complete_external(aconn, callback_id, None) is None
    assert await engine.drain_queue(aconn, WORK) == []


async def test_retry_into_a_taken_unique_key_is_a_conflict(engine, aconn, stage):
    failed = await stage.job("failed", 1, unique_opts=UNIQUE)
    # failed is outside the default mask: a new job may take the key meanwhile.
    holder = await stage.client.insert(Fail(1), queue=IDLE, unique_opts=UNIQUE)
    with pytest.raises(awa.UniqueConflict, match="another live job holds its unique key"):
        await engine.retry(aconn, failed.id)
    assert await state(aconn, failed.id) == "failed"
    assert await state(aconn, holder.id) == "available"


async def test_retry_failed_leaves_a_collision_failed_and_retries_the_rest(engine, aconn,
                                                                            stage):
    failed = [await stage.job("failed", n, unique_opts=UNIQUE) for n in range(3)]
    await stage.halt()
    holder = await stage.client.insert(Fail(1), queue=IDLE, unique_opts=UNIQUE)
    result = await engine.retry_failed(aconn, queue=WORK)
    assert sorted(j.id for j in result.jobs) == [failed[0].id, failed[2].id]
    assert all(j.state is JobState.Available and j.attempt == 0 for j in result.jobs)
    assert (result.matched, result.skipped) == (3, 1)
    assert await state(aconn, failed[1].id) == "failed"
    assert await state(aconn, holder.id) == "available"
    nothing = await engine.retry_failed(aconn, kind="fail")
    assert (nothing.jobs, nothing.matched, nothing.skipped) == ([], 1, 1)


async def test_retry_failed_by_kind_and_discard(engine, aconn, stage):
    a = await stage.job("failed", 1)
    b = await stage.job("failed", 2)
    await stage.halt()
    result = await engine.retry_failed(aconn, kind="fail", queue=WORK)
    assert sorted(j.id for j in result.jobs) == [a.id, b.id]
    assert (result.matched, result.skipped) == (2, 0)
    assert await engine.retry_failed(aconn, kind="nothing") == awa.RetryFailedResult([], 0)
    for job in (a, b):
        assert await state(aconn, job.id) == "available"
    await engine.cancel(aconn, a.id)
    assert await engine.discard_failed(aconn, "fail") == 0  # cancelled is not failed


async def test_discard_failed(engine, aconn, stage):
    a = await stage.job("failed", 1)
    keep = await stage.job("available", 2)
    assert await engine.discard_failed(aconn, "fail") == 1
    assert await state(aconn, a.id) is None
    assert await state(aconn, keep.id) == "available"


# -- queues ---------------------------------------------------------------------------
async def test_pause_resume_drain(engine, aconn, stage):
    await engine.pause_queue(aconn, IDLE, "ops@host")
    [idle] = [s for s in await engine.queue_stats(aconn) if s.queue == IDLE]
    assert idle.paused and idle.total_queued == 0
    await engine.resume_queue(aconn, IDLE)
    [idle] = [s for s in await engine.queue_stats(aconn) if s.queue == IDLE]
    assert not idle.paused
    now = await stage.job("available", 1)
    later = await stage.job("scheduled", 2)
    other = await stage.job("available", 3, kind="other")
    elsewhere = await stage.job("available", 4, queue="elsewhere")
    drained = await engine.drain_queue(aconn, IDLE)
    assert sorted(drained, key=lambda c: c.kind) == [KindQueueCount("done", IDLE, 2),
                                                     KindQueueCount("other", IDLE, 1)]
    for job in (now, later, other):
        assert await state(aconn, job.id) == "cancelled"
    assert await state(aconn, elsewhere.id) == "available"
    assert await engine.drain_queue(aconn, IDLE) == []


async def test_a_paused_queue_is_not_claimed(engine, aconn, stage):
    await engine.pause_queue(aconn, WORK)
    job = await stage.client.insert(Done(1), queue=WORK)
    await stage.client.start([(WORK, 2)], **FAST)
    stage.started = True
    await asyncio.sleep(0.5)
    assert await state(aconn, job.id) == "available"
    await engine.resume_queue(aconn, WORK)
    await settle(aconn, job.id, "completed")


async def test_queue_stats_counts(engine, aconn, stage):
    for wanted in ("running", "failed", "waiting_external", "completed", "retryable"):
        await stage.job(wanted)
    for n in range(2):
        await stage.job("available", n)
    await stage.job("scheduled", 5)
    stats = {s.queue: s for s in await engine.queue_stats(aconn)}
    work, idle = stats[WORK], stats[IDLE]
    assert (work.running, work.failed, work.waiting_external, work.completed_last_hour,
            work.retryable, work.available, work.scheduled) == (1, 1, 1, 1, 1, 0, 0)
    assert work.lag_seconds is None and not work.paused
    assert (idle.available, idle.scheduled, idle.total_queued) == (2, 1, 3)
    assert idle.lag_seconds is not None and idle.lag_seconds >= 0


# -- dead-letter queue ---------------------------------------------------------------
async def test_dlq_round_trip(engine, aconn, stage):
    failed = [await stage.job("failed", n) for n in range(3)]
    await stage.halt()
    lease = (await engine.get_job(aconn, failed[0].id)).run_lease
    assert await engine.move_failed_to_dlq(aconn, (await stage.job("available")).id,
                                           "manual") is None
    entry = await engine.move_failed_to_dlq(aconn, failed[0].id, "backfill")
    assert entry is not None and entry.job.id == failed[0].id and entry.reason == "backfill"
    assert entry.original_run_lease == lease and entry.job.errors
    assert await engine.move_failed_to_dlq(aconn, failed[0].id, "again") is None
    assert await state(aconn, failed[0].id) is None  # no longer a job of awa.jobs
    moved = await engine.bulk_move_failed_to_dlq(aconn, queue=WORK, reason="manual")
    assert moved == [KindQueueCount("fail", WORK, 2)]
    assert await engine.dlq_depth(aconn) == 3
    assert await engine.dlq_depth(aconn, queue=WORK) == 3
    assert await engine.dlq_depth(aconn, queue=IDLE) == 0
    assert await engine.dlq_depth_by_queue(aconn) == [QueueCount(WORK, 3)]

    listed = await engine.list_dlq(aconn, DlqFilter())
    # Newest first: the bulk-moved two (one dlq_at, higher ids first), then the first one.
    assert [e.job.id for e in listed] == [failed[2].id, failed[1].id, failed[0].id]
    assert [e.job.id for e in await engine.list_dlq(aconn, DlqFilter(kind="nothing"))] == []
    page = await engine.list_dlq(aconn, DlqFilter(queue=WORK), limit=2)
    rest = await engine.list_dlq(aconn, DlqFilter(queue=WORK, before_id=page[-1].job.id,
                                                  before_dlq_at=page[-1].dlq_at))
    assert len(page) == 2 and len(rest) == 1
    assert {e.job.id for e in page + rest} == {j.id for j in failed}
    got = await engine.get_dlq_job(aconn, failed[0].id)
    assert got is not None and got.reason == "backfill" and got.dlq_at is not None
    assert await engine.get_dlq_job(aconn, 987654) is None
    dump = await engine.dump_job(aconn, failed[0].id)
    assert dump is not None and dump.dlq_reason == "backfill"
    assert (await engine.get_job(aconn, failed[0].id)).id == failed[0].id

    back = await engine.retry_from_dlq(aconn, failed[0].id)
    assert back is not None and back.id == failed[0].id
    assert back.state is JobState.Available and back.attempt == 0
    assert await state(aconn, failed[0].id) == "available"
    assert await engine.get_dlq_job(aconn, failed[0].id) is None
    assert await engine.retry_from_dlq(aconn, failed[0].id) is None

    later = datetime.now(UTC) + timedelta(hours=1)
    moved_on = await engine.retry_from_dlq(aconn, failed[1].id, run_at=later, priority=1,
                                           queue=IDLE)
    assert moved_on is not None and moved_on.state is JobState.Scheduled
    assert (moved_on.priority, moved_on.queue) == (1, IDLE)

    assert await engine.purge_dlq_job(aconn, failed[2].id) == [QueueCount(WORK, 1)]
    assert await engine.purge_dlq_job(aconn, failed[2].id) == []
    assert await engine.dlq_depth(aconn) == 0


async def test_dlq_bulk_retry_and_purge(engine, aconn, stage):
    failed = [await stage.job("failed", n, tags=["t"] if n else []) for n in range(4)]
    await stage.halt()
    assert await engine.bulk_move_failed_to_dlq(aconn, reason="manual") == [
        KindQueueCount("fail", WORK, 4)]
    assert await engine.bulk_retry_from_dlq(aconn, DlqFilter(tag="nothing")) == []
    assert await engine.bulk_retry_from_dlq(aconn, DlqFilter(tag="t")) == [QueueCount(WORK, 3)]
    for job in failed[1:]:
        assert await state(aconn, job.id) == "available"
    assert await engine.dlq_depth(aconn) == 1
    assert await engine.purge_dlq(aconn, DlqFilter(kind="nothing")) == []
    assert await engine.purge_dlq(aconn, DlqFilter()) == [QueueCount(WORK, 1)]
    assert await engine.dlq_depth(aconn) == 0


async def test_dlq_bulk_retry_leaves_a_collision_in_the_dlq(engine, aconn, stage):
    failed = [await stage.job("failed", n, unique_opts=UNIQUE) for n in range(3)]
    await stage.halt()
    await engine.bulk_move_failed_to_dlq(aconn, kind="fail", reason="manual")
    holder = await stage.client.insert(Fail(1), queue=IDLE, unique_opts=UNIQUE)
    with pytest.raises(awa.UniqueConflict, match="another live job holds its unique key"):
        await engine.retry_from_dlq(aconn, failed[1].id)
    assert await engine.bulk_retry_from_dlq(aconn, DlqFilter(kind="fail")) == [
        QueueCount(WORK, 2)]
    assert await state(aconn, failed[0].id) == "available"
    assert await state(aconn, failed[2].id) == "available"
    left = await engine.get_dlq_job(aconn, failed[1].id)
    assert left is not None and await state(aconn, holder.id) == "available"


async def test_purge_dlq_with_a_cursor(engine, aconn, stage):
    failed = [await stage.job("failed", n) for n in range(3)]
    await stage.halt()
    for job in failed:
        await engine.move_failed_to_dlq(aconn, job.id, "manual")
    newest = (await engine.list_dlq(aconn, DlqFilter(), limit=1))[0]
    purged = await engine.purge_dlq(aconn, DlqFilter(before_id=newest.job.id,
                                                     before_dlq_at=newest.dlq_at))
    assert purged == [QueueCount(WORK, 2)]
    assert [e.job.id for e in await engine.list_dlq(aconn, DlqFilter())] == [newest.job.id]


# -- test isolation ---------------------------------------------------------------------
async def test_clean_for_tests_empties_every_job_table_and_keeps_the_engine(engine, aconn,
                                                                            stage):
    jobs = [await stage.job(wanted, n, **({"unique_opts": UNIQUE} if n == 0 else {}))
            for n, wanted in enumerate(["available", "scheduled", "failed", "completed",
                                        "waiting_external", "retryable", "running"])]
    await engine.move_failed_to_dlq(aconn, jobs[2].id, "manual")
    await engine.pause_queue(aconn, IDLE, "tests")
    stage.stop.set()
    await stage.halt()
    await engine.clean_for_tests(aconn)
    cur = await aconn.execute("SELECT count(*) AS n FROM awa.jobs")
    assert (await cur.fetchone())["n"] == 0
    assert await engine.dlq_depth(aconn) == 0
    assert await engine.queue_stats(aconn) == []
    cur = await aconn.execute("SELECT count(*) AS n FROM awa.job_unique_claims")
    assert (await cur.fetchone())["n"] == 0
    # The engine keeps serving: the same unique job can be inserted, claimed and completed.
    again = await stage.client.insert(Done(0), queue=IDLE, unique_opts=UNIQUE)
    [claimed] = await engine.claim_batch(aconn, IDLE, 5, 60_000)
    assert claimed.id == again.id
    assert (await engine.complete_batch(aconn, [AttemptWrite(claimed.id, claimed.run_lease)])
            ).applied == [again.id]
