"""External callbacks: resolution rate, receiver throughput, resume latency, HTTP worker trips.

    .venv/bin/python benchmarks/callbacks.py --jobs 2000

Creates its own database on the server of AWA_TEST_DATABASE_URL /
DATABASE_URL (else 127.0.0.1:5432), and drops it afterwards.  Measures:

1. ``complete_external`` through the API: sequential and 16 concurrent callers;
2. the HTTP receiver (`awa callbacks serve` as its own process, signed
   requests, 16 concurrent clients): requests/s and latency p50/p95;
3. ``wait_for_callback`` resume latency through a running worker: from the
   ``resume_external`` call to the handler holding the payload, p50/p95;
4. the HTTP worker end to end: jobs POSTed to a local endpoint that calls
   the receiver back; jobs/s from enqueue to the last completion.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _support
import httpx
import psycopg

import awa
from awa import callback_contract
from awa.callback_server import serve_in_thread
from awa.http_worker import HttpWorker, HttpWorkerConfig

SECRET = secrets.token_bytes(32)
FAST: dict[str, Any] = {"poll_interval_ms": 50, "heartbeat_interval_ms": 500,
                        "run_maintenance": False}

PARK_MANY = """
INSERT INTO awa.jobs_hot (kind, queue, state, attempt, run_lease, attempted_at, heartbeat_at,
                          callback_id, callback_timeout_at)
SELECT 'bench', 'bench', 'waiting_external', 1, 1, now(), now(), gen_random_uuid(),
       now() + interval '1 hour'
  FROM generate_series(1, %s)
RETURNING callback_id::text"""


def report(name: str, n: int, elapsed: float, latencies: list[float] | None = None) -> None:
    extra = ""
    if latencies:
        extra = (f"  p50 {_support.percentile(latencies, 50) * 1000:6.1f} ms  "
                 f"p95 {_support.percentile(latencies, 95) * 1000:6.1f} ms")
    print(f"{name:<46} {n:>6}  {elapsed:6.2f} s  {n / elapsed:>8,.0f}/s{extra}", flush=True)


def parked(url: str, n: int) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute(PARK_MANY, (n,)).fetchall()]


async def api_resolutions(url: str, n: int) -> None:
    async with awa.AsyncClient(url) as client:
        ids = parked(url, n)
        started = time.perf_counter()
        for cid in ids:
            await client.complete_external(cid, {"ok": True})
        report("complete_external, sequential", n, time.perf_counter() - started)

        ids = parked(url, n)
        queue: asyncio.Queue[str] = asyncio.Queue()
        for cid in ids:
            queue.put_nowait(cid)

        async def caller() -> None:
            while not queue.empty():
                await client.complete_external(queue.get_nowait(), {"ok": True})
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(16)))
        report("complete_external, 16 concurrent", n, time.perf_counter() - started)


async def receiver_requests(url: str, base: str, n: int) -> None:
    ids = parked(url, n)
    latencies: list[float] = []
    queue: asyncio.Queue[str] = asyncio.Queue()
    for cid in ids:
        queue.put_nowait(cid)
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(limits=limits) as http:
        async def caller() -> None:
            while not queue.empty():
                cid = queue.get_nowait()
                t0 = time.perf_counter()
                r = await http.post(f"{base}/api/callbacks/{cid}/complete",
                                    json={"payload": {"ok": True}},
                                    headers={callback_contract.SIGNATURE_HEADER:
                                             callback_contract.sign(SECRET, cid)})
                latencies.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(16)))
    report("HTTP receiver, signed complete, 16 clients", n, time.perf_counter() - started,
           latencies)


async def resume_latency(url: str, n: int) -> None:
    client = awa.AsyncClient(url)
    tokens: asyncio.Queue[str] = asyncio.Queue()
    observed: dict[str, float] = {}

    @client.task(dict, kind="approval", queue="wait")
    async def approval(job):
        token = await job.register_callback(timeout_seconds=60)
        await tokens.put(token.id)
        await job.wait_for_callback(token)
        observed[token.id] = time.perf_counter()

    await client.start([("wait", 4)], **FAST)
    latencies: list[float] = []
    started = time.perf_counter()
    try:
        for _ in range(n):
            await client.insert({}, kind="approval", queue="wait")
            cid = await tokens.get()
            await asyncio.sleep(0.005)  # let the handler park
            t0 = time.perf_counter()
            await client.resume_external(cid, {"ok": True})
            while cid not in observed:
                await asyncio.sleep(0.0005)
            latencies.append(observed[cid] - t0)
        report("wait_for_callback resume -> handler", n, time.perf_counter() - started,
               latencies)
    finally:
        await client.shutdown()
        await client.close()


class CallingBackEndpoint:
    """Answers 202 at once, then calls the receiver back (as a serverless function would)."""

    def __init__(self) -> None:
        self.http: httpx.AsyncClient | None = None
        self.pending: set[asyncio.Task] = set()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body = json.loads(await _support.read_body(receive))
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        task = asyncio.create_task(self.call_back(body))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def call_back(self, body: dict) -> None:
        if self.http is None:
            self.http = httpx.AsyncClient(limits=httpx.Limits(max_connections=32))
        await self.http.post(body["callback_url"], json={"payload": {"done": True}},
                             headers={callback_contract.SIGNATURE_HEADER:
                                      body["callback_signature"]})


async def http_worker_round_trips(url: str, receiver: str, endpoint: str, n: int) -> None:
    client = awa.AsyncClient(url)
    worker = HttpWorker(HttpWorkerConfig(url=endpoint + "/run", callback_base_url=receiver,
                                         secret=SECRET))
    worker.register(client, kind="remote", queue="http")
    await client.start([("http", 32)], **FAST)
    try:
        started = time.perf_counter()
        await client.enqueue_many_copy([{"i": i} for i in range(n)], kind="remote", queue="http")
        with psycopg.connect(url, autocommit=True) as conn:
            while conn.execute(  # type: ignore[index]  # count(*): one row
                    "SELECT count(*) FROM awa.jobs_hot WHERE kind = 'remote' "
                    "AND state = 'completed'").fetchone()[0] < n:
                await asyncio.sleep(0.05)
        report("HTTP worker round trip (32 workers)", n, time.perf_counter() - started)
    finally:
        await client.shutdown()
        await worker.aclose()
        await client.close()


@contextlib.contextmanager
def receiver_process(url: str) -> Iterator[str]:
    """`awa callbacks serve` as its own process, as it would be deployed."""
    port = _support.free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("awa")), "callbacks", "serve", "--listen",
         f"127.0.0.1:{port}", "--secret-env", "AWA_BENCH_SECRET", "--database-url", url],
        env={**os.environ, "AWA_BENCH_SECRET": SECRET.hex()}, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("awa callbacks serve did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--resumes", type=int, default=200)
    args = parser.parse_args()
    # Arranges waiting jobs as canonical rows directly: it times canonical's callback SQL.
    with _support.scratch_database("awa_bench", "canonical") as url:
        asyncio.run(api_resolutions(url, args.jobs))
        asyncio.run(resume_latency(url, args.resumes))
        with receiver_process(url) as receiver:
            asyncio.run(receiver_requests(url, receiver, args.jobs))
            with serve_in_thread(CallingBackEndpoint()) as endpoint:
                asyncio.run(http_worker_round_trips(url, receiver, endpoint, args.jobs))


if __name__ == "__main__":
    main()
