"""Rolling upgrades under load: from each previous release to this checkout, and back.

    python3 dev.py bench benchmarks/upgrade.py                      # 40,000 jobs, every pair
    python3 dev.py bench benchmarks/upgrade.py --jobs 4000 --release bb0ffc4 --engine canonical

For each previous release (tests/upgrade/releases.py: built from this repository's history)
and each engine, on a fresh database of a private PostgreSQL cluster (the shared server's
connections are not this run's to take): the old release migrates it, 2 old workers (32
slots each) run while an old producer COPYs half the jobs; mid-run this checkout's `awa
migrate`; 2 new workers start, the old ones are SIGTERMed one by one, a new producer enqueues
the other half; then the rollback: 2 old workers start, the new ones stop, an old producer
enqueues a quarter more (tests/upgrade/rolling.py).  Every handler writes the execution log.

Per run it prints the verdict: jobs, lost, run twice, error lines in any process's stderr,
`awa migrate`'s rc and duration, the claim stall (the longest gap between two handler starts
while the migration ran; the 99th percentile gap over the run for scale), and what `awa
migrate --contract` said while older runtimes were live and once they had stopped, and what
the old release's own `awa migrate` does to the migrated database.  Exit status 1 when any
run lost a job, ran one twice, logged an error or failed to migrate.
"""

from __future__ import annotations

import argparse
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
from upgrade import rolling  # noqa: E402 - likewise
from upgrade.releases import PREVIOUS  # noqa: E402 - likewise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--release", action="append", choices=sorted(PREVIOUS),
                        help="a previous release (default: every one)")
    parser.add_argument("--rate", type=float, default=1500.0,
                        help="jobs a second each producer COPYs (default 1500)")
    parser.add_argument("--engine", action="append", choices=["queue_storage", "canonical"],
                        help="an engine (default: both)")
    args = parser.parse_args()
    if args.jobs < 100:
        parser.error("--jobs must be at least 100")
    failed = False
    logs = Path(tempfile.mkdtemp(prefix="awa-upgrade-"))
    with PrivateCluster("-c", "max_connections=200") as cluster:
        for release in args.release or sorted(PREVIOUS):
            for engine in args.engine or ["queue_storage", "canonical"]:
                started = time.monotonic()
                verdicts = rolling.run(release, engine, args.jobs, cluster.url("postgres"),
                                       logs, rate=args.rate)
                forward, back = verdicts["roll"], verdicts["rollback"]
                print(f"{release} -> this checkout, {engine}: {forward.line()}", flush=True)
                print(f"  contract while {release} runtimes live: {forward.contract[1]}")
                for line in forward.error_lines[:3] + forward.error_lines_before[:3]:
                    print(f"  {line[:300]}")
                print(f"rollback to {release}, {engine}: {back.line()}")
                print(f"  contract while {release} runtimes live: {back.contract[1]}")
                for line in back.error_lines[:3]:
                    print(f"  {line[:300]}")
                for note in back.notes:
                    print(f"  {note}")
                print(f"  ({time.monotonic() - started:.0f} s; logs in {logs})", flush=True)
                failed |= not (forward.ok and back.ok)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
