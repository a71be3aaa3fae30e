"""Cancellation, heartbeats under blocking handlers, deadline drop and shutdown."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import awa
from support.polling import eventually
from support.processes import start_worker
from support.server_connections import with_worker_processes

from .conftest import job_row, wait_until

AWA_CLI = Path(sys.executable).with_name("awa")


@pytest.mark.connections(with_worker_processes(1))
def test_cli_cancel_is_seen_within_a_second_and_the_late_finish_is_ignored(
        database_url, db, log_dir):
    worker = start_worker(database_url, "default:2", log_dir=log_dir)
    with awa.Client(database_url) as client:
        job = client.insert({"linger": 0.3}, kind="cancel_aware")
    worker.wait_for_log("start", kind="cancel_aware")
    out = subprocess.run([str(AWA_CLI), "job", "cancel", str(job.id),
                          "--database-url", database_url],
                         capture_output=True, text=True, timeout=30)
    committed = time.monotonic()  # the CLI exits after its cancel committed
    assert out.returncode == 0, out.stderr
    worker.wait_for_log("cancelled", kind="cancel_aware", timeout=5)
    assert time.monotonic() - committed < 1.0
    worker.wait_for_log("done", kind="cancel_aware", timeout=5)
    time.sleep(0.3)  # the late completion has been written (and rejected) by now
    row = job_row(db, job.id)
    assert row["state"] == "cancelled"
    worker.terminate()


async def test_admin_cancel_flips_the_flag_quickly(client, db):
    @dataclass
    class Loop:
        pass

    seen = asyncio.Event()
    finished_late = asyncio.Event()

    @client.task(Loop)
    async def loop_until_cancelled(job):
        while not job.is_cancelled():
            await asyncio.sleep(0.005)
        seen.set()
        await asyncio.sleep(0.1)
        finished_late.set()  # returns normally: completion must be ignored

    await client.start([("default", 1)], poll_interval_ms=50, heartbeat_interval_ms=100,
                       run_maintenance=False)
    job = await client.insert(Loop())
    for _ in range(200):
        if job.id in {k[0] for k in client.runtime.in_flight}:
            break
        await asyncio.sleep(0.01)
    t0 = time.monotonic()
    cancelled = await client.cancel(job.id)
    assert cancelled is not None
    await asyncio.wait_for(seen.wait(), 1.0)
    latency = time.monotonic() - t0
    await asyncio.wait_for(finished_late.wait(), 2.0)
    await client.runtime.completion.drain(2.0)
    await client.shutdown()
    assert latency < 1.0
    assert job_row(db, job.id)["state"] == "cancelled"


@pytest.mark.connections(with_worker_processes(1))
def test_blocking_sync_handler_does_not_delay_other_heartbeats(database_url, db, log_dir):
    worker = start_worker(database_url, "default:4", log_dir=log_dir,
                          settings={"run_maintenance": False})
    with awa.Client(database_url) as client:
        blocker = client.insert({"seconds": 5}, kind="slow_sync")
        other = client.insert({"seconds": 10}, kind="slow")
    worker.wait_for_log("start", kind="slow_sync")
    worker.wait_for_log("start", kind="slow")
    beats = []
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        beats.append(job_row(db, other.id)["heartbeat_at"])
        time.sleep(0.05)
    blocked = job_row(db, blocker.id)
    worker.kill()
    distinct = sorted(set(beats))
    gaps = [(b - a).total_seconds() for a, b in zip(distinct, distinct[1:])]
    # Interval 100 ms: ~25 beats in 2.5 s; never a gap anywhere near the 5 s sleep
    # (the bounds leave room for a loaded machine).
    assert len(distinct) >= 8, distinct
    assert max(gaps) < 1.0, gaps
    assert blocked["state"] == "running"  # its own heartbeat advances too
    assert (blocked["heartbeat_at"] - blocked["attempted_at"]).total_seconds() > 1.5


async def test_a_hung_async_handler_is_dropped_after_its_deadline(client, db):
    @dataclass
    class Hang:
        pass

    @dataclass
    class Quick:
        pass

    cancelled_flag = []

    @client.task(Hang)
    async def hang(job):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled_flag.append(job.is_cancelled())
            raise

    @client.task(Quick)
    async def quick(job):
        return None

    await client.start([{"name": "default", "max_workers": 1, "deadline_duration_ms": 300}],
                       poll_interval_ms=50, heartbeat_interval_ms=100,
                       deadline_drop_grace_ms=200, run_maintenance=False)
    hung = await client.insert(Hang())
    await asyncio.sleep(0.1)
    quick_job = await client.insert(Quick())
    for _ in range(300):
        if job_row(db, quick_job.id)["state"] == "completed":
            break
        await asyncio.sleep(0.01)
    await client.shutdown()
    assert job_row(db, quick_job.id)["state"] == "completed"  # the slot was freed
    assert cancelled_flag == [True]
    # Nothing was written for the dropped attempt: rescue owns it now.
    assert job_row(db, hung.id)["state"] == "running"


async def test_deadline_zero_runs_without_a_deadline(client, db):
    """deadline_duration_ms 0 (awa-pg 0.6.9: no attempt deadline): deadline_at stays NULL,
    the handler outlives the drop grace and several deadline-rescue passes, one attempt."""
    @dataclass
    class Long:
        pass

    seen = []

    @client.task(Long)
    async def long(job):
        seen.append(job_row(db, job.id)["deadline_at"])
        await asyncio.sleep(0.7)

    await client.start([{"name": "default", "max_workers": 1, "deadline_duration_ms": 0}],
                       poll_interval_ms=50, heartbeat_interval_ms=100,
                       deadline_rescue_interval_ms=100, deadline_drop_grace_ms=100)
    job = await client.insert(Long())
    for _ in range(300):
        if job_row(db, job.id)["state"] == "completed":
            break
        await asyncio.sleep(0.01)
    await client.shutdown()
    row = job_row(db, job.id)
    assert (row["state"], row["attempt"]) == ("completed", 1)
    assert seen == [None]


async def test_shutdown_waits_for_handlers_flips_flags_and_leaves_hangs_to_rescue(client, db):
    @dataclass
    class Short:
        pass

    @dataclass
    class Polite:
        pass

    @dataclass
    class Stubborn:
        pass

    @client.task(Short)
    async def short(job):
        await asyncio.sleep(0.3)

    @client.task(Polite)
    async def polite(job):
        while not job.is_cancelled():
            await asyncio.sleep(0.01)
        return awa.RetryAfter(1)

    @client.task(Stubborn)
    async def stubborn(job):
        await asyncio.sleep(3600)

    await client.start([("default", 4)], poll_interval_ms=50, heartbeat_interval_ms=100,
                       run_maintenance=False)
    jobs = [await client.insert(Short()), await client.insert(Polite()),
            await client.insert(Stubborn())]
    for _ in range(200):
        if len(client.runtime.in_flight) == 3:
            break
        await asyncio.sleep(0.01)
    t0 = time.monotonic()
    await client.shutdown(timeout_ms=800)
    took = time.monotonic() - t0
    states = [job_row(db, j.id)["state"] for j in jobs]
    assert states == ["completed", "retryable", "running"]
    assert 0.7 < took < 3.0
    assert (await client.health_check()).healthy is False
    inst = db.execute("SELECT shutting_down FROM awa.runtime_instances").fetchall()
    assert inst == [{"shutting_down": True}]


@pytest.mark.parametrize("where", ["DATABASE_URL", "--database-url"])
def test_awa_worker_command_runs_a_client_and_stops_on_sigterm(database_url, db, tmp_path,
                                                               where):
    """With ``--database-url`` the application's own client names a database this machine
    cannot reach: a client connects when constructed with a URL, but not while
    ``awa worker`` imports the application to re-point it."""
    app = tmp_path / "myapp.py"
    own_url = "" if where == "DATABASE_URL" else "'postgresql://postgres@127.0.0.1:1/elsewhere'"
    app.write_text(
        "import awa\n"
        f"client = awa.AsyncClient({own_url})\n"
        "@client.task(dict, kind='hello', queue='greet')\n"
        "async def hello(job):\n"
        "    job.update_metadata({'pid': __import__('os').getpid()})\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    argv = [str(AWA_CLI), "worker", "myapp:client", "--queue", "greet:3",
            "--metrics-addr", "127.0.0.1:0"]
    if where == "DATABASE_URL":
        env["DATABASE_URL"] = database_url
    else:
        env.pop("DATABASE_URL", None)
        argv += ["--database-url", database_url]
    proc = subprocess.Popen(argv, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with awa.Client(database_url) as client:
            job = client.insert({}, kind="hello", queue="greet")
        wait_until(lambda: job_row(db, job.id)["state"] == "completed", timeout=20,
                   message="the worker command to run the job")
        assert job_row(db, job.id)["metadata"]["pid"] == proc.pid
        inst = db.execute("SELECT queues FROM awa.runtime_instances").fetchone()
        assert inst["queues"][0]["queue"] == "greet" and inst["queues"][0]["max_workers"] == 3
    finally:
        proc.send_signal(15)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert db.execute("SELECT shutting_down FROM awa.runtime_instances").fetchone()[
        "shutting_down"]


def test_awa_worker_exits_on_sigterm_even_with_a_blocked_sync_handler(database_url, db,
                                                                     tmp_path):
    (tmp_path / "stuckapp.py").write_text(
        "import time, awa\n"
        "client = awa.AsyncClient()\n"
        "@client.task(dict, kind='stuck')\n"
        "def stuck(job):\n"
        "    time.sleep(60)\n")
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.Popen([str(AWA_CLI), "worker", "stuckapp:client",
                             "--shutdown-timeout-ms", "300"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with awa.Client(database_url) as client:
            job = client.insert({}, kind="stuck")
        wait_until(lambda: job_row(db, job.id)["state"] == "running", timeout=20,
                   message="the stuck job to start")
        proc.send_signal(15)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "still blocked after shutdown" in err
    assert job_row(db, job.id)["state"] == "running"  # left to rescue


def test_awa_worker_mistakes_are_one_line_errors(database_url, tmp_path):
    (tmp_path / "emptyapp.py").write_text("import awa\nclient = awa.AsyncClient()\n")
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(tmp_path)}
    cases = [
        (["nosuch_module:client"], "error: cannot import 'nosuch_module'"),
        (["emptyapp:nothing"], "has no attribute 'nothing'"),
        (["emptyapp"], "expected MODULE:CLIENT"),
        (["emptyapp:client"], "error: register at least one worker before starting the runtime"),
    ]
    for args, text in cases:
        out = subprocess.run([str(AWA_CLI), "worker", *args], env=env, capture_output=True,
                             text=True, timeout=30)
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and text in lines[0], out.stderr


async def test_a_claim_in_flight_at_shutdown_runs_its_jobs_instead_of_leaving_them_open(
        client, db):
    """The claim statement has committed when shutdown begins, its answer still on the
    way (held here by a delay after the real claim): its jobs run to completion, none is
    left open in the database for rescue to find later."""
    @dataclass
    class Quick:
        n: int

    @client.task(Quick)
    async def quick(job):
        return None

    returned = asyncio.Event()
    claims_seen: list[int] = []
    await client.start([("default", 8)], poll_interval_ms=50, run_maintenance=False)
    engine = client.runtime.engine
    real_claim = engine.claim_batch

    async def slow_answer(*args, **kwargs):
        jobs = await real_claim(*args, **kwargs)
        if jobs:
            claims_seen.append(len(jobs))
            returned.set()
            await asyncio.sleep(0.5)  # committed server-side; the rows not yet handled
        return jobs

    engine_type = type(engine)
    engine.claim_batch = slow_answer  # this runtime's engine object only
    try:
        ids = [(await client.insert(Quick(i))).id for i in range(4)]
        await asyncio.wait_for(returned.wait(), 10)
        await client.shutdown(timeout_ms=3_000)
    finally:
        del engine.claim_batch
    assert engine.claim_batch.__func__ is engine_type.claim_batch  # restored
    states = [job_row(db, i)["state"] for i in ids]
    assert claims_seen and "running" not in states, states
    assert states.count("completed") >= claims_seen[0]


async def test_an_outcome_waiting_longer_than_the_staleness_is_not_rescued(client, db):
    """The handler has finished, its outcome waits for a slow completion write (held here
    by a delay before the real write): the heartbeat keeps the attempt alive meanwhile, so
    rescue does not take it and the job runs once (it ran twice when only running
    handlers were heartbeated)."""
    @dataclass
    class Once:
        n: int

    runs: list[int] = []

    @client.task(Once)
    async def once(job):
        runs.append(job.id)

    await client.start([("default", 2)], poll_interval_ms=50, heartbeat_interval_ms=100,
                       heartbeat_staleness_ms=400, heartbeat_rescue_interval_ms=100,
                       leader_election_interval_ms=100)
    engine = client.runtime.engine
    real_complete = engine.complete_batch
    held = asyncio.Event()

    async def slow_write(*args, **kwargs):
        held.set()
        await asyncio.sleep(1.5)  # well past the staleness, rescue running every 100 ms
        return await real_complete(*args, **kwargs)

    engine.complete_batch = slow_write  # this runtime's engine object only
    try:
        job = await client.insert(Once(1))
        await asyncio.wait_for(held.wait(), 10)
        await eventually(lambda: job_row(db, job.id)["state"] == "completed", timeout=10)
    finally:
        del engine.complete_batch
        await client.shutdown(timeout_ms=3_000)
    row = job_row(db, job.id)
    assert runs == [job.id], runs
    assert (row["state"], row["attempt"]) == ("completed", 1), row
