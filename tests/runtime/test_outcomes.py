"""Each handler outcome's state, attempt, run_at and errors (docs/architecture.md §4)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

import awa
from awa import lifecycle
from support.polling import eventually
from support.rows import dlq_entry

from .conftest import job_row

FAST = {"poll_interval_ms": 50, "heartbeat_interval_ms": 100, "run_maintenance": False}


@dataclass
class Work:
    n: int = 0


async def dead_lettered(db, job_id):
    """The job's DLQ entry, once the runtime has moved it there."""
    return await eventually(lambda: dlq_entry(db, job_id), timeout=4.0, interval=0.02,
                            message=f"job {job_id} in the DLQ")


async def run_until_settled(client, db, job_ids, states, timeout=10.0):
    """Wait until every job is in one of ``states``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        rows = [job_row(db, i) for i in job_ids]
        if all(r is not None and r["state"] in states for r in rows):
            return rows
        if loop.time() > deadline:
            raise AssertionError(f"not settled: {[(r['id'], r['state']) for r in rows if r]}")
        await asyncio.sleep(0.02)


async def test_completed_with_progress_and_metadata(client, db):
    mid_run = []

    @client.task(Work)
    async def work(job):
        job.set_progress(10, "started")
        await job.flush_progress()  # durable now, not at the next heartbeat
        mid_run.append(job_row(db, job.id)["progress"])
        job.set_progress(40, "almost")
        job.update_metadata({"seen": job.args.n})
        return "ignored value"

    await client.start([("default", 2)], **{**FAST, "heartbeat_interval_ms": 60_000})
    job = await client.insert(Work(7))
    [row] = await run_until_settled(client, db, [job.id], {"completed"})
    await client.shutdown()
    assert mid_run[0]["percent"] == 10 and mid_run[0]["message"] == "started"
    assert row["attempt"] == 1 and row["finalized_at"] is not None
    assert row["progress"] is None  # completion clears the progress (awa-pg 0.6.9)
    assert row["metadata"]["seen"] == 7
    assert not row["errors"]


async def test_exception_retries_with_backoff_and_records_each_attempt(client, db):
    @client.task(Work)
    async def work(job):
        job.set_progress(30, "got a third of the way")
        raise ValueError(f"bad {job.attempt}")

    await client.start([("default", 2)], **FAST)
    job = await client.insert(Work(), max_attempts=3)
    [row] = await run_until_settled(client, db, [job.id], {"retryable"})
    await client.shutdown()
    assert row["attempt"] == 1
    assert row["progress"]["percent"] == 30  # kept across retries
    assert len(row["errors"]) == 1
    err = row["errors"][0]
    assert err["error"] == "ValueError: bad 1" and err["attempt"] == 1
    assert "raise ValueError" in err["traceback"] and "awa/runtime" not in err["traceback"]
    # 2^1 s plus up to 25 % jitter after the attempt.
    delay = (row["run_at"] - row["attempted_at"]).total_seconds()
    assert 1.9 <= delay <= 2.6
    assert db.execute("SELECT count(*) AS n FROM awa.jobs "
                      "WHERE state IN ('scheduled', 'retryable') AND id = %s",
                      (job.id,)).fetchone()["n"] == 1


async def test_exhausted_attempts_fail_or_go_to_the_dlq(client, db):
    @client.task(Work)
    async def work(job):
        raise RuntimeError("poison")

    await client.start([("default", 2), {"name": "dlq", "max_workers": 2, "dlq_enabled": True}],
                       **FAST)
    plain = await client.insert(Work(), max_attempts=1)
    dead = await client.insert(Work(), queue="dlq", max_attempts=1)
    [row] = await run_until_settled(client, db, [plain.id], {"failed"})
    entry = await dead_lettered(db, dead.id)
    await client.shutdown()
    assert row["attempt"] == 1 and row["errors"][-1]["error"] == "RuntimeError: poison"
    assert entry["dlq_reason"] == lifecycle.DLQ_MAX_ATTEMPTS
    assert entry["state"] == "failed" and entry["original_run_lease"] == 1
    assert entry["errors"][-1]["error"] == "RuntimeError: poison"
    assert job_row(db, dead.id) is None


async def test_terminal_error_bad_args_and_unknown_kind_fail_at_once(client, db) -> None:
    @dataclass
    class Strict:
        needed: int

    @client.task(Work)
    async def work(job):
        raise awa.TerminalError("never works")

    @client.task(Strict)
    async def strict(job):
        return None

    await client.start([("default", 4)], dlq_enabled_by_default=False, **FAST)
    terminal = await client.insert(Work())
    bad_args = await client.insert({"other": 1}, kind="strict")
    unknown = await client.insert({}, kind="nobody_handles_this")
    rows = await run_until_settled(client, db, [terminal.id, bad_args.id, unknown.id],
                                   {"failed"})
    await client.shutdown()
    for row in rows:
        assert row["attempt"] == 1 and row["max_attempts"] == 25
        assert row["errors"][-1]["terminal"] is True
    assert rows[0]["errors"][-1]["error"] == "TerminalError: never works"
    assert rows[1]["errors"][-1]["error"].startswith("cannot build Strict from job args")
    assert rows[2]["errors"][-1]["error"] == "unknown job kind: nobody_handles_this"


async def test_args_are_the_handlers_type_whoever_reads_them_and_when(client, db) -> None:
    """Args are parsed on their first read (issue 48): a handler that never reads them
    completes; a sync handler (on a worker thread), an async one and a hook that reads them
    get the handler's type, a dict handler the stored object."""
    @dataclass
    class Needed:
        to: str
        cc: list[str] = field(default_factory=list)

    seen: dict[str, object] = {}

    @client.task(Work, kind="never_reads")
    async def never_reads(job):
        return None

    @client.task(Needed)
    def needed(job):  # sync: runs on a handler thread
        seen["sync"] = job.args

    @client.task(dict, kind="as_dict")
    async def as_dict(job):
        seen["dict"] = job.args

    client.on_event(lambda e: seen.setdefault("hook", e.job.args), kind="needed",
                    events=["started"])
    await client.start([("default", 4)], **FAST)
    ids = [(await client.insert(Work(5), kind="never_reads")).id,
           (await client.insert(Needed("a@b", ["c@d"]))).id,
           (await client.insert({"x": [1, {"y": None}]}, kind="as_dict")).id]
    rows = await run_until_settled(client, db, ids, {"completed"})
    await client.shutdown()
    assert all(r["state"] == "completed" for r in rows)
    assert seen["sync"] == Needed("a@b", ["c@d"]) and seen["hook"] == seen["sync"]
    assert seen["dict"] == {"x": [1, {"y": None}]}


