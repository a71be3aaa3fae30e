"""The live switch of storage engines under load: canonical -> queue storage, and its abort.

    python3 dev.py bench benchmarks/engine_switch.py                 # 40,000 jobs, both paths
    python3 dev.py bench benchmarks/engine_switch.py --jobs 4000 --path abort

On a fresh database of a private PostgreSQL cluster (the shared server's connections are not
this run's to take), laid out for canonical: 2 workers of this checkout (32 slots each) run
while a producer COPYs three quarters of the jobs at a steady rate; mid-run `awa storage
prepare --dry-run`, `prepare` and `enter-mixed`; a second producer, started after, enqueues the
rest (into queue storage); `awa storage finalize` is asked every half second until canonical
has drained.  The abort path instead runs `awa storage abort` (new jobs back to canonical), a
third producer enqueues a quarter more, and `abort` is asked again until it ends at
canonical (tests/upgrade/switch.py).  Every handler writes the execution log.

Per path it prints the verdict: jobs, lost, run twice, error lines in any process's stderr,
each step's rc, the claim stall (the longest gap between two handler starts while each step
ran, beside the step's duration; the 99th percentile gap over the run for scale), how many
jobs each engine completed, jobs found in both engines (an attempt ends where it started: 0),
the refusals while draining and how long the drain took, and the load average.  Exit status 1
when a path lost a job, ran one twice, logged an error or a step failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This script's own directory leaves the path: its name would hide the package tests/upgrade.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support.pgcluster import PrivateCluster  # noqa: E402 - tests/ put on sys.path above
from upgrade import switch  # noqa: E402 - likewise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--rate", type=float, default=1500.0,
                        help="jobs a second each producer COPYs (default 1500)")
    parser.add_argument("--path", action="append", choices=["finalize", "abort"],
                        help="which path (default: both)")
    args = parser.parse_args()
    if args.jobs < 100:
        parser.error("--jobs must be at least 100")
    failed = False
    logs = Path(tempfile.mkdtemp(prefix="awa-engine-switch-"))
    with PrivateCluster("-c", "max_connections=200") as cluster:
        for path in args.path or ["finalize", "abort"]:
            started = time.monotonic()
            load_before = os.getloadavg()
            verdict = switch.run(args.jobs, cluster.url("postgres"), logs / path,
                                 abort=path == "abort", rate=args.rate)
            load_after = os.getloadavg()
            print(f"{path}: {verdict.line()}", flush=True)
            for step, said in verdict.outputs.items():
                print(f"  {step}: {said[:300]}")
            for line in verdict.error_lines[:5]:
                print(f"  {line[:300]}")
            for said in sorted(set(verdict.refusals))[:3]:
                print(f"  refused while draining: {said[:300]}")
            print(f"  ({time.monotonic() - started:.0f} s; load average before "
                  f"{load_before[0]:.2f}, after {load_after[0]:.2f} (1/5/15 min: "
                  f"{' '.join(f'{x:.2f}' for x in load_after)}); logs in {logs / path})",
                  flush=True)
            failed |= bool(verdict.lost or verdict.run_twice or verdict.error_lines
                           or verdict.in_both or set(verdict.step_rcs.values()) != {0})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
