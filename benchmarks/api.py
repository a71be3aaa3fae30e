"""`awa serve`'s REST API on a large database: jobs-list latency, and batch set_priority rate
with the claim latency of workers running alongside, on each storage engine.

    .venv/bin/python benchmarks/api.py [--admin-url URL] [--engine all|canonical|queue_storage]
        [--jobs 1000000] [--samples 50] [--batch 100000] [--claim-jobs 150000]
        [--claimers 2] [--claim-size 10] [--claim-pause-ms 20] [--baseline-s 20]
        [--db-name awa_api_bench] [--rebuild]
    .venv/bin/python benchmarks/api.py --batch-only [--pace 0,1] [--repeat 2] [--engine ...]
        [--batch ...] [--claim-jobs ...] [--baseline-s ...]

Builds (once per engine, as benchmarks/ops.py does: mostly completed history, a backlog
of available and scheduled jobs, running, failed, cancelled, DLQ) a database, starts
``awa serve --no-console`` on it and measures:

* ``GET /api/jobs?limit=100``: the first page and page 100 (reached by ``before_id``
  keyset paging), ``--samples`` requests each: p50 / p95.  Target: p50 <= 50 ms.
* a batch ``set_priority`` (4 -> 3) over ``--batch`` backlog jobs of one queue
  (``awa.batch_operations``; the maintenance leader's ticks driven back to back in this process, as
  well as by the fleet's own leader): jobs/s;
* the claim latency of ``--claimers`` workers claiming urgent (priority 1) jobs of that
  same queue throughout -- a claim locks every lane of its queue, the batch's too --
  for ``--baseline-s`` without the batch, then while it runs, then ``--baseline-s``
  after it: p95 during the batch <= 2x the p95 before it (the p95 after it shows what
  the batch left behind).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import _support
import httpx

import awa
import ops
from awa import config
from awa.batch_operations import run_batch_operations
from awa.storage.engine import AttemptWrite

AWA = Path(sys.executable).with_name("awa")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


def time_get(http: httpx.Client, params: dict[str, str],
             samples: int) -> tuple[list[float], list[str]]:
    """Each request's time, and the failures (status and error body): a failed request is
    a finding to report, not the end of the run."""
    out, failed = [], []
    for _ in range(samples):
        started = time.perf_counter()
        r = http.get("/api/jobs", params=params)
        out.append(time.perf_counter() - started)
        if r.status_code != 200:
            failed.append(f"{r.status_code} {r.text[:160]}")
    return out, failed


def report(what: str, timed: tuple[list[float], list[str]]) -> None:
    times, failed = timed
    line = f"GET /api/jobs {what}: {percentiles(times)}"
    if failed:
        line += f"; {len(failed)} of {len(times)} FAILED, e.g. {failed[0]}"
    print(line)


def measure_api(url: str, samples: int) -> None:
    port = free_port()
    proc = subprocess.Popen([str(AWA), "--database-url", url, "serve", "--no-console",
                             "--port", str(port), "--cache-ttl", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    http.get("/api/capabilities").raise_for_status()
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.2)
            report("first page", time_get(http, {"limit": "100"}, samples))
            before = None
            for _ in range(99):
                r = http.get("/api/jobs", params={"limit": "100", **(
                    {"before_id": str(before)} if before else {})})
                if r.status_code != 200:
                    print(f"GET /api/jobs paging to page 100 FAILED: {r.status_code} "
                          f"{r.text[:160]}")
                    before = None
                    break
                page = r.json()
                if not page:
                    break
                before = page[-1]["id"]
            if before is not None:
                report("page 100  ", time_get(http, {"limit": "100", "before_id": str(before)},
                                                samples))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)


BATCH_QUEUE = "api_batch"  # nobody else serves it: the claimers below are its workers
FINISHED = ("completed", "cancelled", "failed")


class Claimers:
    """Workers' claims, as a dispatcher makes them: ``claim_batch`` of ``size`` from the
    batch's queue, then the completion of what it took, ``pause_s`` apart; each claim
    statement is timed into the current phase."""

    def __init__(self, client: awa.AsyncClient, count: int, size: int, pause_s: float) -> None:
        self.client, self.count, self.size, self.pause_s = client, count, size, pause_s
        self.phase = "baseline"
        self.times: dict[str, list[float]] = {}
        self.claimed: dict[str, int] = {}
        self.empty = 0
        self.stop = asyncio.Event()

    async def run_one(self) -> None:
        pool, engine = await self.client._get_pool(), await self.client._get_engine()
        async with pool.connection() as conn:
            await conn.set_autocommit(True)
            while not self.stop.is_set():
                phase = self.phase
                started = time.perf_counter()
                jobs = await engine.claim_batch(conn, BATCH_QUEUE, self.size, 60_000)
                self.times.setdefault(phase, []).append(time.perf_counter() - started)
                self.claimed[phase] = self.claimed.get(phase, 0) + len(jobs)
                if jobs:
                    await engine.complete_batch(conn, [AttemptWrite(j.id, j.run_lease)
                                                       for j in jobs])
                else:
                    self.empty += 1
                await asyncio.sleep(self.pause_s)

    def p95(self, phase: str) -> float:
        ordered = sorted(self.times.get(phase) or [0.0])
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


async def measure_batch(url: str, args: argparse.Namespace,
                        pace: float = config.BATCH_OP_PACE) -> dict[str, float]:
    """``--batch`` low-priority backlog jobs in BATCH_QUEUE, with ``--claim-jobs``
    urgent ones that ``--claimers`` workers claim throughout (claims lock every lane of
    the queue, the batch's among them): their claim latency for ``--baseline-s`` seconds
    without the batch, then while a batch set_priority (its runner resting ``pace`` times
    each step) changes the backlog.  Returns jobs/s and both p95s."""
    client = awa.AsyncClient(url, max_connections=args.claimers + 4)
    try:
        await client.drain_queue(BATCH_QUEUE)  # a previous run's leftovers
        for first in range(0, args.batch, ops.CHUNK):
            n = min(ops.CHUNK, args.batch - first)
            await client.insert_many_copy([{"n": first + i} for i in range(n)],
                                          kind="bench_batch_target", queue=BATCH_QUEUE,
                                          priority=4)
        for first in range(0, args.claim_jobs, ops.CHUNK):
            n = min(ops.CHUNK, args.claim_jobs - first)
            await client.insert_many_copy([{"n": first + i} for i in range(n)],
                                          kind="bench_batch_claim", queue=BATCH_QUEUE,
                                          priority=1)
        claimers = Claimers(client, args.claimers, args.claim_size, args.claim_pause_ms / 1000)
        tasks = [asyncio.create_task(claimers.run_one()) for _ in range(args.claimers)]
        await asyncio.sleep(args.baseline_s)
        flt = {"queue": BATCH_QUEUE, "kind": "bench_batch_target"}
        matched, _ = await client.preview_batch_operation("set_priority", flt, {"priority": 3})
        op = await client.submit_batch_operation("set_priority", flt, {"priority": 3},
                                                 submitted_by="benchmarks/api.py")
        claimers.phase = "batch"
        pool, engine = await client._get_pool(), await client._get_engine()
        started = time.perf_counter()
        # Ticks back to back, until the operation is finished: the fleet's maintenance
        # leader steps it too (whoever holds the operation's row lock; the other skips).
        while (await client.get_batch_operation(op.id)).state not in FINISHED:
            done = await run_batch_operations(pool, engine, runner=uuid.uuid4(),
                                              pace=pace)
            if done["steps"] == 0:
                await asyncio.sleep(0.05)
        took = time.perf_counter() - started
        claimers.phase = "after"
        await asyncio.sleep(args.baseline_s)
        claimers.stop.set()
        await asyncio.gather(*tasks)
        final = await client.get_batch_operation(op.id)
        changed = final.processed + final.skipped
        print(f"batch set_priority: {final.total_matched:,} matched (preview said "
              f"{matched:,}); {final.processed:,} changed, {final.skipped:,} skipped "
              f"in {took:.1f} s: {changed / took:,.0f} jobs/s")
        base, during = claimers.p95("baseline"), claimers.p95("batch")
        after = claimers.p95("after")
        for phase in ("baseline", "batch", "after"):
            times = claimers.times.get(phase) or [0.0]
            print(f"claim of {args.claim_size} from {BATCH_QUEUE} ({phase}): "
                  f"{len(times)} claims, {claimers.claimed.get(phase, 0):,} jobs, "
                  f"{percentiles(times)}")
        verdict = "ok" if during <= 2 * base else "OVER the target"
        print(f"claim p95 during the batch / without it: {during / base if base else 0:.2f}x "
              f"(target <= 2x: {verdict}); empty claims {claimers.empty}")
        print(f"claim p95 after the batch / before it: {after / base if base else 0:.2f}x "
              "(what the batch left behind: on queue storage, the moved entries' tombstones "
              "that every claim's window probes until prune)")
        return {"jobs_s": changed / took, "base_p95": base, "batch_p95": during,
                "after_p95": after}
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default=_support.admin_url())
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--running", type=int, default=500)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--claim-jobs", type=int, default=150_000)
    parser.add_argument("--claimers", type=int, default=2)
    parser.add_argument("--claim-size", type=int, default=10)
    parser.add_argument("--claim-pause-ms", type=float, default=20.0)
    parser.add_argument("--baseline-s", type=float, default=20.0)
    parser.add_argument("--engine", choices=("all", *ops.ENGINES), default="all")
    parser.add_argument("--db-name", default=os.environ.get("AWA_API_BENCH_DB", "awa_api_bench"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--batch-only", action="store_true",
                        help="only the batch phase, each run on a fresh database holding "
                             "nothing but the batch's queue (no fleet, no large database)")
    parser.add_argument("--pace", default=str(config.BATCH_OP_PACE),
                        help="the batch runner's pace values to compare, comma-separated, "
                             "alternated A B B A (--batch-only)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of the --pace alternation (--batch-only)")
    args = parser.parse_args()
    asyncio.run(run_batch_only(args) if args.batch_only else run(args))


async def run(args: argparse.Namespace) -> None:
    """benchmarks/ops.py's database (mostly completed history, a backlog, scheduled, DLQ,
    running) per engine, its fleet kept running while the API and the batch are measured."""
    counts = {"completed": args.jobs * 4 // 5, "available": args.jobs // 5, "queues": 50,
              "scheduled": 2_000, "running": args.running, "dlq": 2_000}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for engine in ops.ENGINES if args.engine == "all" else (args.engine,):
        url, fleet = await ops.start_fleet(args.admin_url, engine, counts, args.rebuild,
                                           args.db_name)
        try:
            print(f"[{engine}]")
            await asyncio.to_thread(measure_api, url, args.samples)
            await measure_batch(url, args)
        finally:
            await fleet.shutdown()
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


async def run_batch_only(args: argparse.Namespace) -> None:
    """The batch phase alone, ``--pace`` values alternated A B B A, each run on a fresh
    database (so no run inherits another's history); per pace: medians of jobs/s and of
    the p95 ratio."""
    paces = [float(p) for p in args.pace.split(",")]
    for engine in ops.ENGINES if args.engine == "all" else (args.engine,):
        results: dict[float, list[dict[str, float]]] = {p: [] for p in paces}
        for r in range(args.repeat):
            for pace in (paces if r % 2 == 0 else paces[::-1]):
                print(f"[{engine}] pace {pace:g}, round {r + 1}; load "
                      f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
                with _support.scratch_database("awa_api_batch", engine) as url:
                    results[pace].append(await measure_batch(url, args, pace))
        print(f"[{engine}] summary (medians of {args.repeat}):")
        for pace, runs in results.items():
            ratios = [x["batch_p95"] / x["base_p95"] for x in runs if x["base_p95"]]
            print(f"  pace {pace:g}: {statistics.median(x['jobs_s'] for x in runs):,.0f} jobs/s;"
                  f" claim p95 {statistics.median(x['base_p95'] for x in runs) * 1000:.1f} ->"
                  f" {statistics.median(x['batch_p95'] for x in runs) * 1000:.1f} ms;"
                  f" ratio {statistics.median(ratios):.2f}x"
                  f" (rounds: {', '.join(f'{x:.2f}' for x in ratios)});"
                  f" after it {statistics.median(x['after_p95'] for x in runs) * 1000:.1f} ms")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
