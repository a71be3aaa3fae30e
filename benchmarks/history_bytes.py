"""Disk per job on each storage engine: waiting (available) and kept as history (completed).

    python3 dev.py bench benchmarks/history_bytes.py [--jobs 5000] [--engines canonical]
    python3 dev.py bench benchmarks/history_bytes.py --jobs 20000 --breakdown

A size measurement, not a timing one: for each engine a scratch database, the size of
every relation in schema ``awa`` (tables with their indexes and TOAST) before, after
inserting ``--jobs`` jobs (args of about 60 bytes of JSON), and after a runtime completed
them all and ``VACUUM`` ran (completed jobs stay until retention deletes them,
``completed_retention_hours``, 24 h by default).  Divided by the job count: the figures
docs/production.md sizes retention with.  Sizes grow in 8 kB pages, so small runs
over-state the per-job figure; use thousands of jobs.  ``--breakdown`` adds, per engine,
the bytes per job each table kept (a ring's partitions counted under their table).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import _support
import psycopg

import awa

# Per table (a partition under its parent), with its indexes and TOAST.
SIZE_BY_TABLE = """
SELECT coalesce(p.relname, c.relname) AS relname,
       sum(pg_total_relation_size(c.oid))::bigint AS bytes
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
  LEFT JOIN pg_class p ON p.oid = i.inhparent
 WHERE n.nspname = 'awa' AND c.relkind IN ('r', 'm')
 GROUP BY 1
"""
COMPLETED = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"


def sizes_by_table(url: str) -> dict[str, int]:
    """Bytes of every table in schema ``awa`` after a VACUUM; their sum is the layout's."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM")
        return {name: int(n) for name, n in conn.execute(SIZE_BY_TABLE).fetchall()}


async def complete_all(url: str, jobs: int) -> None:
    client = awa.AsyncClient(url)

    @client.task(dict, kind="signup_email")
    async def handle(job: awa.Job[dict]) -> None:
        return None

    await client.start([("default", 32)], poll_interval_ms=50)
    try:
        while True:
            with psycopg.connect(url) as conn:
                row = conn.execute(COMPLETED).fetchone()
            if row and row[0] >= jobs:
                return
            await asyncio.sleep(0.5)
    finally:
        await client.close()


def measure(engine: str, jobs: int) -> tuple[float, float, dict[str, float]]:
    """Bytes per job waiting and kept as history, and the history's bytes per job by table."""
    with _support.scratch_database("awa_bench_history", engine) as url:
        empty_tables = sizes_by_table(url)
        empty = sum(empty_tables.values())
        with awa.Client(url) as producer:
            for first in range(0, jobs, 1000):
                producer.insert_many(
                    [{"user_id": first + i, "email": f"user{first + i}@example.com",
                      "template": "welcome"} for i in range(min(1000, jobs - first))],
                    kind="signup_email")
        waiting = sum(sizes_by_table(url).values())
        asyncio.run(complete_all(url, jobs))
        done_tables = sizes_by_table(url)
        done = sum(done_tables.values())
        by_table = {name: (n - empty_tables.get(name, 0)) / jobs
                    for name, n in done_tables.items()}
    return (waiting - empty) / jobs, (done - empty) / jobs, by_table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--engines", default="canonical,queue_storage")
    parser.add_argument("--breakdown", action="store_true",
                        help="also the history's bytes per job by table")
    args = parser.parse_args()
    for engine in args.engines.split(","):
        waiting, kept, by_table = measure(engine, args.jobs)
        print(f"{engine:<14} available: {waiting:7.0f} bytes/job   "
              f"completed (history): {kept:7.0f} bytes/job   ({args.jobs} jobs)", flush=True)
        if args.breakdown:
            grown = sorted(((n, name) for name, n in by_table.items() if n >= 1), reverse=True)
            print("    " + ", ".join(f"{name} {n:.0f}" for n, name in grown), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
