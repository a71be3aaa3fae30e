"""Worker throughput, pickup latency and CPU per job (issue 3).

    .venv/bin/python benchmarks/throughput.py                    # N=20000, W=16,64,256
    .venv/bin/python benchmarks/throughput.py --jobs 20000 --workers 16,64,256 --profile 64
    .venv/bin/python benchmarks/throughput.py --engines canonical,queue_storage --workers 64,256
    .venv/bin/python benchmarks/throughput.py --engines canonical,queue_storage --workers 256 \
        --repeat 6 --contend disk                                # on a machine a neighbour shares
    (or: python3 dev.py bench benchmarks/throughput.py ...)

For each W a fresh worker *process* runs one queue with max_workers=W and a
no-op async handler; this process enqueues N jobs with COPY (batches of
1000) while the worker is already claiming, and reports:

* enqueue jobs/s  -- N / time the COPY batches took (alongside the workers);
* processed jobs/s -- N / (last job finalized - first enqueue started);
* CPU per job     -- user+sys CPU of the worker process / N;
* server CPU/job  -- CPU of the whole PostgreSQL server over the run / N, when
  the server runs on this machine (``-`` otherwise), less the driver's own
  connection (its row counts): the database's share of the cost, which the
  worker's CPU does not show;
* pickup latency  -- single jobs inserted into the idle worker, one at a time:
  attempted_at - created_at (both from the database clock, reported by the
  worker's handler), p50/p95;
* with ``--profile W``: the worker's top functions (cProfile) for that run.

Every run gets a fresh database on the server of AWA_TEST_DATABASE_URL /
DATABASE_URL (else 127.0.0.1:5432), laid out for its engine (``--engines``,
default the default engine; several engines alternate within each W, same
run, the order flipping every round), and dropped at the end.  With
``--repeat`` > 1 it ends with the medians over the rounds and, round by round, each
engine's processed/s against the first engine's.  Rows are read
through the ``awa.jobs`` view, so every engine is measured the same way.
Maintenance is off in the worker.  ``--contend cpu`` keeps one core busy for the
whole series, ``--contend disk`` keeps the disk flushing (256 MiB written and fsynced
again and again): how each engine holds up on a server it shares.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import cast

import _support
import psycopg

import awa

QUEUE = "bench"
KIND = "noop"
COPY_BATCH = 1_000
# How many jobs the worker process is to run: it says HANDLED once its handler has run
# that many, so the driver counts finished rows once or twice instead of polling.
EXPECT_ENV = "AWA_BENCH_EXPECT"
# A pickup probe job carries this arg; its handler prints PICKUP_LINE and the latency,
# so the driver reads the latency off the worker instead of polling the database for it.
PICKUP_ARG = "pickup"
PICKUP_LINE = "PICKUP"


# --- the worker process -----------------------------------------------------------
async def worker_main(url: str, workers: int, claim_batch: int, profile: str | None,
                      claimers: int | None = None) -> None:
    import cProfile
    import resource

    client = awa.AsyncClient(url)

    expect = int(os.environ.get(EXPECT_ENV, "0"))
    handled = 0

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def noop(job):
        nonlocal handled
        if job.args.get(PICKUP_ARG):  # a pickup probe: the driver waits for this line
            pickup_s = (job.attempted_at - job.created_at).total_seconds()
            print(f"{PICKUP_LINE} {1000 * pickup_s}", flush=True)
            return
        handled += 1
        if handled == expect:
            print("HANDLED", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    queue = {"name": QUEUE, "max_workers": workers, "claim_batch_size": claim_batch}
    if claimers:
        queue["claimers"] = claimers
    await client.start([queue],
                       run_maintenance=False, heartbeat_interval_ms=5_000,
                       snapshot_interval_ms=10_000)
    profiler = cProfile.Profile() if profile else None
    # The parent says when the measured phase starts and ends (SIGUSR1), so
    # the CPU and profile cover exactly the run.
    phase = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, phase.set)
    print("READY", flush=True)
    await phase.wait()
    phase.clear()
    before = resource.getrusage(resource.RUSAGE_SELF)
    if profiler:
        profiler.enable()
    await phase.wait()
    if profiler:
        profiler.disable()
        profiler.dump_stats(cast(str, profile))  # a profiler exists only for a --profile path
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"cpu_s": cpu}), flush=True)
    await stop.wait()
    await client.shutdown(2_000)
    await client.close()


# --- the driver ---------------------------------------------------------------------
def worker_says(proc: subprocess.Popen, word: str) -> str:
    """The worker process's next line, which must start with ``word``; what follows it.
    Anything else (an exit, a traceback) ends the benchmark with that line."""
    assert proc.stdout is not None  # stdout=PIPE
    line = proc.stdout.readline()
    if not line.startswith(word):
        raise SystemExit(f"the worker process did not say {word} "
                         f"(exit status {proc.poll()}): {line!r}")
    return line[len(word):].strip()


def spawn_worker(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """A worker process, returned once it says READY (its queue is being claimed)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    worker_says(proc, "READY")
    return proc