async def test_terminal_error_goes_to_the_dlq_with_its_reason(client, db):
    @client.task(Work)
    async def work(job):
        raise awa.TerminalError("nope")

    await client.start([("default", 2)], dlq_enabled_by_default=True, **FAST)
    job = await client.insert(Work())
    entry = await dead_lettered(db, job.id)
    await client.shutdown()
    assert entry["dlq_reason"] == lifecycle.DLQ_TERMINAL_ERROR


async def test_retry_after_spends_the_attempt_and_exhausts(client, db):
    @client.task(Work)
    async def work(job):
        return awa.RetryAfter(0.05 if job.args.n else 30)

    # Maintenance promotes the short retries back to available.
    await client.start([("default", 2), {"name": "dlq", "max_workers": 1, "dlq_enabled": True}],
                       **{**FAST, "run_maintenance": True, "promote_interval_ms": 50,
                          "leader_election_interval_ms": 100})
    later = await client.insert(Work(0), max_attempts=5)
    [row] = await run_until_settled(client, db, [later.id], {"retryable"})
    delay = (row["run_at"] - row["attempted_at"]).total_seconds()
    assert row["attempt"] == 1 and 29 <= delay <= 31 and not row["errors"]
    # Short retries spend every attempt, then the job fails (or is dead-lettered).
    last = await client.insert(Work(1), max_attempts=2)
    dead = await client.insert(Work(1), queue="dlq", max_attempts=2)
    await run_until_settled(client, db, [last.id], {"failed"})
    entry = await dead_lettered(db, dead.id)
    row = job_row(db, last.id)
    await client.shutdown()
    assert row["state"] == "failed" and row["attempt"] == 2
    assert "last attempt" in row["errors"][-1]["error"]
    assert entry["dlq_reason"] == lifecycle.DLQ_MAX_ATTEMPTS and entry["attempt"] == 2


