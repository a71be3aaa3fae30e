"""awa-tui refresh cost on a big database, and the console's CPU when idle.

    .venv/bin/python benchmarks/tui.py                    # builds awa_bench_tui once, reuses it
    .venv/bin/python benchmarks/tui.py --rebuild --jobs 1000000 --running 500 --idle-seconds 20
    .venv/bin/python benchmarks/tui.py --plans            # also print every EXPLAIN ANALYZE

What it reports, per screen refresh (the reads one refresh of that screen makes):
  * wall time of the refresh (median and max of --repeat runs), which on a local
    server is database time plus round trips;
  * data statements issued (each refresh is ONE read-only transaction; add
    BEGIN / SET TRANSACTION READ ONLY / set_config / COMMIT for the round trips);
  * the server's own execution time, summed from EXPLAIN ANALYZE of exactly the
    statements and parameters that refresh ran, and whether any plan scans a
    jobs table sequentially (the target is none);
then the app's CPU while it sits idle on a screen (headless Textual, refreshing
every --refresh seconds, ages ticking every second).

The database (awa_bench_tui on the server of --admin-url; default:
AWA_TEST_DATABASE_URL / DATABASE_URL, else 127.0.0.1:5432): --jobs rows
across 8 queues (mostly completed history, a backlog of available /
scheduled / retryable, failed and cancelled rows), --running running
attempts with spread heartbeats, DLQ entries and five runtimes.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import statistics
import time
from typing import Any

import _support
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from awa import config
from awa_ops.console import ConsoleReader, DlqFilter, JobFilter
from awa_ops.session import OpsSession
from awa_tui.app import AwaConsole

BENCH_DB = "awa_bench_tui"
QUEUES = 8
SEQ_SCAN_OF_JOBS = re.compile(r"Seq Scan on (jobs_hot|scheduled_jobs)\b")

POPULATE = """
INSERT INTO awa.jobs_hot (kind, queue, args, state, attempt, run_at, created_at, attempted_at,
                          finalized_at, tags, errors)
SELECT 'kind_' || (i %% 12), 'queue_' || (i %% %(queues)s), jsonb_build_object('n', i),
       s.state::awa.job_state, CASE WHEN s.state = 'available' THEN 0 ELSE 1 END,
       now() - make_interval(secs => (i %% 86400)), now() - make_interval(secs => (i %% 86400)),
       CASE WHEN s.state = 'available' THEN NULL
            ELSE now() - make_interval(secs => (i %% 86400)) END,
       CASE WHEN s.state IN ('completed', 'failed', 'cancelled')
            THEN now() - make_interval(secs => (i %% 86400)) END,
       CASE WHEN i %% 100 = 0 THEN ARRAY['vip'] ELSE '{}' END,
       CASE WHEN s.state = 'failed'
            THEN ARRAY[jsonb_build_object('error', 'boom', 'attempt', 1)] END
  FROM generate_series(1, %(n)s) i
 CROSS JOIN LATERAL (SELECT CASE
        WHEN i %% 100 < 5 THEN 'available'
        WHEN i %% 100 = 5 THEN 'failed'
        WHEN i %% 200 = 11 THEN 'cancelled'
        ELSE 'completed' END AS state) s
"""
POPULATE_DEFERRED = """
INSERT INTO awa.scheduled_jobs (kind, queue, state, attempt, run_at)
SELECT 'kind_' || (i %% 12), 'queue_' || (i %% %(queues)s),
       (CASE WHEN i %% 3 = 0 THEN 'retryable' ELSE 'scheduled' END)::awa.job_state,
       CASE WHEN i %% 3 = 0 THEN 1 ELSE 0 END, now() + make_interval(secs => i %% 3600)
  FROM generate_series(1, %(n)s) i
"""
POPULATE_RUNNING = """
INSERT INTO awa.jobs_hot (kind, queue, state, attempt, run_lease, attempted_at, heartbeat_at,
                          deadline_at)