def start_worker(url: str, workers: int, claim_batch: int, profile: str | None):
    args = [sys.executable, __file__, "--worker-process", url, str(workers), str(claim_batch)]
    if profile:
        args.append(profile)
    return spawn_worker(args)


def count_done(conn) -> int:
    return conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()[0]


async def enqueue_all(url: str, n: int) -> float:
    client = awa.AsyncClient(url)
    started = time.perf_counter()
    for offset in range(0, n, COPY_BATCH):
        await client.enqueue_many_copy(
            [{"i": i} for i in range(offset, min(offset + COPY_BATCH, n))], kind=KIND, queue=QUEUE)
    took = time.perf_counter() - started
    await client.close()
    return took


def run_throughput(engine: str | None, n: int, workers: int, claim_batch: int,
                   profile: str | None) -> dict:
    with _support.scratch_database("awa_bench_tp", engine) as url, \
            psycopg.connect(url, autocommit=True) as conn:
        os.environ[EXPECT_ENV] = str(n)  # read by the worker process it starts
        proc = start_worker(url, workers, claim_batch, profile)
        server = _support.ServerCpu(conn)
        try:
            server_before = server.read()
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.1)
            started = time.perf_counter()
            enqueue_s = asyncio.run(enqueue_all(url, n))
            # The worker says when its handler has run every job; only then are the
            # finished rows counted (their completions are a flush away).  Counting is
            # O(completed) on both engines: polled all along, even at 10 Hz, it took
            # CPU from the system under test -- and more on one engine than the other.
            # The rate comes from the rows' own timestamps below, not from this wait.
            worker_says(proc, "HANDLED")
            while count_done(conn) < n:
                if proc.poll() is not None:
                    raise SystemExit(f"the worker process died ({proc.returncode})")
                time.sleep(0.02)
            wall = time.perf_counter() - started
            span = conn.execute(  # type: ignore[index]  # an aggregate: one row
                "SELECT extract(epoch FROM max(finalized_at) - min(created_at)) "
                "FROM awa.jobs").fetchone()[0]
            proc.send_signal(signal.SIGUSR1)
            server_after = server.read()
            cpu = json.loads(proc.stdout.readline())["cpu_s"]
            latencies = asyncio.run(pickup_latencies(url, proc))
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        finally:  # a run that failed midway leaves no worker behind (it waits for a signal)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        attempts = conn.execute(  # type: ignore[index]  # an aggregate: one row
            "SELECT max(attempt) FROM awa.jobs").fetchone()[0]
    return {"workers": workers, "jobs": n, "enqueue_per_s": n / enqueue_s,
            "processed_per_s": n / float(span), "wall_s": wall, "cpu_ms_per_job": 1000 * cpu / n,
            "server_cpu_ms_per_job": (None if server_before is None or server_after is None
                                      else 1000 * (server_after - server_before) / n),
            "pickup_p50_ms": _support.percentile(latencies, 50),
            "pickup_p95_ms": _support.percentile(latencies, 95),
            "max_attempt": attempts}


