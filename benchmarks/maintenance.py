"""Maintenance throughput: rescue of stale running jobs, promotion of due jobs.

    python3 dev.py bench benchmarks/maintenance.py [--rescue 10000] [--promote 100000]

Runs against a scratch database created on the server of
``$AWA_TEST_DATABASE_URL`` / ``$DATABASE_URL`` (default: the local server at
127.0.0.1:5432) and dropped afterwards.  Uses the production batch sizes
(``config.RESCUE_BATCH_SIZE``, ``config.PROMOTE_BATCH_SIZE``) and drives the same functions
the leader runs each tick, back to back until nothing is left:

* rescue: N running jobs whose heartbeat is older than the staleness cutoff
  -> retryable; reports seconds to clear and SQL statements issued (counted by
  the rescue code itself; each batch is one transaction of two statements);
* promotion: N scheduled jobs already due -> available; reports jobs/s and
  statements (one per batch).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import _support
import psycopg

from awa import config, db
from awa.runtime.maintenance import promote, rescue

SEED_STALE_RUNNING = """
INSERT INTO awa.jobs_hot (kind, queue, args, state, attempt, max_attempts, run_lease,
                          attempted_at, heartbeat_at, deadline_at)
SELECT 'bench', 'bench', jsonb_build_object('i', i), 'running', 1, 25, 1,
       now() - interval '10 minutes', now() - interval '10 minutes',
       now() + interval '1 hour'
  FROM generate_series(1, %(n)s) AS i
"""

SEED_DUE_SCHEDULED = """
INSERT INTO awa.scheduled_jobs (kind, queue, args, state, run_at)
SELECT 'bench', 'bench', jsonb_build_object('i', i), 'scheduled',
       now() - make_interval(secs => i %% 60)
  FROM generate_series(1, %(n)s) AS i
"""


async def bench_rescue(pool, url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SEED_STALE_RUNNING, {"n": n})
        conn.execute("VACUUM ANALYZE awa.jobs_hot")
    started = time.perf_counter()
    total = rescue.RescueOutcome()
    while True:
        out = await rescue.rescue(pool, rescue.HEARTBEAT_STALE,
                                  batch_size=config.RESCUE_BATCH_SIZE,
                                  staleness_ms=config.HEARTBEAT_STALENESS_MS)
        total.retried += out.retried
        total.statements += out.statements
        total.batches += out.batches
        if out.total == 0:
            break
    seconds = time.perf_counter() - started
    print(f"rescue:    {total.retried:>7,} stale running jobs cleared in {seconds:6.2f} s "
          f"({total.retried / seconds:,.0f} jobs/s); {total.statements} statements in "
          f"{total.batches} batches of {config.RESCUE_BATCH_SIZE} "
          f"(incl. the final empty probe)")


async def bench_promote(pool, url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        _support.empty_job_tables(conn)
        conn.execute(SEED_DUE_SCHEDULED, {"n": n})
        conn.execute("VACUUM ANALYZE awa.scheduled_jobs")
    started = time.perf_counter()
    promoted = statements = batches = 0
    while True:
        out = await promote.promote(pool, batch_size=config.PROMOTE_BATCH_SIZE)
        promoted += out.promoted
        statements += out.statements
        batches += out.batches
        if out.promoted == 0:
            break
    seconds = time.perf_counter() - started
    print(f"promotion: {promoted:>7,} due scheduled jobs promoted in {seconds:6.2f} s "
          f"({promoted / seconds:,.0f} jobs/s); {statements} statements in {batches} "
          f"batches of {config.PROMOTE_BATCH_SIZE}")


async def main(args: argparse.Namespace) -> None:
    # Arranges backlogs as canonical rows directly: it times canonical's maintenance SQL.
    with _support.scratch_database("awa_bench_maint", "canonical") as url:
        pool = await db.open_pool(url, config.APP_NAME_WORKER, max_size=2)
        try:
            if args.rescue:
                await bench_rescue(pool, url, args.rescue)
            if args.promote:
                await bench_promote(pool, url, args.promote)
        finally:
            await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rescue", type=int, default=10_000, help="stale running jobs")
    parser.add_argument("--promote", type=int, default=100_000, help="due scheduled jobs")
    asyncio.run(main(parser.parse_args()))