async def test_snooze_does_not_spend_an_attempt(client, db):
    @client.task(Work)
    async def work(job):
        return awa.Snooze(60)

    await client.start([("default", 2)], **FAST)
    job = await client.insert(Work(), max_attempts=1)
    [row] = await run_until_settled(client, db, [job.id], {"scheduled"})
    await client.shutdown()
    assert row["attempt"] == 0 and row["run_lease"] == 1 and not row["errors"]
    assert timedelta(seconds=59) <= row["run_at"] - row["attempted_at"] <= timedelta(seconds=61)


async def test_cancel_result_ends_the_job_cancelled(client, db):
    @client.task(Work)
    async def work(job):
        return awa.Cancel("not needed any more")

    await client.start([("default", 2)], **FAST)
    job = await client.insert(Work())
    [row] = await run_until_settled(client, db, [job.id], {"cancelled"})
    await client.shutdown()
    assert row["finalized_at"] is not None
    assert "not needed any more" in row["errors"][-1]["error"]


async def test_lifecycle_hooks_fire_after_commit_and_a_raising_hook_changes_nothing(client, db):
    @client.task(Work)
    async def work(job):
        if job.args.n == 1:
            raise RuntimeError("x")

    seen = []

    def boom(event):
        raise RuntimeError("hook bug")

    async def async_hook(event):
        seen.append(("async", event.event, event.job.id))

    client.on_event(boom)
    client.on_event(lambda e: seen.append((e.event, e.job.id, e.job.state.value)), kind="work")
    client.on_event(async_hook, events=["completed"])
    await client.start([("default", 2)], **FAST)
    ok = await client.insert(Work(0))
    bad = await client.insert(Work(1), max_attempts=2)
    await run_until_settled(client, db, [ok.id], {"completed"})
    await run_until_settled(client, db, [bad.id], {"retryable"})
    await asyncio.sleep(0.1)
    await client.shutdown()
    assert ("started", ok.id, "running") in seen
    assert ("completed", ok.id, "completed") in seen
    assert ("retried", bad.id, "retryable") in seen
    assert ("async", "completed", ok.id) in seen


async def test_start_errors_are_one_line(client, test_engine):
    with pytest.raises(awa.ValidationError, match="^register at least one worker before "
                                                  "starting the runtime$"):
        await client.start([("default", 1)])

    @client.task(Work)
    async def work(job):
        return None

    with pytest.raises(awa.ValidationError, match=r"^weighted mode requires explicit queue "
                                                  r"configs \(global_max_workers set but "
                                                  r"queues=None\)$"):
        await client.start(global_max_workers=4)
    for bad, text in [
        ([("default", 0)], "max_workers must be a positive integer"),
        ([{"name": "q", "max_workers": 1, "min_workers": 1}], "not both"),
        ([{"name": "q", "max_workers": 1, "rate_limit": (0, 1)}], "rate_limit"),
        ([{"name": "q", "max_workers": 1, "colour": "red"}], "unknown option"),
        ([("x" * 70, 1)], "longer than"),
    ]:
        with pytest.raises(awa.ValidationError, match=text) as info:
            await client.start(bad)
        assert "\n" not in str(info.value)
    with pytest.raises(awa.ValidationError, match="heartbeat_interval_ms"):
        await client.start([("default", 1)], heartbeat_interval_ms=-5)
    with pytest.raises(awa.ValidationError, match=r"batch_operations_pace must be a number "
                                                  r">= 0 .*, got -1$"):
        await client.start([("default", 1)], batch_operations_pace=-1)
    with pytest.raises(awa.ValidationError, match="batch_operations_pace must be a number"):
        await client.start([("default", 1)], batch_operations_pace=float("inf"))
    with pytest.raises(awa.ValidationError, match="identifier"):
        await client.start([("default", 1)], queue_storage_schema="Bad Name")
    # Storage-transition arguments are accepted (the schema is the database's own).
    schema = "awa" if test_engine == "queue_storage" else "anything"
    await client.start([("default", 1)], queue_storage_schema=schema,
                       storage_transition_role="auto", terminal_count_rollup_interval_ms=5,
                       **FAST)
    health = await client.health_check()
    await client.shutdown()
    assert health.healthy and health.queues["default"].max_workers == 1


