"""Server CPU per job of each hot-path operation, engine against engine.

    .venv/bin/python benchmarks/engine_ops.py                                   # B=8,64
    .venv/bin/python benchmarks/engine_ops.py --engines canonical,queue_storage --batch 8,64 \
        --jobs 20000 --repeat 3 [--outcome complete|complete_with_metadata|retry|dead_letter]

Where ``throughput.py`` says how fast a whole worker goes, this says where the
database's share of the cost comes from.  For each engine and batch size B, in
a fresh database: N jobs are COPYed in (one connection), then claimed B at a
time on a second connection and completed B at a time on a third, in one
sequential loop -- no concurrency, no handler, no worker process.  Each
connection's backend CPU (from /proc/<pid>/schedstat, so the server must be
local) is divided by N; ``wall µs/job`` is the loop's own time per job.  ``--outcome``
says how each attempt ends (the ``complete`` column is that outcome's statement): a plain
completion (the common one), a completion carrying a metadata patch, a retry, a
dead-letter (the jobs are enqueued with max_attempts 1).  Engines
alternate within each round (the order flips every round), on the same
machine, so the comparison holds on a noisy one.  Autovacuum and WAL writing
are not in these columns (see ``throughput.py``'s server column for the whole
server).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import _support
import psycopg

from awa import storage
from awa.storage.common.enqueue import InsertOptions, build_batch
from awa.storage.engine import AttemptWrite

QUEUE = "ops"
KIND = "noop"
COPY_BATCH = 1_000
DEADLINE_MS = 60_000


# How each measured attempt ends: the engine's method, and what the write carries.
OUTCOMES: dict[str, tuple[str, dict[str, Any]]] = {
    "complete": ("complete_batch", {}),
    "complete_with_metadata": ("complete_batch", {"metadata": {"result": "ok"}}),
    "retry": ("retry_batch", {"error": {"error": "boom"}, "delay_s": 3600.0}),
    "dead_letter": ("dead_letter_batch", {"error": {"error": "boom"}, "reason": "poison"}),
}


async def measure(engine_name: str, jobs: int, batch: int,
                  outcome: str = "complete") -> dict[str, float]:
    method, write = OUTCOMES[outcome]
    with _support.scratch_database("awa_bench_ops", engine_name) as url:
        conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(3)]
        try:
            producer, claimer, finisher = (_support.Backend(c) for c in conns)
            engine = await storage.open_engine(producer.conn)
            before = producer.cpu()
            for offset in range(0, jobs, COPY_BATCH):
                rows = [{"i": i} for i in range(offset, min(offset + COPY_BATCH, jobs))]
                rows_in = build_batch(rows, InsertOptions(kind=KIND, queue=QUEUE))
                await engine.copy_batch(producer.conn, rows_in, returning=False)
            enqueue_cpu = producer.cpu() - before
            claim_cpu = complete_cpu = 0.0
            done = 0
            started = time.perf_counter()
            while done < jobs:
                c0 = claimer.cpu()
                claimed = await engine.claim_batch(claimer.conn, QUEUE, batch, DEADLINE_MS)
                c1 = claimer.cpu()
                if not claimed:
                    raise SystemExit(f"{engine_name}: nothing to claim after {done} jobs")
                f0 = finisher.cpu()
                applied = await getattr(engine, method)(
                    finisher.conn, [AttemptWrite(j.id, j.run_lease, **write) for j in claimed])
                f1 = finisher.cpu()
                if len(applied.applied) != len(claimed):
                    raise SystemExit(f"{engine_name}: a completion missed its attempt")
                claim_cpu += c1 - c0
                complete_cpu += f1 - f0
                done += len(claimed)
            wall = time.perf_counter() - started
        finally:
            for c in conns:
                await c.close()
    return {"enqueue": 1e6 * enqueue_cpu / jobs, "claim": 1e6 * claim_cpu / jobs,
            "complete": 1e6 * complete_cpu / jobs, "wall": 1e6 * wall / jobs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", default="8,64", help="claim/complete batch sizes")
    parser.add_argument("--engines", default="canonical,queue_storage")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--outcome", choices=tuple(OUTCOMES), default="complete")
    args = parser.parse_args()
    print(f"N={args.jobs}; outcome {args.outcome}; backend CPU µs per job of each operation; load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'engine':>14} {'B':>4} {'enqueue':>8} {'claim':>8} {'complete':>9} "
          f"{'sum':>8} {'wall µs/job':>12}")
    for b, engine in _support.alternation(args.batch, args.repeat, args.engines):
        r = asyncio.run(measure(engine, args.jobs, b, args.outcome))
        total = r["enqueue"] + r["claim"] + r["complete"]
        print(f"{engine:>14} {b:>4} {r['enqueue']:>8.1f} {r['claim']:>8.1f} "
              f"{r['complete']:>9.1f} {total:>8.1f} {r['wall']:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
