"""Worker throughput, pickup latency and CPU per job (issue 3).

    .venv/bin/python benchmarks/throughput.py                    # N=20000, W=16,64,256
    .venv/bin/python benchmarks/throughput.py --jobs 20000 --workers 16,64,256 --profile 64
    .venv/bin/python benchmarks/throughput.py --engines canonical,queue_storage --workers 64,256
    .venv/bin/python benchmarks/throughput.py --engines canonical,queue_storage --workers 256 \
        --repeat 6 --contend disk                                # on a machine a neighbour shares
    .venv/bin/python benchmarks/throughput.py --baseline 713f60c --baseline-engines canonical \
        --engines canonical,queue_storage --workers 64,256 --repeat 3   # against an older build
    .venv/bin/python benchmarks/throughput.py --baseline 9823414,865058a,738a1c6 \
        --baseline-tree-only --baseline-engines canonical --workers 256 --repeat 2  # bisecting
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

``--baseline REF[,REF...]`` measures the awa of those git refs beside this checkout's,
in the same run: each ref's tree is installed once into a virtualenv cached under
``~/.cache/awa-bench/<sha>`` (``_support.baseline_build``), and its runs (with the
engines of ``--baseline-engines``, default those of ``--engines``) join the alternation
as ``REF:engine`` next to ``current:engine`` -- A B B A ... within each W, so each
build meets the same machine.  The first ``REF:engine`` is then what the medians and
the per-round ratios are taken against.  Every run, this checkout's included, is a
process of its own (``--one-run``) under its build's python: the measuring code is
this script for every build, only ``import awa`` differs.
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
from typing import Any, cast

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


def run_in_build(build: _support.Build, engine: str, n: int, workers: int, claim_batch: int,
                 profile: str | None) -> dict:
    """One ``run_throughput`` in a process of its own under ``build``'s python and awa
    (``--one-run``); its result is the process's last line."""
    spec = {"engine": engine, "jobs": n, "workers": workers, "claim_batch": claim_batch,
            "profile": profile}
    done = subprocess.run([build.python, __file__, "--one-run", json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True, env=build.env())
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the {build.label} run ({engine}, W={workers}) failed "
                         f"(exit status {done.returncode}): {done.stdout[-2000:]}")
    return cast(dict, json.loads(lines[-1]))


