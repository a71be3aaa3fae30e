"""The runtime with its neighbours: listeners that die, snapshots, metrics, callbacks."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from dataclasses import dataclass

import awa
from awa.runtime import cancel_listener

from .conftest import job_row

FAST = {"poll_interval_ms": 100, "heartbeat_interval_ms": 100, "snapshot_interval_ms": 100,
        "run_maintenance": False}


@dataclass
class Ping:
    n: int = 0


async def wait_for(predicate, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


async def test_listener_connections_that_die_are_logged_and_reconnected(client, db, caplog):
    @client.task(Ping)
    async def ping(job):
        while not job.is_cancelled() and job.args.n == 1:
            await asyncio.sleep(0.01)

    caplog.set_level(logging.WARNING, logger="awa.runtime")
    await client.start([("default", 4)], **FAST)
    runtime = client.runtime
    killed = db.execute("SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
                        "WHERE application_name IN ('awa-listener', 'awa-queue-listener') "
                        "AND datname = current_database()"
                        ).fetchone()["n"]
    assert killed == 2  # the queue listener and the cancel listener
    # Jobs still run meanwhile (poll fallback), and both listeners come back.
    job = await client.insert(Ping())
    await wait_for(lambda: job_row(db, job.id)["state"] == "completed")
    await wait_for(lambda: runtime.cancel_listener.listening.is_set()
                   and runtime.listener.connected.is_set(), timeout=5)
    assert any(cancel_listener.TRANSIENT_ERROR in r.getMessage() for r in caplog.records)
    # The re-established cancel listener works.
    looping = await client.insert(Ping(1))
    await wait_for(lambda: any(k[0] == looping.id for k in runtime.in_flight))
    await client.cancel(looping.id)
    await wait_for(lambda: not runtime.in_flight, timeout=2)
    await client.shutdown()
    assert job_row(db, looping.id)["state"] == "cancelled"


async def test_snapshot_row_describes_the_runtime(client, db):
    @client.task(Ping, queue="alpha")
    async def ping(job):
        return None

    await client.start([{"name": "alpha", "max_workers": 3, "rate_limit": (5, 2)}],
                       dlq_enabled_by_default=True, **FAST)
    instance = client.runtime.instance_id
    first = db.execute("SELECT * FROM awa.runtime_instances").fetchone()
    await asyncio.sleep(0.35)
    second = db.execute("SELECT * FROM awa.runtime_instances").fetchone()
    health = await client.health_check()
    await client.shutdown()
    import os
    import socket
    assert first["instance_id"] == instance and first["pid"] == os.getpid()
    assert first["hostname"] == socket.gethostname() and first["version"] == awa.__version__
    assert first["healthy"] and not first["shutting_down"] and first["snapshot_interval_ms"] == 100
    assert second["last_seen_at"] > first["last_seen_at"]
    [q] = first["queues"]
    assert q["queue"] == "alpha" and q["max_workers"] == 3 and q["dlq_enabled"] is True
    assert q["rate_limit"] == {"max_rate": 5.0, "burst": 2}
    assert health.queues["alpha"].capacity == 3 and health.queues["alpha"].in_flight == 0
    apps = db.execute("SELECT DISTINCT application_name FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
    assert ({r["application_name"] for r in apps}
            <= {"awa-worker", "awa-listener", "awa-queue-listener"})


async def test_metrics_endpoint_exports_what_the_runtime_records(client, db):
    @client.task(Ping)
    async def ping(job):
        if job.args.n:
            raise RuntimeError("boom")

    await client.start([("default", 2)], metrics_addr="127.0.0.1:0", **FAST)
    url = client.runtime.metrics_endpoint.url
    ok = await client.insert(Ping(0))
    bad = await client.insert(Ping(1), max_attempts=1)
    await wait_for(lambda: job_row(db, ok.id)["state"] == "completed"
                   and job_row(db, bad.id)["state"] == "failed")
    await client.runtime.completion.drain(2)
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read().decode())
    await client.shutdown()
    wanted = ['awa_job_completed_total{awa_job_kind="ping",awa_job_queue="default"}',
              'awa_job_claimed_total{awa_job_kind="ping",awa_job_queue="default"}',
              'awa_job_duration_seconds_count{awa_job_kind="ping",awa_job_queue="default"}',
              "awa_dispatch_claim_batches_total", "awa_completion_flushes_total"]
    for name in wanted:
        assert name in body, name
    assert 'awa_job_terminal="true"' in body


async def test_callback_registration_parks_the_job_and_a_live_handler_resumes(client, db):
    @dataclass
    class Park:
        pass

    @dataclass
    class Await:
        pass

    payloads = []

    @client.task(Park)
    async def park(job):
        token = await job.register_callback(timeout_seconds=60)
        return awa.WaitForCallback(token)

    @client.task(Await)
    async def wait(job):
        token = await job.register_callback(timeout_seconds=60)
        payloads.append(await job.wait_for_callback(token))

    await client.start([("default", 2)], **FAST)
    parked = await client.insert(Park())
    await wait_for(lambda: job_row(db, parked.id)["state"] == "waiting_external")
    callback_id = str(job_row(db, parked.id)["callback_id"])
    done = await client.complete_external(callback_id, {"ok": True})
    assert done.state == awa.JobState.Completed

    live = await client.insert(Await())
    await wait_for(lambda: job_row(db, live.id)["state"] == "waiting_external")
    await client.resume_external(str(job_row(db, live.id)["callback_id"]), {"answer": 42})
    await wait_for(lambda: job_row(db, live.id)["state"] == "completed")
    await client.shutdown()
    assert payloads == [{"answer": 42}]
