"""Client instructions per job of a whole runtime: claim, dispatch, handler, outcome write
(issue 48).  Instruction counts do not move with the machine's load, so this is the number
to compare a client-side change by while the machine is busy.

    .venv/bin/python benchmarks/worker_instructions.py                     # this checkout vs main
    .venv/bin/python benchmarks/worker_instructions.py --baseline HEAD~1 --jobs 2000,6000

What one measured process does: an ``AsyncClient`` runtime (one queue, ``--workers`` slots,
a no-op async handler taking peers.py's dataclass args) started on a queue its driver filled
first (the filling costs the measured process nothing), run until the handler has run
``N`` times, then shut down (which writes the last outcomes).  Each process runs under
``valgrind --tool=callgrind`` at two sizes; (instructions at the larger - at the smaller) /
(difference in jobs) is the cost of one more job, start-up, imports and shutdown cancelling
out.  Builds alternate A B B A at each size; the per-job costs of each build's two rounds
are both printed, and their spread is the measure's noise (batch sizes follow timing, which
valgrind slows evenly but not exactly).

The server's CPU is not counted here: ``benchmarks/peers.py`` measures the machine.
The baseline (``--baseline``, default ``main``) is that ref's ``awa/`` tree on this venv
(``_support.tree_build``); the measuring code is this checkout's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import uuid
from typing import Any

import _support

KIND = "bench_noop"


@dataclasses.dataclass
class BenchNoop:
    """peers.py's args (kind ``bench_noop``)."""

    i: int = 0


# --- the measured process --------------------------------------------------------------
async def measure(url: str, queue: str, jobs: int, workers: int) -> dict[str, Any]:
    import awa

    done = asyncio.Event()
    ran = 0

    client = awa.AsyncClient(url)

    @client.task(BenchNoop, queue=queue)
    async def noop(job: Any) -> None:
        nonlocal ran
        ran += 1
        if ran >= jobs:
            done.set()

    await client.start([{"name": queue, "max_workers": workers}])
    await asyncio.wait_for(done.wait(), 1800)
    await client.shutdown(30_000)
    await client.close()
    return {"ran": ran}


# --- the driver ---------------------------------------------------------------------------
def fill(url: str, queue: str, jobs: int) -> None:
    """``jobs`` jobs in ``queue``, written by this (unmeasured) process."""
    import awa

    async def go() -> None:
        client = awa.AsyncClient(url)
        for start in range(0, jobs, 1000):
            await client.enqueue_many_copy(
                [{"i": i} for i in range(start, min(start + 1000, jobs))], kind=KIND,
                queue=queue)
        await client.close()

    asyncio.run(go())


def run_one(build: _support.Build, url: str, jobs: int, workers: int) -> int:
    """The instructions one measured process of ``build`` spent running ``jobs`` jobs."""
    queue = f"wi_{uuid.uuid4().hex[:10]}"
    fill(url, queue, jobs)
    cmd, out_file = _support.under_callgrind(
        "worker_instructions.",
        [build.python, __file__, "--child", url, queue, str(jobs), str(workers)])
    result = _support.measured_result(cmd, build)
    if result["ran"] < jobs:
        raise SystemExit(f"ran {result['ran']} of {jobs} jobs")
    return _support.callgrind_instructions(out_file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", default="main", help="git ref to compare (default main)")
    parser.add_argument("--engines", default="queue_storage")
    parser.add_argument("--jobs", default="1000,4000", help="two sizes, SMALL,LARGE")
    parser.add_argument("--workers", type=int, default=64, help="the queue's slots")
    args = parser.parse_args()
    if args.child:
        url, queue, jobs, workers = args.child
        print(json.dumps(asyncio.run(measure(url, queue, int(jobs), int(workers)))))
        return

    builds = [_support.tree_build(args.baseline),
              dataclasses.replace(_support.CURRENT, label="this checkout")]
    small, large = (int(n) for n in args.jobs.split(","))
    print(f"load average at start: {os.getloadavg()}; W={args.workers}; jobs {small},{large}; "
          f"baseline {args.baseline}")
    for engine in args.engines.split(","):
        with _support.scratch_database("awa_worker_instr", engine) as url:
            per: dict[str, list[float]] = {b.label: [] for b in builds}
            for build in [*builds, *builds[::-1]]:
                cost = (run_one(build, url, large, args.workers)
                        - run_one(build, url, small, args.workers)) / (large - small)
                per[build.label].append(cost)
            a, b = (statistics.mean(per[x.label]) for x in builds)
            rounds = "; ".join(f"{label}: " + ", ".join(f"{v:,.0f}" for v in values)
                               for label, values in per.items())
            print(f"{engine:13} instructions/job  {rounds}  ratio {b / a:.3f}", flush=True)


if __name__ == "__main__":
    main()
