"""Client CPU of a claimed job before its handler runs: the claim's rows into ``Job``s and
the executor's args step (issue 48).

    .venv/bin/python benchmarks/claim_decode.py                        # this checkout vs main
    .venv/bin/python benchmarks/claim_decode.py --baseline main --jobs 4000 --repeat 3
    .venv/bin/python benchmarks/claim_decode.py --callgrind --jobs 400,1600   # instructions

What one measured process does, in a fresh queue its driver filled first (so the filling
costs the measured process nothing): claim every job through the engine's ``claim_batch``
(batches of ``--batch``, as a dispatcher does), then for each job the executor's own step
before the handler -- ``HandlerSpec.decoder.check(job)`` where the build has it, else the
``decode_args`` the executor called before (issue 48) -- and, as a handler that reads its
args would, ``job.args`` (``--reads``).  Two args types: a plain dataclass (``BenchNoop``,
peers.py's) and ``dict`` (throughput.py's handler).

Two measures:

* CPU per job (default): ``time.process_time()`` around the claim loop alone, over the
  jobs; the wait for the server is no CPU of this process.  Each (build, case) runs
  ``--repeat`` times in A B B A order, each in its own process; the medians are reported.
  On a shared machine the numbers move with the load: the load average is printed.
* Instructions per job (``--callgrind``): each process under ``valgrind --tool=callgrind``
  at two sizes; (instructions at the larger - at the smaller) / (difference in jobs) is the
  cost of one more job, start-up and imports cancelling out.  Instruction counts do not
  depend on the machine's load, so this is the number to compare on a busy machine.

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
import time
import uuid
from typing import Any

import _support

KINDS = {"dataclass": "bench_noop", "dict": "bench_dict"}
DEADLINE_MS = 300_000


@dataclasses.dataclass
class BenchNoop:
    """peers.py's args (kind ``bench_noop``)."""

    i: int = 0


# --- the measured process --------------------------------------------------------------
async def measure(url: str, queue: str, args_kind: str, jobs: int, batch: int,
                  reads: bool) -> dict[str, Any]:
    import awa
    from awa.runtime.executor import HandlerSpec

    args_type: Any = BenchNoop if args_kind == "dataclass" else dict

    async def handler(job: Any) -> None:
        return None

    spec = HandlerSpec(kind=KINDS[args_kind], args_type=args_type, queue=queue, fn=handler,
                       is_async=True)
    decoder = getattr(spec, "decoder", None)
    if decoder is None:  # the build before issue 48's lazy args: the executor's old step
        from awa.serialization import decode_args

        def step(job: Any) -> None:
            job.args = decode_args(spec.args_type, job.args)
    else:
        step = decoder.check

    client = awa.AsyncClient(url)
    engine = await client._get_engine()  # noqa: SLF001 - the engine the runtime claims through
    pool = await client._get_pool()  # noqa: SLF001 - the runtime's pool
    claimed = 0
    async with pool.connection() as conn:
        await engine.warm_up(conn)
        cpu = time.process_time()
        while claimed < jobs:
            got = await engine.claim_batch(conn, queue, batch, DEADLINE_MS)
            if not got:
                break
            for job in got:
                step(job)
                if reads:
                    args = job.args
                    _ = args.i if args_kind == "dataclass" else args["i"]
            claimed += len(got)
        cpu = time.process_time() - cpu
    await client.close()
    return {"claimed": claimed, "cpu_s": cpu}


# --- the driver ---------------------------------------------------------------------------
def fill(url: str, queue: str, args_kind: str, jobs: int) -> None:
    """``jobs`` jobs in ``queue``, written by this (unmeasured) process."""
    import awa

    async def go() -> None:
        client = awa.AsyncClient(url)
        kind = KINDS[args_kind]
        for start in range(0, jobs, 1000):
            await client.enqueue_many_copy(
                [{"i": i} for i in range(start, min(start + 1000, jobs))], kind=kind,
                queue=queue)
        await client.close()

    asyncio.run(go())


def run_one(build: _support.Build, url: str, args_kind: str, jobs: int, batch: int,
            reads: bool, callgrind: bool) -> dict[str, Any]:
    queue = f"cd_{uuid.uuid4().hex[:10]}"
    fill(url, queue, args_kind, jobs)
    cmd = [build.python, __file__, "--child", url, queue, args_kind, str(jobs), str(batch),
           "1" if reads else "0"]
    out_file = None
    if callgrind:
        cmd, out_file = _support.under_callgrind("claim_decode.", cmd)
    result = _support.measured_result(cmd, build)
    if result["claimed"] != jobs:
        raise SystemExit(f"claimed {result['claimed']} of {jobs} jobs")
    if out_file is not None:
        result["instructions"] = _support.callgrind_instructions(out_file)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", default="main", help="git ref to compare (default main)")
    parser.add_argument("--engines", default="queue_storage,canonical")
    parser.add_argument("--args", default="dataclass,dict", help="args types: dataclass,dict")
    parser.add_argument("--reads", default="no,yes", help="does the handler read job.args")
    parser.add_argument("--jobs", default="2000",
                        help="jobs per process (with --callgrind: two sizes, SMALL,LARGE)")
    parser.add_argument("--batch", type=int, default=32, help="claim batch size")
    parser.add_argument("--repeat", type=int, default=2, help="A B B A rounds (CPU mode)")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions under valgrind instead of timing")
    args = parser.parse_args()
    if args.child:
        url, queue, args_kind, jobs, batch, reads = args.child
        result = asyncio.run(measure(url, queue, args_kind, int(jobs), int(batch),
                                     reads == "1"))
        print(json.dumps(result))
        return

    builds = [_support.tree_build(args.baseline), _support.CURRENT]
    builds[1] = dataclasses.replace(builds[1], label="this checkout")
    sizes = [int(n) for n in args.jobs.split(",")]
    if args.callgrind and len(sizes) != 2:
        raise SystemExit("--callgrind needs --jobs SMALL,LARGE")
    cases = [(a, r == "yes") for a in args.args.split(",") for r in args.reads.split(",")]
    print(f"load average at start: {os.getloadavg()}; machine: {os.cpu_count()} cores; "
          f"claim batch {args.batch}; baseline {args.baseline}")
    for engine in args.engines.split(","):
        with _support.scratch_database("awa_claim_decode", engine) as url:
            for args_kind, reads in cases:
                label = f"{engine:13} {args_kind:9} reads={'yes' if reads else 'no ':3}"
                if args.callgrind:
                    per: list[float] = []
                    for build in builds:
                        small, large = (run_one(build, url, args_kind, n, args.batch, reads,
                                                True)["instructions"] for n in sizes)
                        per.append((large - small) / (sizes[1] - sizes[0]))
                    print(f"{label}  instructions/job: {builds[0].label} {per[0]:,.0f}  "
                          f"{builds[1].label} {per[1]:,.0f}  ratio {per[1] / per[0]:.3f}",
                          flush=True)
                    continue
                times: dict[str, list[float]] = {b.label: [] for b in builds}
                for r in range(args.repeat):
                    order = builds if r % 2 == 0 else builds[::-1]
                    for build in [*order, *order[::-1]]:
                        result = run_one(build, url, args_kind, sizes[0], args.batch, reads,
                                         False)
                        times[build.label].append(result["cpu_s"] / sizes[0] * 1e6)
                a, b = (statistics.median(times[x.label]) for x in builds)
                print(f"{label}  CPU us/job (median of {len(times[builds[0].label])}): "
                      f"{builds[0].label} {a:.2f}  {builds[1].label} {b:.2f}  "
                      f"ratio {b / a:.3f}  (load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