SELECT 'kind_' || (i %% 12), 'queue_' || (i %% %(queues)s), 'running', 1, 1,
       now() - make_interval(secs => i %% 900), now() - make_interval(secs => i %% 120),
       now() + make_interval(secs => 300 - i %% 400)
  FROM generate_series(1, %(n)s) i
"""
POPULATE_DLQ = """
INSERT INTO awa.dlq_entries (job_id, kind, queue, dlq_reason, dlq_at, errors)
SELECT 50000000 + i, 'kind_' || (i %% 12), 'queue_' || (i %% %(queues)s),
       (ARRAY['max_attempts_exhausted', 'terminal_error', 'heartbeat_stale'])[1 + i %% 3],
       now() - make_interval(secs => i), ARRAY[jsonb_build_object('error', 'poison ' || i %% 7)]
  FROM generate_series(1, %(n)s) i
"""
POPULATE_RUNTIMES = """
INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version, last_seen_at, leader,
                                   maintenance_alive, queues)
SELECT gen_random_uuid(), 'bench-' || i, 1000 + i, '0.1.0', now(), i = 1, i = 1,
       (SELECT jsonb_agg('queue_' || q) FROM generate_series(0, %(queues)s - 1) q)
  FROM generate_series(1, 5) i
"""


def build(admin_url: str, jobs: int, running: int, rebuild: bool) -> str:
    have = None if rebuild else _support.kept_job_count(admin_url, BENCH_DB)
    if have is not None:
        print(f"reusing {BENCH_DB}: {have:,} jobs (--rebuild to start over)")
        return make_conninfo(admin_url, dbname=BENCH_DB)
    started = time.perf_counter()
    # Arranges its jobs as canonical rows directly (fast); the TUI reads canonical here.
    url = _support.recreate_database(admin_url, BENCH_DB, "canonical")
    deferred = jobs // 50
    with psycopg.connect(url, autocommit=True) as conn:
        params = {"queues": QUEUES}
        conn.execute(POPULATE, {**params, "n": jobs - deferred - running})
        conn.execute(POPULATE_DEFERRED, {**params, "n": deferred})
        conn.execute(POPULATE_RUNNING, {**params, "n": running})
        conn.execute(POPULATE_DLQ, {**params, "n": 5_000})
        conn.execute(POPULATE_RUNTIMES, params)
        conn.execute("VACUUM ANALYZE")
    print(f"built {BENCH_DB}: {jobs:,} jobs ({running} running) in "
          f"{time.perf_counter() - started:.0f}s")
    return url


class RecordingReader(ConsoleReader):
    """Keeps the statements (and parameters) of the last refresh, to EXPLAIN them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded: list[tuple[Any, Any]] = []

    async def _run(self, cur, query, params=None):
        self.recorded.append((query, params))
        return await super()._run(cur, query, params)


async def explain(url: str, statements: list[tuple[Any, Any]],
                  show: bool) -> tuple[float, list[str]]:
    """Server execution time (ms) summed over the statements, and any seq scans of jobs tables."""
    total, seq_scans = 0.0, []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for query, params in statements:
            text = query.as_string(conn) if isinstance(query, sql.Composable) else query
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + text, params)
            plan = "\n".join(row[0] for row in await cur.fetchall())
            timing = re.search(r"Execution Time: ([\d.]+) ms", plan)
            assert timing is not None, plan  # EXPLAIN ANALYZE always reports it
            total += float(timing.group(1))
            seq_scans += SEQ_SCAN_OF_JOBS.findall(plan)
            if show:
                first = " ".join(text.split())[:110]
                print(f"\n--- {first}...\n{plan}")
    return total, seq_scans


