"""Claim cost against depth: processed/s of the first jobs of a backlog, by its size.

    python3 dev.py bench benchmarks/depth.py                                # 20k, 200k, 1M
    python3 dev.py bench benchmarks/depth.py --depths 20000,200000 --repeat 2

For each depth and engine (alternating, the engine order flipped every round),
a fresh database on a private PostgreSQL cluster this script starts (with
``pg_stat_statements`` and ``--shared-buffers``, 1GB by default, as a production server
has) is filled with ``depth`` no-op jobs by COPY and settled
(``VACUUM (ANALYZE)`` and ``CHECKPOINT``: what is timed is the claim, not
autovacuum's first pass over a freshly loaded backlog or the fill's dirty pages
being written -- ``--no-settle`` leaves them to race the drain), then one worker
process (tests/support/worker_app.py, ``--workers`` handlers, the SDK's default
timings) drains the first ``--measure`` of them;
the rate is taken from the handlers' own log (first to last ``done`` line of
those jobs), not from the engine.  A claim whose cost is proportional to its
batch, not to the backlog, keeps the rate flat from 20,000 to 1,000,000.
Each run also reports the claim statements' server time per claimed job
(``pg_stat_statements``: their total execution time over the jobs the drain
claimed), the direct measure of "proportional to the batch, not to the backlog"
that the rate shows only together with everything else the worker does.
The last lines give each engine's rate and claim cost at every depth against its
values at the smallest depth (median over rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _support
import psycopg

import awa
import chaos
from awa import config, storage
from support.pgcluster import PrivateCluster  # tests/ is on sys.path by chaos

FILL_BATCH = 50_000


def fill(url: str, depth: int) -> None:
    async def copy() -> None:
        async with awa.AsyncClient(url) as client:
            left = depth
            while left > 0:
                n = min(FILL_BATCH, left)
                await client.enqueue_many_copy([{}] * n, kind="fast")
                left -= n
    asyncio.run(copy())


def done_times(log_dir: Path) -> list[float]:
    times = []
    for path in log_dir.glob("*.log"):
        for line in path.read_text().splitlines():
            if line.startswith("done "):
                times.append(float(line.split()[5]))
    return sorted(times)


# The claim statements' server time, in ms, and how many calls (both engines' claims).
CLAIM_TIME = """
SELECT COALESCE(sum(total_exec_time), 0), COALESCE(sum(calls), 0) FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND (query ILIKE '%%qs_claim(%%' OR query ILIKE '%%FOR UPDATE SKIP LOCKED%%jobs_hot%%')"""


def settle(url: str) -> None:
    """The backlog as a server holds it after a while: vacuumed, analysed, checkpointed."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        conn.execute("CHECKPOINT")


def one_run(cluster: PrivateCluster, engine: str, depth: int,
            args: argparse.Namespace) -> tuple[float, float]:
    """(processed/s of the first ``--measure`` jobs, claim server µs per claimed job)."""
    url = cluster.url("depth")
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS depth WITH (FORCE)")
        conn.execute("CREATE DATABASE depth")
    with psycopg.connect(url, autocommit=True) as conn:
        storage.migrate_sync(conn, engine)
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    fill(url, depth)
    if args.settle:
        settle(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    log_dir = Path(tempfile.mkdtemp(prefix="awa-depth-"))
    worker = chaos.start_worker(url, f"default:{args.workers}",
                                settings=dict(chaos.LOAD_TIMINGS["default"]),
                                log_dir=log_dir, ready_timeout=120)
    try:
        deadline = time.monotonic() + args.timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.25)
            if len(done_times(log_dir)) >= args.measure:
                break
    finally:
        worker.kill()
    all_done = done_times(log_dir)
    times = all_done[: args.measure]
    with psycopg.connect(url, autocommit=True) as conn:
        claim_ms, _calls = conn.execute(CLAIM_TIME).fetchone()  # type: ignore[misc]  # an aggregate: one row
    if len(times) < 2:
        return 0.0, 0.0
    rate = (len(times) - 1) / max(times[-1] - times[0], 1e-9)
    return rate, float(claim_ms) * 1000 / max(len(all_done), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="canonical,queue_storage")
    parser.add_argument("--depths", default="20000,200000,1000000")
    parser.add_argument("--measure", type=int, default=20_000,
                        help="how many of the first jobs are timed")
    parser.add_argument("--workers", type=int, default=64, help="max_workers of the queue")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--no-settle", dest="settle", action="store_false",
                        help="start the worker right after the fill (autovacuum races the drain)")
    parser.add_argument("--shared-buffers", default="1GB",
                        help="the cluster's shared_buffers (PostgreSQL's default, 128MB, holds "
                             "less than a 1,000,000-job backlog: its head is read back from "
                             "the OS cache page by page)")
    args = parser.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    rates: dict[tuple[str, int], list[float]] = {}
    claims: dict[tuple[str, int], list[float]] = {}
    print(f"load average before: {os.getloadavg()[0]:.2f}; "
          f"claim_batch_size {config.CLAIM_BATCH_SIZE}; settle {args.settle}; "
          f"shared_buffers {args.shared_buffers}", flush=True)
    with PrivateCluster("-c", "shared_preload_libraries=pg_stat_statements",
                        "-c", f"shared_buffers={args.shared_buffers}") as cluster:
        for depth in depths:
            for engine_depth, engine in _support.alternation(str(depth), args.repeat,
                                                             args.engines):
                rate, claim_us = one_run(cluster, engine, engine_depth, args)
                rates.setdefault((engine, engine_depth), []).append(rate)
                claims.setdefault((engine, engine_depth), []).append(claim_us)
                print(f"{engine:<14} depth={engine_depth:>9,} first {args.measure:,}: "
                      f"{rate:8.0f} jobs/s   claim {claim_us:6.1f} µs/job   "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    for engine in args.engines.split(","):
        base = statistics.median(rates[(engine, depths[0])])
        base_claim = statistics.median(claims[(engine, depths[0])])
        row = ", ".join(
            f"{d:,}: {statistics.median(rates[(engine, d)]):.0f}/s "
            f"({statistics.median(rates[(engine, d)]) / base:.0%}), claim "
            f"{statistics.median(claims[(engine, d)]):.1f} µs/job "
            f"({statistics.median(claims[(engine, d)]) / max(base_claim, 1e-9):.0%})"
            for d in depths)
        print(f"{engine}: {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
