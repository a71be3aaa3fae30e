"""Queue storage only: a SIGKILLed worker's attempt is rescued once and completed once.

Real worker subprocesses on a queue-storage database.  The first worker never
heartbeats (a bare receipt), so the rescue is the receipt path
(``receipt claim stale: …``); then with heartbeats on (a materialized lease),
the lease path (``heartbeat stale: worker presumed dead``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import psycopg
import pytest

from awa.storage.queue_storage.maintenance import RECEIPT_STALE_ERROR
from support.server_connections import with_worker_processes

pytestmark = pytest.mark.parametrize("engine_name", ["queue_storage"])

WORKER = r"""
import asyncio, json, sys
import awa, awa.storage
from awa.storage import queue_storage
awa.storage.ENGINES.setdefault(queue_storage.NAME, queue_storage.load)

async def main(url, settings):
    client = awa.AsyncClient(url)

    @client.task(dict, kind="slow", queue="default")
    async def slow(job):
        print("start", job.id, job.attempt, flush=True)
        await asyncio.sleep(job.args["seconds"])
        print("done", job.id, job.attempt, flush=True)

    await client.start([("default", 2)], **settings)
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""
FAST = {"heartbeat_staleness_ms": 600, "heartbeat_rescue_interval_ms": 200,
        "promote_interval_ms": 100, "poll_interval_ms": 50}


async def spawn(url: str, settings: dict[str, Any]) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, url, json.dumps(settings),
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 30)).split() == [b"ready"]
    return proc


async def lines_until(proc: asyncio.subprocess.Process, word: bytes,
                      timeout: float = 30) -> list[list[bytes]]:
    assert proc.stdout is not None
    seen = []
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout)).split()
        seen.append(line)
        if line and line[0] == word:
            return seen


async def job_row(aconn: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any]:
    cur = await aconn.execute("SELECT state::text AS state, attempt, errors FROM awa.jobs "
                              "WHERE id = %s", (job_id,))
    row = await cur.fetchone()
    assert row is not None
    return dict(row)


@pytest.mark.parametrize("heartbeat_ms, error", [
    (600_000, RECEIPT_STALE_ERROR), (100, "heartbeat stale: worker presumed dead")],
    ids=["receipt", "lease"])
@pytest.mark.connections(with_worker_processes(1))
@pytest.mark.timeout(90)
async def test_sigkilled_worker_job_is_rescued_and_completed_once(
        engine, engine_url, aconn, heartbeat_ms, error):
    import awa
    first = await spawn(engine_url, {**FAST, "heartbeat_interval_ms": heartbeat_ms,
                                     "run_maintenance": False})
    async with awa.AsyncClient(engine_url) as client:
        job = await client.insert({"seconds": 1.5}, kind="slow")
    await lines_until(first, b"start")
    if heartbeat_ms < 1000:
        await asyncio.sleep(0.4)  # a heartbeat or two: the attempt is a lease now
    first.send_signal(signal.SIGKILL)
    await first.wait()
    second = await spawn(engine_url, {**FAST, "heartbeat_interval_ms": 200})
    try:
        seen = await lines_until(second, b"done", timeout=40)
        assert [line for line in seen if line[0] == b"done"] == [
            [b"done", str(job.id).encode(), b"2"]]
        for _ in range(100):
            row = await job_row(aconn, job.id)
            if row["state"] == "completed":
                break
            await asyncio.sleep(0.05)
        assert row["state"] == "completed" and row["attempt"] == 2
        assert [e["error"] for e in row["errors"]] == [error]
        cur = await aconn.execute("SELECT count(*) AS n FROM awa.done_entries WHERE id = %s",
                                  (job.id,))
        assert (await cur.fetchone())["n"] == 1
    finally:
        second.send_signal(signal.SIGKILL)
        await second.wait()


CHURN_WORKER = r"""
import asyncio, json, sys
import awa, awa.storage
from awa.storage import queue_storage
awa.storage.ENGINES.setdefault(queue_storage.NAME, queue_storage.load)

async def main(url, settings):
    client = awa.AsyncClient(url)

    @client.task(dict, kind="quick", queue="default")
    async def quick(job):
        await asyncio.sleep(0.1)

    await client.start([("default", 16)], **settings)
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""
CHURN_JOBS = 10_000


@pytest.mark.connections(with_worker_processes(4, besides=12))
@pytest.mark.timeout(300)
async def test_ten_thousand_jobs_across_four_processes_with_kills_complete_exactly_once(
        engine, engine_url, aconn):
    import awa
    settings = {**FAST, "heartbeat_interval_ms": 200}

    async def start() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHURN_WORKER, engine_url, json.dumps(settings),
            stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        assert (await asyncio.wait_for(proc.stdout.readline(), 30)).split() == [b"ready"]
        return proc

    workers = [await start() for _ in range(4)]
    async with awa.AsyncClient(engine_url) as client:
        for offset in range(0, CHURN_JOBS, 1_000):
            await client.insert_many([{"i": i} for i in range(offset, offset + 1_000)],
                                     kind="quick", max_attempts=25)
    kills = 0
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 240
        while loop.time() < deadline:
            done = await count_of(aconn, "SELECT count(*) FROM awa.done_entries "
                                         "WHERE state = 'completed'")
            if done >= CHURN_JOBS:
                break
            await asyncio.sleep(2.0)
            if kills < 8:  # a worker SIGKILLed every couple of seconds, and replaced
                victim = workers.pop(kills % len(workers))
                victim.send_signal(signal.SIGKILL)
                await victim.wait()
                kills += 1
                workers.append(await start())
        assert kills >= 3, "the jobs finished before the workers were killed"
        assert await count_of(aconn, "SELECT count(*) FROM awa.done_entries") == CHURN_JOBS
        assert await count_of(aconn, "SELECT count(DISTINCT id) FROM awa.done_entries "
                                     "WHERE state = 'completed'") == CHURN_JOBS
        cur = await aconn.execute("SELECT state::text AS state, count(*) AS n, "
                                  "count(DISTINCT id) AS ids FROM awa.jobs GROUP BY 1")
        assert await cur.fetchall() == [{"state": "completed", "n": CHURN_JOBS,
                                         "ids": CHURN_JOBS}]
        rescued = await count_of(aconn, "SELECT count(*) FROM awa.done_entries "
                                        "WHERE attempt > 1")
        assert rescued > 0, "no attempt was ever cut short by a kill"
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()


async def count_of(aconn: psycopg.AsyncConnection[Any], query: str) -> int:
    cur = await aconn.execute(query)
    row = await cur.fetchone()
    assert row is not None
    return int(next(iter(row.values())))