async def measure_refreshes(url: str, repeat: int, show_plans: bool) -> list[dict[str, Any]]:
    session = await OpsSession.open(url, application_name=config.APP_NAME_TUI, read_only=True)
    reader = RecordingReader(session)
    failed = await session.fetch_one(
        "SELECT id FROM awa.jobs_hot WHERE state = 'failed' ORDER BY id DESC LIMIT 1")
    assert failed is not None, "the seeded database has failed jobs"
    some_job = failed["id"]
    screens = {
        "overview": lambda: reader.overview(),
        "running (500 attempts)": lambda: reader.running(),
        "jobs: all": lambda: reader.jobs(JobFilter()),
        "jobs: state=failed": lambda: reader.jobs(JobFilter(state="failed")),
        "jobs: queue=queue_3": lambda: reader.jobs(JobFilter(queue="queue_3")),
        "jobs: state=completed kind=kind_5": lambda: reader.jobs(
            JobFilter(state="completed", kind="kind_5")),
        "jobs: tag=vip": lambda: reader.jobs(JobFilter(tag="vip")),
        "job detail": lambda: reader.job(some_job),
        "dlq: all": lambda: reader.dlq(DlqFilter()),
        "dlq: queue=queue_2 reason=terminal_error": lambda: reader.dlq(
            DlqFilter(queue="queue_2", reason="terminal_error")),
    }
    results = []
    for name, refresh in screens.items():
        await refresh()  # warm the caches (and the engine detection)
        times = []
        for _ in range(repeat):
            reader.recorded = []
            before = reader.statements
            started = time.perf_counter()
            await refresh()
            times.append((time.perf_counter() - started) * 1000)
            statements = reader.statements - before
        server_ms, seq_scans = await explain(url, reader.recorded, show_plans)
        results.append({"screen": name, "median_ms": statistics.median(times),
                        "max_ms": max(times), "statements": statements,
                        "server_ms": server_ms, "seq_scans": seq_scans})
    started = time.perf_counter()
    checks = await reader.diagnostics()
    results.append({"screen": f"diagnostics (diagnose all, {len(checks)} checks, "
                              f"every {config.TUI_DIAGNOSE_SECONDS:g}s)",
                    "median_ms": (time.perf_counter() - started) * 1000, "max_ms": None,
                    "statements": None, "server_ms": None, "seq_scans": []})
    await session.close()
    return results


async def idle_cpu(url: str, screen_key: str, seconds: float, refresh_s: float) -> dict[str, float]:
    app = AwaConsole(url, refresh_s=refresh_s, read_only=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press(screen_key)
        await pilot.pause(3)  # first refresh and diagnostics out of the way
        refreshes = app.refreshes
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.perf_counter()
        await asyncio.sleep(seconds)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.perf_counter() - wall0
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        return {"cpu_percent": 100 * cpu / wall, "refreshes": app.refreshes - refreshes,
                "seconds": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default=_support.admin_url())
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--running", type=int, default=500)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--refresh", type=float, default=config.TUI_REFRESH_SECONDS)
    parser.add_argument("--plans", action="store_true", help="print every EXPLAIN ANALYZE")
    args = parser.parse_args()

    url = build(args.admin_url, args.jobs, args.running, args.rebuild)
    results = asyncio.run(measure_refreshes(url, args.repeat, args.plans))
    print(f"\none refresh per screen (median of {args.repeat}; target < 100 ms, "
          f"no sequential scan of jobs tables)")
    print(f"{'screen':<48} {'median ms':>9} {'max ms':>7} {'stmts':>5} {'server ms':>9}  seq scans")
    for r in results:
        max_ms = f"{r['max_ms']:7.1f}" if r["max_ms"] is not None else "      -"
        stmts = f"{r['statements']:5d}" if r["statements"] is not None else "    -"
        server = f"{r['server_ms']:9.1f}" if r["server_ms"] is not None else "        -"
        print(f"{r['screen']:<48} {r['median_ms']:9.1f} {max_ms} {stmts} {server}  "
              f"{', '.join(r['seq_scans']) or 'none'}")
    for key, name in (("1", "overview"), ("2", "running")):
        cpu = asyncio.run(idle_cpu(url, key, args.idle_seconds, args.refresh))
        print(f"idle CPU on {name}: {cpu['cpu_percent']:.1f}% of one core over "
              f"{cpu['seconds']:.0f}s ({cpu['refreshes']} refreshes every {args.refresh:g}s, "
              f"ticking every 1s)")


if __name__ == "__main__":
    main()
