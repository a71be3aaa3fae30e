"""Direct versus through PgBouncer: processed/s and pickup p50/p95, 1/4/8 worker processes.

    python3 dev.py bench benchmarks/pgbouncer.py                        # 1,4,8 processes
    python3 dev.py bench benchmarks/pgbouncer.py --processes 1 --jobs 2000 --repeat 1

Starts its own PgBouncer (Debian's ``pgbouncer``; transaction mode,
``default_pool_size`` ``--server-pool``) in front of the test server.  For each
process count, rounds alternate the modes (A B C, C B A, ...) so each comparison
meets the same machine:

* ``direct``            -- every connection to PostgreSQL itself (LISTEN wake-ups);
* ``pgbouncer``         -- every connection through the pooler, no direct URL (poll-only
  dispatch, the leader's lock held in an open transaction);
* ``pgbouncer+direct``  -- the pool through the pooler, LISTEN and the leader lock on
  ``direct_database_url``.

Each round gets a fresh scratch database and starts the fleet (tests/topology/fleet.py:
real worker processes, 64 workers each, the handlers' execution log as ground truth),
then measures two things:

* pickup -- ``--trickle`` jobs inserted one at a time at ``--trickle-rate`` per second
  into an idle fleet: seconds from the row's ``created_at`` to its handler's start;
* processed/s -- ``--jobs`` jobs inserted at once: jobs over the seconds from the insert's
  commit to the last handler's end.

Results go to stdout (and ``--json FILE``).  The machine is shared: numbers from it
compare modes within one run, never across runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import _support
import psycopg
from psycopg.conninfo import conninfo_to_dict

sys.path.insert(0, str(_support.ROOT / "tests"))

import awa  # noqa: E402 - after _support put the checkout on sys.path
from support.pgbouncer import PgBouncer  # noqa: E402 - tests/ put on sys.path above
from topology.fleet import Fleet  # noqa: E402 - likewise

MODES = ("direct", "pgbouncer", "pgbouncer+direct")
CREATED = "SELECT id, EXTRACT(EPOCH FROM created_at)::float8 FROM awa.jobs WHERE id = ANY(%s)"


@dataclass
class Round:
    processes: int
    mode: str
    jobs: int
    processed_per_s: float
    pickup_p50_ms: float
    pickup_p95_ms: float


def _wait(predicate, timeout: float, what: str) -> None:  # noqa: ANN001 - a plain callable
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"pgbouncer benchmark: timed out waiting for {what}")
        time.sleep(0.05)


def one_round(bouncer: PgBouncer, processes: int, mode: str, args: argparse.Namespace) -> Round:
    with _support.scratch_database("awa_bench_pgbouncer") as direct_url:
        dbname = str(conninfo_to_dict(direct_url)["dbname"])
        worker_url = direct_url if mode == "direct" else bouncer.url(dbname)
        log_dir = Path(tempfile.mkdtemp(prefix="awa-bench-pgbouncer-"))
        fleet = Fleet(worker_url, log_dir,
                      processes=processes, slots=64,
                      direct_database_url=direct_url if mode == "pgbouncer+direct" else None)
        fleet.start()
        try:
            with awa.Client(direct_url) as producer:
                trickled = []
                for _ in range(args.trickle):
                    trickled.append(producer.insert({"ms": 0}, kind="work", queue="work").id)
                    time.sleep(1.0 / args.trickle_rate)
                _wait(lambda: set(trickled) <= set(fleet.read_log().dones), 120, "the trickle")
                with psycopg.connect(direct_url) as conn:
                    created: dict[int, float] = dict(conn.execute(CREATED, (trickled,)).fetchall())
                log = fleet.read_log()
                pickups = sorted(min(t for _, _, t in log.starts[i]) - created[i]
                                 for i in trickled)
                batch_ids: set[int] = set()
                committed_at = time.time()
                for first in range(0, args.jobs, 1000):
                    inserted = producer.insert_many([{"ms": 0}] * min(1000, args.jobs - first),
                                                    kind="work", queue="work")
                    batch_ids.update(job.id for job in inserted)
                _wait(lambda: batch_ids <= set(fleet.read_log().dones), 900, "the batch")
                dones = fleet.read_log().dones  # parsed once: per id it was n squared
                last = max(max(t for _, _, t in dones[i]) for i in batch_ids)
        finally:
            fleet.stop()
            shutil.rmtree(log_dir, ignore_errors=True)
    return Round(processes, mode, args.jobs, args.jobs / max(last - committed_at, 1e-9),
                 _support.percentile(pickups, 50) * 1000,
                 _support.percentile(pickups, 95) * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,4,8", help="worker process counts")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs in the throughput batch")
    parser.add_argument("--trickle", type=int, default=200, help="jobs for the pickup phase")
    parser.add_argument("--trickle-rate", type=float, default=50.0, help="pickup jobs per second")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per process count")
    parser.add_argument("--server-pool", type=int, default=10, help="PgBouncer default_pool_size")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    target = conninfo_to_dict(_support.admin_url())
    results: list[Round] = []
    with PgBouncer(target_host=str(target.get("host") or "127.0.0.1"),
                   target_port=int(target.get("port") or 5432),
                   default_pool_size=str(args.server_pool)) as bouncer:
        for size, mode in _support.alternation(args.processes, args.repeat, ",".join(modes)):
            r = one_round(bouncer, size, mode, args)
            results.append(r)
            print(f"{r.processes} process(es) {r.mode:<17} {r.processed_per_s:9.0f} jobs/s   "
                  f"pickup p50 {r.pickup_p50_ms:7.1f} ms  p95 {r.pickup_p95_ms:7.1f} ms",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
