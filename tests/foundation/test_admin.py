"""Admin functions: inspect, cancel, retry, queues, stats and the DLQ."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

import awa
from awa.storage.canonical import admin as ca  # canonical's own admin statements
from awa.storage.common import admin as shared  # the reads every engine shares
from support.arrange import insert_job

from .conftest import SendEmail, count_jobs


@pytest.fixture
def make_job(db):
    """Rows as the runtime would leave them (running, failed, completed, ...)."""
    def make(state: str, *, kind: str = "k", queue: str = "q", attempt: int = 1,
             run_lease: int = 1, errors: list[dict] | None = None, progress: dict | None = None,
             finalized_at: datetime | None = None, run_at: datetime | None = None,
             unique_key: bytes | None = None) -> int:
        terminal = state in ("completed", "failed", "cancelled")
        return insert_job(
            db, state, kind=kind, queue=queue, attempt=attempt, max_attempts=5,
            run_lease=run_lease, errors=errors, progress=progress,
            finalized_at=finalized_at or (datetime.now(UTC) if terminal else None),
            run_at=run_at or datetime.now(UTC), attempted_at=datetime.now(UTC),
            heartbeat_at=datetime.now(UTC), unique_key=unique_key,
            unique_states="11111000" if unique_key else None, args={"n": 1})
    return make


def state_of(db, job_id: int) -> str | None:
    row = db.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()
    return row["state"] if row else None


async def test_get_and_list_jobs(client):
    a = await client.insert(SendEmail("a"), queue="q1")
    b = await client.insert({"x": 1}, kind="raw", queue="q2", run_at=timedelta(hours=1))
    assert (await client.get_job(a.id)).args == {"to": "a", "subject": "hi"}
    assert [j.id for j in await client.list_jobs()] == [b.id, a.id]
    assert [j.id for j in await client.list_jobs(state="scheduled")] == [b.id]
    assert [j.id for j in await client.list_jobs(kind="send_email", queue="q1")] == [a.id]
    assert len(await client.list_jobs(limit=1)) == 1
    with pytest.raises(awa.ValidationError, match="unknown state 'done'"):
        await client.list_jobs(state="done")
    with pytest.raises(awa.JobNotFound, match="job 424242 not found") as info:
        await client.get_job(424242)
    assert "\n" not in str(info.value)


async def test_cancel_available_and_scheduled(client, db):
    now_job = await client.insert(SendEmail("a"))
    later = await client.insert(SendEmail("b"), run_at=timedelta(hours=1))
    assert (await client.cancel(now_job.id)).state == awa.JobState.Cancelled
    moved = await client.cancel(later.id)
    assert moved.state == awa.JobState.Cancelled and moved.finalized_at is not None
    assert db.execute("SELECT count(*) AS n FROM awa.jobs "
                      "WHERE state IN ('scheduled', 'retryable')").fetchone()["n"] == 0
    assert state_of(db, later.id) == "cancelled"
    # Nothing to cancel raises, as awa-pg 0.6.9 (an AwaError).
    with pytest.raises(awa.JobNotFound,
                       match=f"job {now_job.id} is cancelled; only unfinished jobs"):
        await client.cancel(now_job.id)  # already finished
    with pytest.raises(awa.JobNotFound, match="job 999999 not found"):
        await client.cancel(999999)


async def test_cancel_running_notifies_the_attempt(client, db, make_job, listen):
    job_id = make_job("running", run_lease=7)
    listener = listen("awa:cancel")
    cancelled = await client.cancel(job_id)
    assert cancelled.state == awa.JobState.Cancelled and cancelled.finalized_at is not None
    [(channel, payload)] = listener.received()
    assert channel == "awa:cancel" and json.loads(payload) == {"job_id": job_id, "run_lease": 7}


async def test_retry_gives_a_fresh_run_and_wakes_the_queue(client, db, make_job, listen):
    failed = make_job("failed", attempt=5, errors=[{"error": "boom", "attempt": 5, "at": "t"}])
    listener = listen("awa:q")
    job = await client.retry(failed)
    assert job.state == awa.JobState.Available and job.attempt == 0 and job.finalized_at is None
    assert job.errors[0]["error"] == "boom"  # history kept
    assert listener.received() == [("awa:q", "")]
    with pytest.raises(awa.JobNotFound, match=r"job \d+ is available; only failed"):
        await client.retry(failed)  # available now: nothing to retry
    with pytest.raises(awa.JobNotFound, match="job 999999 not found"):
        await client.retry(999999)


async def test_retry_failed_skips_unique_collisions(client, db, make_job):
    holder = await client.insert({"n": 1}, kind="k", queue="q", unique_opts={})
    blocked = make_job("failed", unique_key=bytes(holder.unique_key))
    free = [make_job("failed"), make_job("failed")]
    other_kind = make_job("failed", kind="other")
    result = await client.retry_failed(kind="k")
    assert result.matched == 3 and sorted(j.id for j in result.jobs) == sorted(free)
    assert result.skipped == 1 and state_of(db, blocked) == "failed"
    assert state_of(db, other_kind) == "failed"
    with pytest.raises(awa.UniqueConflict, match="unique key"):
        await client.retry(blocked)
    with pytest.raises(awa.ValidationError, match="kind= or queue="):
        await client.retry_failed()


async def test_discard_failed(client, db, make_job):
    make_job("failed", kind="bad")
    make_job("failed", kind="bad")
    keep = make_job("failed", kind="good")
    assert await client.discard_failed("bad") == 2
    assert count_jobs(db) == 1 and state_of(db, keep) == "failed"


async def test_pause_resume_and_drain(client, db, make_job, listen):
    await client.pause_queue("q", paused_by="oncall")
    meta = db.execute("SELECT * FROM awa.queue_meta WHERE queue = 'q'").fetchone()
    assert meta["paused"] and meta["paused_by"] == "oncall" and meta["paused_at"]
    listener = listen("awa:q")
    await client.resume_queue("q")
    assert not db.execute("SELECT paused FROM awa.queue_meta WHERE queue = 'q'").fetchone()[
        "paused"]
    assert listener.received() == [("awa:q", "")]
    await client.insert_many([SendEmail("a"), SendEmail("b")], queue="q")
    await client.insert(SendEmail("c"), queue="q", run_at=timedelta(hours=1))
    running = make_job("running")
    await client.insert(SendEmail("d"), queue="elsewhere")
    assert await client.drain_queue("q") == 3
    assert count_jobs(db, queue="q", state="cancelled") == 3
    assert state_of(db, running) == "running"
    assert count_jobs(db, queue="elsewhere", state="available") == 1


async def test_queue_stats(client, db, make_job):
    await client.insert_many([SendEmail("a"), SendEmail("b")], queue="q")
    db.execute("UPDATE awa.jobs SET run_at = now() - interval '60 seconds' "
               "WHERE queue = 'q' AND state = 'available'")
    await client.insert(SendEmail("c"), queue="q", run_at=timedelta(hours=1))
    make_job("running")
    make_job("failed")
    make_job("waiting_external")
    make_job("completed")
    make_job("completed", finalized_at=datetime.now(UTC) - timedelta(hours=2))
    await client.pause_queue("idle")
    stats = {s.queue: s for s in await client.queue_stats()}
    q = stats["q"]
    assert (q.available, q.running, q.failed, q.scheduled, q.waiting_external,
            q.completed_last_hour, q.paused, q.total_queued) == (2, 1, 1, 1, 1, 1, False, 3)
    assert 59 <= q.lag_seconds < 120
    idle = stats["idle"]
    assert idle.paused and idle.available == 0 and idle.lag_seconds is None


@pytest.mark.parametrize("sql, params", [
    (ca.QUEUE_STATS, None),
    (shared.LIST_JOBS + " WHERE " + shared.STATE_FILTER + " AND " + shared.QUEUE_FILTER
     + shared.LIST_JOBS_ORDER, {"state": "failed", "queue": "q", "limit": 10}),
    (shared.LIST_JOBS + " WHERE " + shared.KIND_FILTER + shared.LIST_JOBS_ORDER,
     {"kind": "k", "limit": 10}),
    (shared.GET_JOB, {"id": 1}),
])
@pytest.mark.engine("canonical")  # EXPLAINs the admin reads on canonical's tables
def test_admin_reads_have_an_index_path(db, sql, params):
    db.execute("SET enable_seqscan = off")
    plan = "\n".join(r["QUERY PLAN"] for r in db.execute("EXPLAIN " + sql, params).fetchall())
    for table in ("jobs_hot", "scheduled_jobs", "dlq_entries"):
        assert f"Seq Scan on {table}" not in plan, plan


async def test_dump_job_shows_attempts_progress_and_timestamps(client, make_job):
    job_id = make_job("failed", attempt=2, progress={"percent": 40, "message": "halfway"},
                      errors=[{"error": "timeout talking to smtp", "attempt": 1, "at": "t1"},
                              {"error": "bad address", "attempt": 2, "at": "t2",
                               "terminal": True}])
    text = await client.dump_job(job_id)
    for expected in ("state=failed", "attempt 2 of 5", "attempt 1 at t1: timeout talking to smtp",
                     "attempt 2 at t2 [terminal]: bad address", '"message": "halfway"',
                     "created_at", "finalized_at"):
        assert expected in text, text
    with pytest.raises(awa.JobNotFound):
        await client.dump_job(987654)


async def test_dlq_move_list_retry_purge(client, db, make_job):
    ids = [make_job("failed", kind="k", queue="email", run_lease=4,
                    errors=[{"error": "e", "attempt": 1, "at": "t"}]) for _ in range(3)]
    other = make_job("failed", kind="k2", queue="sms")
    entry = await client.move_failed_to_dlq(ids[0], "backfill")
    assert entry.reason == "backfill" and entry.job.id == ids[0] and entry.original_run_lease == 4
    assert await client.move_failed_to_dlq(ids[0], "again") is None
    with pytest.raises(awa.ValidationError, match="--all"):
        await client.bulk_move_failed_to_dlq()
    assert await client.bulk_move_failed_to_dlq(queue="email") == 2
    assert await client.bulk_move_failed_to_dlq(allow_all=True) == 1
    assert await client.dlq_depth() == 4 and await client.dlq_depth(queue="sms") == 1
    assert await client.dlq_depth_by_queue() == [("email", 3), ("sms", 1)]
    listed = await client.list_dlq(queue="email", limit=2)
    assert len(listed) == 2
    page2 = await client.list_dlq(queue="email", before_id=listed[-1].job.id,
                                  before_dlq_at=listed[-1].dlq_at)
    assert {e.job.id for e in listed + page2} == set(ids)
    assert (await client.get_dlq_job(other)).job.kind == "k2"
    assert await client.get_dlq_job(ids[0] + 1000) is None
    # dump finds DLQ jobs too
    assert "in the DLQ since" in await client.dump_job(ids[0])

    job = await client.retry_from_dlq(ids[0], priority=1)
    assert job.state == awa.JobState.Available and job.attempt == 0 and job.priority == 1
    assert job.run_lease == 4 and job.errors  # lease stays monotonic, history kept
    later = await client.retry_from_dlq(ids[1], run_at=datetime.now(UTC)
                                        + timedelta(hours=1), queue="email-retry")
    assert later.state == awa.JobState.Scheduled and later.queue == "email-retry"
    assert await client.retry_from_dlq(ids[1]) is None

    with pytest.raises(awa.ValidationError, match="without a filter") as info:
        await client.purge_dlq()
    assert "\n" not in str(info.value)
    with pytest.raises(awa.ValidationError, match="without a filter"):
        await client.bulk_retry_from_dlq()
    assert await client.dlq_depth() == 2  # nothing was purged
    assert await client.bulk_retry_from_dlq(kind="k") == 1
    assert await client.purge_dlq_job(other) is True
    assert await client.purge_dlq_job(other) is False
    make_job("failed", kind="z", queue="z")
    await client.bulk_move_failed_to_dlq(kind="z")
    assert await client.purge_dlq(kind="nope") == 0
    assert await client.purge_dlq(allow_all=True) == 1
    assert await client.dlq_depth() == 0


async def test_cancel_by_unique_key(client, db):
    job = await client.insert(SendEmail("u"), queue="q", unique_opts={"by_queue": True})
    cancelled = await client.cancel_by_unique_key("send_email", queue="q",
                                                  args=SendEmail("u"))
    assert cancelled.id == job.id and cancelled.state == awa.JobState.Cancelled
    assert await client.cancel_by_unique_key("send_email", args=SendEmail("u")) is None
