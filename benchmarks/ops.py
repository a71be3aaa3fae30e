"""awa-ops on a large database: `diagnose all` time, the plans of its queries, one exporter scrape.

    .venv/bin/python benchmarks/ops.py [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
                                       [--jobs 1000000] [--running 500] [--rebuild]

Builds (once; reused while it holds the requested row count) a database
``awa_ops_bench`` on the server of --admin-url (default: AWA_TEST_DATABASE_URL
/ DATABASE_URL, else 127.0.0.1:5432) with --jobs jobs made by INSERT ... SELECT
generate_series (mostly completed history, a backlog of available and scheduled jobs, ~500
running with fresh heartbeats, failed, cancelled, DLQ entries, unique claims),
then measures:

* ``awa-ops diagnose all`` in-process (median of 5) and as a fresh CLI process;
* EXPLAIN of every query the checks and one exporter scrape issue, failing the
  run (exit 1) when any plan has a sequential scan of awa.jobs_hot or
  awa.scheduled_jobs;
* one exporter scrape (median of 10).  Targets: diagnose all < 2 s, scrape < 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _support
import psycopg
from psycopg.conninfo import make_conninfo

from awa_ops.diagnose import Options, run_all
from awa_ops.exporter import DatabaseCollector
from awa_ops.session import OpsSession

DB_NAME = "awa_ops_bench"
JOBS_TABLES = ("jobs_hot", "scheduled_jobs")
QUEUES = ("default", "email", "billing", "reports")

POPULATE = [
    # completed history: the bulk of the table, as with 24 h retention at a busy rate
    """INSERT INTO awa.jobs_hot (kind, queue, state, attempt, run_lease, attempted_at, finalized_at,
                                 created_at, run_at)
       SELECT 'kind_' || (g %% 20), (%(queues)s::text[])[1 + g %% 4], 'completed', 1, 1,
              now() - make_interval(secs => g %% 86400), now() - make_interval(secs => g %% 86400),
              now() - make_interval(secs => g %% 86400 + 1),
              now() - make_interval(secs => g %% 86400 + 1)
       FROM generate_series(1, %(completed)s) g""",
    """INSERT INTO awa.jobs_hot (kind, queue, state, attempt, run_lease, attempted_at,
                                finalized_at, errors)
       SELECT 'kind_' || (g %% 20), (%(queues)s::text[])[1 + g %% 4], 'failed', 25, 25, now(),
              now() - make_interval(secs => g %% 86400),
              ARRAY[jsonb_build_object('error', 'boom ' || (g %% 7), 'attempt', 25, 'at', now())]
       FROM generate_series(1, %(failed)s) g""",
    """INSERT INTO awa.jobs_hot (kind, queue, state, attempt, run_lease, attempted_at, finalized_at)
       SELECT 'kind_' || (g %% 20), (%(queues)s::text[])[1 + g %% 4], 'cancelled', 1, 1, now(),
              now() - make_interval(secs => g %% 86400)
       FROM generate_series(1, %(cancelled)s) g""",
    """INSERT INTO awa.jobs_hot (kind, queue, state, run_at, unique_key, unique_states)
       SELECT 'kind_' || (g %% 20), (%(queues)s::text[])[1 + g %% 4], 'available',
              now() - make_interval(secs => g %% 600),
              CASE WHEN g %% 10 = 0 THEN decode(md5(g::text), 'hex') END,
              CASE WHEN g %% 10 = 0 THEN B'11111000' END
       FROM generate_series(1, %(available)s) g""",
    """INSERT INTO awa.jobs_hot (kind, queue, state, attempt, run_lease, attempted_at, heartbeat_at,
                                 deadline_at)
       SELECT 'kind_' || (g %% 20), (%(queues)s::text[])[1 + g %% 4], 'running', 1, 1, now(),
              now() - make_interval(secs => g %% 20), now() + interval '5 minutes'
       FROM generate_series(1, %(running)s) g""",
    """INSERT INTO awa.scheduled_jobs (kind, queue, state, run_at, attempt)
       SELECT 'kind_' || (g %% 20), (%(queues)s::text[])[1 + g %% 4],
              CASE WHEN g %% 5 = 0 THEN 'retryable' ELSE 'scheduled' END::awa.job_state,
              now() + make_interval(secs => g %% 3600), g %% 5
       FROM generate_series(1, %(scheduled)s) g""",
    """INSERT INTO awa.dlq_entries (job_id, kind, queue, dlq_reason, attempt, errors, dlq_at)
       SELECT 10000000 + g, 'kind_' || (g %% 20), (%(queues)s::text[])[1 + g %% 4],
              'max_attempts_exhausted', 25,
              ARRAY[jsonb_build_object('error', 'poison ' || (g %% 3), 'attempt', 25, 'at', now())],
              now() - make_interval(secs => g * 60)
       FROM generate_series(1, %(dlq)s) g""",
    """INSERT INTO awa.runtime_instances (instance_id, hostname, pid, last_seen_at, leader,
                                         maintenance_alive, queues)
       SELECT gen_random_uuid(), 'bench-' || g, 1000 + g, now() + interval '1 day', g = 1, g = 1,
              '[{"queue": "default"}, {"queue": "email"},'
              ' {"queue": "billing"}, {"queue": "reports"}]'
       FROM generate_series(1, 4) g""",
]


def plan_counts(total: int, running: int) -> dict[str, Any]:
    available, scheduled, failed, cancelled = total // 20, total // 25, total // 50, total // 100
    completed = total - available - scheduled - failed - cancelled - running
    return {"queues": list(QUEUES), "completed": completed, "failed": failed,
            "cancelled": cancelled, "available": available, "running": running,
            "scheduled": scheduled, "dlq": 5000}


def build(admin_url: str, total: int, running: int, rebuild: bool) -> str:
    have = None if rebuild else _support.kept_job_count(admin_url, DB_NAME)
    if have == total:
        url = make_conninfo(admin_url, dbname=DB_NAME)
        print(f"reusing {DB_NAME} with {have:,} jobs")
        _refresh_running(url)
        return url
    started = time.perf_counter()
    # Arranges a big fleet with canonical rows directly (fast); the reads it times are the
    # canonical engine's.
    url = _support.recreate_database(admin_url, DB_NAME, "canonical")
    with psycopg.connect(url, autocommit=True) as conn:
        counts = plan_counts(total, running)
        for statement in POPULATE:
            conn.execute(statement, counts)
        conn.execute("VACUUM ANALYZE")
    print(f"built {DB_NAME}: {total:,} jobs in {time.perf_counter() - started:.1f}s")
    return url


def _refresh_running(url: str) -> None:
    """Keep the ~500 running attempts alive and the runtimes live, as a healthy fleet would."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs_hot "
                     "SET heartbeat_at = now() - make_interval(secs => id % 20), "
                     "deadline_at = now() + interval '5 minutes' WHERE state = 'running'")


