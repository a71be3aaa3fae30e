"""Dead tuples under a pinned MVCC horizon, canonical vs queue storage (issue 14).

    .venv/bin/python benchmarks/bloat.py --seconds 120 --rate 500          # both engines
    .venv/bin/python benchmarks/bloat.py --engines queue_storage --seconds 600
    (throughput on both engines: benchmarks/throughput.py --engines canonical,queue_storage)

Bloat mode, per engine, in a fresh database laid out for it: one session
opens a transaction, takes an xid (``txid_current()``) and stays idle in
transaction for the whole run, pinning the horizon; a worker process (no-op
handler, max_workers=64, maintenance on, cleanup every 10 s, completed history
kept ``--retention-s``, so the run shows history being reclaimed: DELETE on
canonical, rotation and TRUNCATE on queue storage) consumes; this process offers
``--rate`` jobs/s (batches of 10 every 20 ms).  Every 30 s it samples the
sum of ``n_dead_tup`` and the total size of the engine's queue tables
(canonical: jobs_hot, scheduled_jobs, job_unique_claims, dlq_entries;
queue storage: the troubleshooting guide's churn set -- ready_*, done_*,
leases*, attempt_state, deferred_jobs, dlq_entries -- and, separately, its
control rows: lane heads, receipts, closures, ring state) and the jobs
processed per second (counted by the worker's handler: retention removes rows).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import _support
import psycopg
from psycopg.conninfo import conninfo_to_dict

import awa

QUEUE = "bloat"
KIND = "noop"
SAMPLE_S = 30.0
CANONICAL_TABLES = ("jobs_hot", "scheduled_jobs", "job_unique_claims", "dlq_entries")
GUIDE_SET = """(relname = 'attempt_state' OR relname = 'deferred_jobs' OR relname = 'dlq_entries'
      OR relname LIKE 'ready_entries%%' OR relname LIKE 'ready_tombstones%%'
      OR relname LIKE 'done_entries%%' OR relname LIKE 'leases%%')"""
CONTROL_SET = """(relname LIKE 'queue_%%_heads' OR relname LIKE 'lease_claim%%'
      OR relname = 'queue_ring_state')"""
SAMPLE = f"""
SELECT sum(n_dead_tup) FILTER (WHERE {{queue_set}}) AS dead,
       sum(pg_total_relation_size(relid)) FILTER (WHERE {{queue_set}}) AS bytes,
       sum(n_dead_tup) FILTER (WHERE {CONTROL_SET}) AS control_dead,
       sum(pg_total_relation_size(relid)) FILTER (WHERE {CONTROL_SET}) AS control_bytes
  FROM pg_stat_user_tables WHERE schemaname = 'awa'"""
CANONICAL_SET = "relname = ANY(ARRAY[" + ", ".join(f"'{t}'" for t in CANONICAL_TABLES) + "])"
DONE = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
CLEANUP_INTERVAL_MS = 10_000


def engine_database(admin: str, engine: str) -> str:
    name = f"awa_bench_bloat_{engine}_{uuid.uuid4().hex[:6]}"
    return _support.create_database(admin, name, engine)


# --- the worker process -------------------------------------------------------------
async def worker_main(url: str, workers: int, retention_s: float, count_path: str) -> None:
    client = awa.AsyncClient(url)
    handled = 0

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def noop(job: Any) -> None:
        nonlocal handled
        handled += 1

    async def report() -> None:
        while True:
            await asyncio.sleep(1)
            with open(count_path + ".tmp", "w") as out:
                out.write(str(handled))
            os.replace(count_path + ".tmp", count_path)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start([{"name": QUEUE, "max_workers": workers}],
                       cleanup_interval_ms=CLEANUP_INTERVAL_MS,
                       completed_retention_hours=retention_s / 3600)
    reporter = asyncio.create_task(report())
    print("READY", flush=True)
    await stop.wait()
    reporter.cancel()
    await client.shutdown(2_000)
    await client.close()


# --- bloat mode ---------------------------------------------------------------------
async def offer(url: str, rate: int, seconds: float) -> int:
    client = awa.AsyncClient(url)
    batch = 10
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        await client.insert_many([{"i": sent + k} for k in range(batch)], kind=KIND, queue=QUEUE)
        sent += batch
        delay = started + sent / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await client.close()
    return sent


def _scalar(conn: psycopg.Connection[Any], query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0] or 0)


def sample(conn: psycopg.Connection[Any], engine: str, count_path: str) -> dict[str, Any]:
    queue_set = CANONICAL_SET if engine == "canonical" else GUIDE_SET
    row = conn.execute(SAMPLE.format(queue_set=queue_set)).fetchone()
    assert row is not None
    try:
        with open(count_path) as counted:
            done = int(counted.read() or 0)
    except FileNotFoundError:
        done = 0
    return {"dead": int(row[0] or 0), "bytes": int(row[1] or 0),
            "control_dead": int(row[2] or 0), "control_bytes": int(row[3] or 0),
            "done": done}


def run_bloat(admin: str, engine: str, rate: int, seconds: float, workers: int,
              retention_s: float) -> None:
    url = engine_database(admin, engine)
    count_path = os.path.join(tempfile.mkdtemp(prefix="awa-bloat-"), "handled")
    try:
        pin = psycopg.connect(url)
        pin.execute("SELECT txid_current()")  # idle in transaction from here on
        proc = subprocess.Popen([sys.executable, __file__, "--worker-process", url,
                                 str(workers), str(retention_s), count_path],
                                stdout=subprocess.PIPE, text=True)
        if not (proc.stdout and proc.stdout.readline().startswith("READY")):
            raise SystemExit("worker failed to start")

        async def drive() -> int:
            return await offer(url, rate, seconds)

        samples: list[tuple[float, dict[str, Any]]] = []
        import threading
        sent_box: list[int] = []
        thread = threading.Thread(target=lambda: sent_box.append(asyncio.run(drive())))
        started = time.monotonic()
        thread.start()
        with psycopg.connect(url, autocommit=True) as conn:
            next_at = started + SAMPLE_S
            while thread.is_alive() or not samples or samples[-1][0] < seconds:
                time.sleep(max(0.0, min(next_at - time.monotonic(), 1.0)))
                if time.monotonic() >= next_at:
                    samples.append((time.monotonic() - started,
                                    sample(conn, engine, count_path)))
                    next_at += SAMPLE_S
                if not thread.is_alive() and samples and samples[-1][0] >= seconds:
                    break
            thread.join()
            time.sleep(3)
            final = sample(conn, engine, count_path)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        pin.close()
        sent = sent_box[0] if sent_box else 0
        print(f"\n{engine}: offered {rate}/s for {seconds:.0f}s ({sent} jobs), "
              f"pinned horizon throughout, completed history kept {retention_s:.0f}s")
        print(f"{'t(s)':>6} {'dead tuples':>12} {'size MB':>8} {'control dead':>13} "
              f"{'control MB':>10} {'processed/s':>12}")
        previous_t, previous_done = 0.0, 0
        for t, s in samples:
            rate_now = (s["done"] - previous_done) / (t - previous_t)
            print(f"{t:>6.0f} {s['dead']:>12} {s['bytes'] / 1e6:>8.1f} {s['control_dead']:>13} "
                  f"{s['control_bytes'] / 1e6:>10.1f} {rate_now:>12.0f}")
            previous_t, previous_done = t, s["done"]
        print(f"  end: completed {final['done']} of {sent} "
              f"({100 * final['done'] / max(sent, 1):.1f}%), queue tables {final['dead']} dead "
              f"/ {final['bytes'] / 1e6:.1f} MB, control {final['control_dead']} dead "
              f"/ {final['control_bytes'] / 1e6:.1f} MB", flush=True)
    finally:
        _support.drop_database(admin, str(conninfo_to_dict(url)["dbname"]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker-process":
        asyncio.run(worker_main(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="canonical,queue_storage")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--workers", default="64")
    parser.add_argument("--retention-s", type=float, default=60.0,
                        help="completed history kept (the worker's completed_retention_hours)")
    args = parser.parse_args()
    admin = _support.admin_url()
    engines = args.engines.split(",")
    print(f"machine: {os.cpu_count()} cores (shared with other work while measuring)")
    for engine in engines:
        run_bloat(admin, engine, args.rate, args.seconds, int(args.workers.split(",")[0]),
                  args.retention_s)


if __name__ == "__main__":
    main()