def one_run(spec: dict[str, Any]) -> None:
    """``--one-run``: a single run, its result printed as one JSON line."""
    result = run_throughput(spec["engine"], spec["jobs"], spec["workers"], spec["claim_batch"],
                            spec["profile"])
    print(json.dumps(result), flush=True)


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
    if len(sys.argv) > 1 and sys.argv[1] == "--one-run":
        one_run(json.loads(sys.argv[2]))
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
    parser.add_argument("--baseline", default="", metavar="REF[,REF...]",
                        help="git refs whose awa is measured beside this checkout's, "
                             "alternated in the same run (venvs cached in ~/.cache/awa-bench)")
    parser.add_argument("--baseline-engines", default=None,
                        help="the engines the baseline builds run (default: --engines)")
    parser.add_argument("--baseline-tree-only", action="store_true",
                        help="run each ref's awa/ tree on this checkout's venv instead of a "
                             "venv of its own: seconds per ref, for bisecting between commits "
                             "with the same dependencies")
    args = parser.parse_args()
    build = _support.tree_build if args.baseline_tree_only else _support.baseline_build
    builds = [build(ref) for ref in args.baseline.split(",") if ref]
    variants = {f"{b.label}:{e}": (b, e) for b in builds
                for e in (args.baseline_engines or args.engines).split(",")}
    variants.update({(f"current:{e}" if builds else e): (_support.CURRENT, e)
                     for e in args.engines.split(",")})
    print(f"N={args.jobs} no-op async jobs, one worker process, claim_batch_size="
          f"{args.claim_batch}, COPY enqueue alongside; machine: {os.cpu_count()} cores "
          f"(shared with other work while measuring; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})"
          + (f"; competing load: {args.contend}" if args.contend else ""))
    for b in builds:
        print(f"baseline {b.label}: {b.code} ({b.python})")
    with _support.competing_load(args.contend):
        run_series(args, variants)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def run_series(args: argparse.Namespace,
               variants: dict[str, tuple[_support.Build, str]]) -> None:
    """Every W and (build, engine) of the run, alternated, then the medians (``--repeat``)."""
    width = max(14, *(len(label) for label in variants))
    print(f"{'engine':>{width}} {'W':>5} {'enqueue/s':>10} {'processed/s':>12} "
          f"{'CPU ms/job':>11} {'server ms/job':>14} {'pickup p50':>11} {'pickup p95':>11}")
    results: dict[tuple[int, str], list[dict]] = {}
    for w, label in _support.alternation(args.workers, args.repeat, ",".join(variants)):
        build, engine = variants[label]
        profile_path = (f"/tmp/awa-throughput-{label.replace(':', '-')}-W{w}.prof"
                        if args.profile == w else None)
        r = run_in_build(build, engine, args.jobs, w, args.claim_batch, profile_path)
        assert r["max_attempt"] == 1, "a job was claimed twice"
        results.setdefault((w, label), []).append(r)
        print(f"{label:>{width}} {w:>5} {r['enqueue_per_s']:>10.0f} "
              f"{r['processed_per_s']:>12.0f} {r['cpu_ms_per_job']:>11.3f} "
              f"{_ms(r['server_cpu_ms_per_job']):>14} "
              f"{r['pickup_p50_ms']:>9.1f}ms {r['pickup_p95_ms']:>9.1f}ms", flush=True)
        if profile_path:
            print(f"\nprofile of the worker process, {label} W={w} "
                  f"(top functions by own time):")
            print_profile(profile_path)
    if args.repeat > 1:
        print_medians(results, next(iter(variants)), width)


def print_medians(results: dict[tuple[int, str], list[dict]], baseline: str,
                  width: int = 14) -> None:
    """Per W and variant, the medians over the rounds; processed/s and enqueue/s also as a
    share of the first variant's medians (the comparison the rounds were alternated for),
    then each other variant's processed/s, enqueue/s and worker CPU per job round by round
    against the first's (``_support.paired_ratio``)."""
    print(f"\nmedians over the rounds\n{'engine':>{width}} {'W':>5} {'enqueue/s':>10} "
          f"{'of first':>9} {'processed/s':>12} {'of first':>9} {'CPU ms/job':>11} "
          f"{'pickup p50':>11} (first: {baseline})")
    for (w, label), runs in results.items():
        base_runs = results[(w, baseline)]
        rate = statistics.median(r["processed_per_s"] for r in runs)
        base = statistics.median(r["processed_per_s"] for r in base_runs)
        enq = statistics.median(r["enqueue_per_s"] for r in runs)
        base_enq = statistics.median(r["enqueue_per_s"] for r in base_runs)
        pickup = statistics.median(r["pickup_p50_ms"] for r in runs)
        cpu = statistics.median(r["cpu_ms_per_job"] for r in runs)
        print(f"{label:>{width}} {w:>5} {enq:>10.0f} {100 * enq / base_enq:>8.1f}% "
              f"{rate:>12.0f} {100 * rate / base:>8.1f}% {cpu:>11.4f} {pickup:>9.1f}ms")
    # Worker CPU per job as well: on a loaded machine it moves less than the rates do.
    for measure in ("processed_per_s", "enqueue_per_s", "cpu_ms_per_job"):
        for (w, label), runs in results.items():
            if label != baseline:
                name = measure.replace("_per_s", "/s").replace("cpu_ms_per_job", "CPU/job")
                print(f"{label} / {baseline} {name}, W={w}, "
                      + _support.paired_ratio([r[measure] for r in runs],
                                              [r[measure] for r in results[(w, baseline)]]))


if __name__ == "__main__":
    main()