class RecordingSession(OpsSession):
    """An OpsSession that remembers every query it ran, to EXPLAIN them afterwards."""

    recorded: list[tuple[str, Any]]

    async def fetch_all(self, query, params=None):
        self.recorded.append((query, params))
        return await super().fetch_all(query, params)

    async def fetch_one(self, query, params=None):
        self.recorded.append((query, params))
        return await super().fetch_one(query, params)

    async def fetch_sets(self, *queries):
        self.recorded.extend(queries)
        return await super().fetch_sets(*queries)


async def recording_session(url: str) -> RecordingSession:
    base = await OpsSession.open(url)
    session = RecordingSession(base.conn, url)
    session.recorded = []
    return session


def seq_scans(plan: list[str]) -> list[str]:
    return [line.strip() for line in plan
            if "Seq Scan" in line and any(f" on {t}" in line or f" on awa.{t}" in line
                                          for t in JOBS_TABLES)]


async def explain_all(url: str, queries: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn, \
            conn.transaction():
        # As OpsSession does for every read: no parallel workers.
        await conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        for query, params in queries:
            key = " ".join(query.split())
            if "set_config(" in key:  # a planner setting the scrape applies to its own transaction
                await conn.execute(query, params)
                continue
            if key in seen:
                continue
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query, params)
            plan = [row[0] for row in await cur.fetchall()]
            total_ms = next((float(line.split(":")[1].split()[0]) for line in plan
                             if line.startswith("Execution Time")), 0.0)
            seen[key] = {"query": key[:110], "ms": total_ms, "seq_scans": seq_scans(plan),
                         "top": plan[0].strip()[:90]}
    return list(seen.values())


async def measure(url: str) -> int:
    options = Options(state_dir=Path("/tmp/awa-ops-bench-state"))
    session = await recording_session(url)
    async with session:
        await run_all(session, options)  # warm the engine cache and the catalogue
        session.recorded.clear()
        session.cache.clear()
        times = []
        for _ in range(5):
            started = time.perf_counter()
            results = await run_all(session, options)
            times.append(time.perf_counter() - started)
        diagnose_queries = list(session.recorded)
    print(f"\n`diagnose all` in-process: median {statistics.median(times) * 1000:.0f} ms "
          f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}) over {len(times)} runs")
    for r in results:
        print(f"  {r.check:16} {r.severity.label:9} {r.duration_ms:7.1f} ms  {r.headline()[:70]}")

    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "all", "--json",
                           "--database-url", url], cwd=_support.ROOT, capture_output=True,
                          text=True)
    cli_s = time.perf_counter() - started
    print("`awa-ops diagnose all` as a fresh process (incl. interpreter start): "
          f"{cli_s * 1000:.0f} ms "
          f"(exit {proc.returncode})")

    collector = DatabaseCollector(url)
    scrape_session = await recording_session(url)
    collector._session = scrape_session
    await collector.scrape()
    scrape_session.recorded.clear()
    scrapes = []
    for _ in range(10):
        started = time.perf_counter()
        families = await collector.scrape()
        scrapes.append(time.perf_counter() - started)
    scrape_queries = list(scrape_session.recorded)
    await collector.close()
    series = sum(len(f.samples) for f in families)
    print(f"\nexporter scrape: median {statistics.median(scrapes) * 1000:.1f} ms "
          f"(max {max(scrapes) * 1000:.1f}) for {series} series")

    plans = await explain_all(url, diagnose_queries + scrape_queries)
    print(f"\nplans of {len(plans)} distinct queries (EXPLAIN ANALYZE):")
    bad = 0
    for p in sorted(plans, key=lambda p: -p["ms"]):
        flag = "SEQ SCAN OF JOBS: " + "; ".join(p["seq_scans"]) if p["seq_scans"] else "ok"
        bad += bool(p["seq_scans"])
        print(f"  {p['ms']:8.2f} ms  {flag:4}  {p['top']}\n             {p['query']}")
    verdict = (statistics.median(times) < 2.0 and statistics.median(scrapes) < 0.2 and not bad)
    print(f"\ntargets: diagnose all < 2 s, scrape < 200 ms, no seq scan of jobs tables -> "
          f"{'MET' if verdict else 'NOT MET'}")
    return 0 if verdict else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default=_support.admin_url())
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--running", type=int, default=500)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    url = build(args.admin_url, args.jobs, args.running, args.rebuild)
    sys.exit(asyncio.run(measure(url)))


if __name__ == "__main__":
    main()