@pytest.mark.engine("queue_storage")
async def test_start_refuses_a_queue_storage_schema_the_database_does_not_use(client):
    @client.task(Work)
    async def work(job):
        return None

    with pytest.raises(awa.ValidationError, match="queue storage is in schema 'awa': pass "
                                                  "'awa' or leave it out$") as info:
        await client.start([("default", 1)], queue_storage_schema="awa_qs", **FAST)
    assert "\n" not in str(info.value) and client.runtime is None


async def test_start_on_an_unmigrated_database_fails_with_the_fix(empty_database_url):
    client = awa.AsyncClient(empty_database_url)

    @client.task(Work)
    async def work(job):
        return None

    with pytest.raises(awa.SchemaNotMigrated, match="awa migrate"):
        await client.start([("default", 1)])
    assert client.runtime is None
    await client.close()


async def test_start_with_a_taken_metrics_port_fails_cleanly(client, db):
    import socket

    @client.task(Work)
    async def work(job):
        return None

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(awa.AwaError, match="cannot serve metrics") as info:
            await client.start([("default", 1)], metrics_addr=f"127.0.0.1:{port}", **FAST)
    assert "\n" not in str(info.value) and client.runtime is None
    # Nothing was left running: the client can start again.
    await client.start([("default", 1)], **FAST)
    await client.shutdown()


async def test_paused_queue_is_not_claimed_until_resumed(client, db):
    @client.task(Work)
    async def work(job):
        return None

    await client.pause_queue("default")
    await client.start([("default", 2)], **FAST)
    job = await client.insert(Work())
    await asyncio.sleep(0.4)  # several poll intervals and the insert's NOTIFY
    assert job_row(db, job.id)["state"] == "available"
    await client.resume_queue("default")
    await run_until_settled(client, db, [job.id], {"completed"}, timeout=5)
    await client.shutdown()


async def test_a_retry_colliding_with_a_newer_unique_job_cancels_the_superseded_attempt(
        client, db):
    """The unique-claim wedge: the mask excludes running, so a duplicate was
    enqueued meanwhile; the first attempt's retry would take the key back."""
    release = asyncio.Event()

    @client.task(Work)
    async def work(job):
        if job.args.n == 1:
            await release.wait()
            raise RuntimeError("retry me")

    opts = {"states": ["available", "retryable", "scheduled"]}
    await client.start([("default", 2)], **FAST)
    first = await client.insert(Work(1), unique_opts=opts, max_attempts=3)
    await run_until_settled(client, db, [first.id], {"running"})
    await client.pause_queue("default")  # the newer holder stays available
    second = await client.insert(Work(1), unique_opts=opts)
    release.set()
    [row] = await run_until_settled(client, db, [first.id], {"cancelled"})
    await client.shutdown()
    assert row["errors"][-1]["error"] == lifecycle.RESCUED_AS_DUPLICATE
    assert job_row(db, second.id)["state"] == "available"