async def pickup_latencies(url: str, proc: subprocess.Popen, samples: int = 100) -> list[float]:
    """Single jobs into the idle worker, one at a time, inserted through the client; the
    worker's handler reports attempted_at - created_at (both from the database clock).
    Nothing polls the database meanwhile: a lookup through awa.jobs every millisecond
    took server CPU from the very wake-up and claim it was timing (more on queue storage,
    whose view lookup costs more), on a machine of two cores."""
    out = []
    async with awa.AsyncClient(url) as client:
        for _ in range(samples):
            await client.insert({PICKUP_ARG: True}, kind=KIND, queue=QUEUE)
            out.append(float(await asyncio.to_thread(worker_says, proc, PICKUP_LINE)))
            await asyncio.sleep(0.02)
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_profile(path: str, top: int = 25) -> None:
    import pstats
    stats = pstats.Stats(path)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker-process":
        url, workers, claim_batch = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        profile = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] != "-" else None
        claimers = int(os.environ.get("AWA_BENCH_CLAIMERS", "0")) or None
        asyncio.run(worker_main(url, workers, claim_batch, profile, claimers))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", default="16,64,256")
    parser.add_argument("--claim-batch", type=int, default=awa.config.CLAIM_BATCH_SIZE)
    parser.add_argument("--profile", type=int, default=None, metavar="W",
                        help="profile the worker process during the W run")
    parser.add_argument("--engines", default=awa.config.DEFAULT_STORAGE_ENGINE,
                        help="comma-separated storage engines, alternated within each W")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of the engine alternation per W")
    parser.add_argument("--contend", choices=sorted(_support.COMPETING_LOADS),
                        help="a neighbour competing for the machine throughout: one busy "
                             "core, or a disk kept flushing")
    args = parser.parse_args()
    print(f"N={args.jobs} no-op async jobs, one worker process, claim_batch_size="
          f"{args.claim_batch}, COPY enqueue alongside; machine: {os.cpu_count()} cores "
          f"(shared with other work while measuring; load {os.getloadavg()[0]:.1f})"
          + (f"; competing load: {args.contend}" if args.contend else ""))
    with _support.competing_load(args.contend):
        run_series(args)


def run_series(args: argparse.Namespace) -> None:
    """Every W and engine of the run, alternated, then the medians (``--repeat``)."""
    print(f"{'engine':>14} {'W':>5} {'enqueue/s':>10} {'processed/s':>12} {'CPU ms/job':>11} "
          f"{'server ms/job':>14} {'pickup p50':>11} {'pickup p95':>11}")
    results: dict[tuple[int, str], list[dict]] = {}
    for w, engine in _support.alternation(args.workers, args.repeat, args.engines):
        profile_path = (f"/tmp/awa-throughput-{engine}-W{w}.prof"
                        if args.profile == w else None)
        r = run_throughput(engine, args.jobs, w, args.claim_batch, profile_path)
        assert r["max_attempt"] == 1, "a job was claimed twice"
        results.setdefault((w, engine), []).append(r)
        print(f"{engine:>14} {w:>5} {r['enqueue_per_s']:>10.0f} "
              f"{r['processed_per_s']:>12.0f} {r['cpu_ms_per_job']:>11.3f} "
              f"{_ms(r['server_cpu_ms_per_job']):>14} "
              f"{r['pickup_p50_ms']:>9.1f}ms {r['pickup_p95_ms']:>9.1f}ms", flush=True)
        if profile_path:
            print(f"\nprofile of the worker process, {engine} W={w} "
                  f"(top functions by own time):")
            print_profile(profile_path)
    if args.repeat > 1:
        print_medians(results, args.engines.split(",")[0])


def print_medians(results: dict[tuple[int, str], list[dict]], baseline: str) -> None:
    """Per W and engine, the medians over the rounds; processed/s also as a share of the
    first engine's median (the comparison the rounds were alternated for), then each other
    engine's processed/s round by round against the first's (``_support.paired_ratio``)."""
    print(f"\nmedians over the rounds\n{'engine':>14} {'W':>5} {'processed/s':>12} "
          f"{'of ' + baseline:>16} {'pickup p50':>11}")
    for (w, engine), runs in results.items():
        rate = statistics.median(r["processed_per_s"] for r in runs)
        base = statistics.median(r["processed_per_s"] for r in results[(w, baseline)])
        pickup = statistics.median(r["pickup_p50_ms"] for r in runs)
        print(f"{engine:>14} {w:>5} {rate:>12.0f} {100 * rate / base:>15.1f}% "
              f"{pickup:>9.1f}ms")
    for (w, engine), runs in results.items():
        if engine != baseline:
            print(f"{engine} / {baseline} processed/s, W={w}, " + _support.paired_ratio(
                [r["processed_per_s"] for r in runs],
                [r["processed_per_s"] for r in results[(w, baseline)]]))


if __name__ == "__main__":
    main()
