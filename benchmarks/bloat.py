"""Dead tuples under a pinned MVCC horizon, canonical vs queue storage (issue 14).

    .venv/bin/python benchmarks/bloat.py --seconds 120 --rate 500          # both engines
    .venv/bin/python benchmarks/bloat.py --engines queue_storage --seconds 600
    .venv/bin/python benchmarks/bloat.py --throughput --workers 64          # throughput.py on both

Bloat mode, per engine, in a fresh database laid out for it: one session
opens a transaction, takes an xid (``txid_current()``) and stays idle in
transaction for the whole run, pinning the horizon; a worker process (no-op
handler, max_workers=64, maintenance on) consumes; this process offers
``--rate`` jobs/s (batches of 10 every 20 ms).  On queue storage the
driver also runs the leader's ring tick (rotate + prune) every 10 s, since
the runtime's maintenance does not call it yet.  Every 30 s it samples the
sum of ``n_dead_tup`` and the total size of the engine's queue tables
(canonical: jobs_hot, scheduled_jobs, job_unique_claims, dlq_entries;
queue storage: the troubleshooting guide's churn set -- ready_*, done_*,
leases*, attempt_state, deferred_jobs, dlq_entries -- and, separately, its
control rows: lane heads, receipts, closures, ring state) and the jobs
processed per second.

Throughput mode runs ``throughput.py``'s measurement (same worker, same
COPY enqueue) against each engine, W as given, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Coroutine
from typing import Any

import _support
import psycopg
from psycopg.conninfo import conninfo_to_dict

import awa
from awa.storage.queue_storage import install_queue_storage_sync

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


def register_queue_storage() -> None:
    """Engine selection learns queue storage (until the lead wires it into awa.storage)."""
    import awa.storage
    from awa.storage import queue_storage
    awa.storage.ENGINES.setdefault(queue_storage.NAME, queue_storage.load)


def engine_database(admin: str, engine: str) -> str:
    name = f"awa_bench_bloat_{engine}_{uuid.uuid4().hex[:6]}"
    url = _support.create_database(admin, name)
    if engine == "queue_storage":
        with psycopg.connect(url, autocommit=True) as conn:
            install_queue_storage_sync(conn)
    return url


# --- the worker process -------------------------------------------------------------
async def worker_main(url: str, workers: int) -> None:
    register_queue_storage()
    client = awa.AsyncClient(url)

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def noop(job: Any) -> None:
        return None

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start([{"name": QUEUE, "max_workers": workers}])
    print("READY", flush=True)
    await stop.wait()
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


async def ring_ticks(url: str, seconds: float) -> None:
    from awa.storage.queue_storage import ENGINE
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            await asyncio.sleep(10)
            await ENGINE.rotate_and_prune(conn)


def _scalar(conn: psycopg.Connection[Any], query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0] or 0)


def sample(conn: psycopg.Connection[Any], engine: str) -> dict[str, Any]:
    queue_set = CANONICAL_SET if engine == "canonical" else GUIDE_SET
    row = conn.execute(SAMPLE.format(queue_set=queue_set)).fetchone()
    assert row is not None
    return {"dead": int(row[0] or 0), "bytes": int(row[1] or 0),
            "control_dead": int(row[2] or 0), "control_bytes": int(row[3] or 0),
            "done": _scalar(conn, DONE)}


def run_bloat(admin: str, engine: str, rate: int, seconds: float, workers: int) -> None:
    url = engine_database(admin, engine)
    try:
        pin = psycopg.connect(url)
        pin.execute("SELECT txid_current()")  # idle in transaction from here on
        proc = subprocess.Popen([sys.executable, __file__, "--worker-process", url,
                                 str(workers)], stdout=subprocess.PIPE, text=True)
        if not (proc.stdout and proc.stdout.readline().startswith("READY")):
            raise SystemExit("worker failed to start")

        async def drive() -> int:
            tasks: list[Coroutine[Any, Any, Any]] = [offer(url, rate, seconds)]
            if engine == "queue_storage":
                tasks.append(ring_ticks(url, seconds))
            results = await asyncio.gather(*tasks)
            return int(results[0])

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
                    samples.append((time.monotonic() - started, sample(conn, engine)))
                    next_at += SAMPLE_S
                if not thread.is_alive() and samples and samples[-1][0] >= seconds:
                    break
            thread.join()
            time.sleep(2)
            final = sample(conn, engine)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        pin.close()
        sent = sent_box[0] if sent_box else 0
        print(f"\n{engine}: offered {rate}/s for {seconds:.0f}s ({sent} jobs), "
              f"pinned horizon throughout")
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


# --- throughput mode ------------------------------------------------------------------
SPAN = ("SELECT extract(epoch FROM max(finalized_at) - min(created_at)), max(attempt) "
        "FROM awa.jobs WHERE queue = 'bench'")


def run_throughput(admin: str, engine: str, workers: int, jobs: int) -> dict[str, Any]:
    """``throughput.py``'s measurement, its rows read through the ``awa.jobs`` view."""
    import throughput

    url = engine_database(admin, engine)
    try:
        proc = throughput.spawn_worker([sys.executable, __file__, "--throughput-worker", url,
                                        str(workers), str(awa.config.CLAIM_BATCH_SIZE)])
        with psycopg.connect(url, autocommit=True) as conn:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.1)
            enqueue_s = asyncio.run(throughput.enqueue_all(url, jobs))
            while _scalar(conn, DONE) < jobs:
                if proc.poll() is not None:
                    raise SystemExit(f"the worker process died ({proc.returncode})")
                time.sleep(0.01)
            row = conn.execute(SPAN).fetchone()
            assert row is not None and proc.stdout is not None
            span, attempts = row
            proc.send_signal(signal.SIGUSR1)
            cpu = json.loads(proc.stdout.readline())["cpu_s"]
            latencies = pickup(url, 100)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        return {"enqueue_per_s": jobs / enqueue_s, "processed_per_s": jobs / float(span),
                "cpu_ms_per_job": 1000 * cpu / jobs,
                "pickup_p50_ms": _support.percentile(latencies, 50),
                "pickup_p95_ms": _support.percentile(latencies, 95), "max_attempt": attempts}
    finally:
        _support.drop_database(admin, str(conninfo_to_dict(url)["dbname"]))


def pickup(url: str, samples: int) -> list[float]:
    """throughput.py's pickup probe through the client (works on either engine)."""
    async def probe() -> list[float]:
        out = []
        async with awa.AsyncClient(url) as client:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                for _ in range(samples):
                    job = await client.insert({}, kind=KIND, queue="bench")
                    while True:
                        cur = await conn.execute(
                            "SELECT extract(epoch FROM attempted_at - created_at) FROM awa.jobs "
                            "WHERE id = %s AND attempted_at IS NOT NULL", (job.id,))
                        row = await cur.fetchone()
                        if row:
                            out.append(1000 * float(row[0]))
                            break
                        await asyncio.sleep(0.001)
                    await asyncio.sleep(0.02)
        return out
    return asyncio.run(probe())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker-process":
        asyncio.run(worker_main(sys.argv[2], int(sys.argv[3])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--throughput-worker":
        register_queue_storage()
        import throughput
        asyncio.run(throughput.worker_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                           None))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="canonical,queue_storage")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--workers", default="64")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--throughput", action="store_true")
    args = parser.parse_args()
    register_queue_storage()
    admin = _support.admin_url()
    engines = args.engines.split(",")
    print(f"machine: {os.cpu_count()} cores (shared with other work while measuring)")
    if args.throughput:
        print(f"{'engine':>14} {'W':>5} {'enqueue/s':>10} {'processed/s':>12} {'CPU ms/job':>11} "
              f"{'pickup p50':>11} {'pickup p95':>11}")
        for w in [int(x) for x in args.workers.split(",")]:
            for engine in engines:
                r = run_throughput(admin, engine, w, args.jobs)
                assert r["max_attempt"] == 1, "a job was claimed twice"
                print(f"{engine:>14} {w:>5} {r['enqueue_per_s']:>10.0f} "
                      f"{r['processed_per_s']:>12.0f} {r['cpu_ms_per_job']:>11.3f} "
                      f"{r['pickup_p50_ms']:>9.1f}ms {r['pickup_p95_ms']:>9.1f}ms", flush=True)
        return
    for engine in engines:
        run_bloat(admin, engine, args.rate, args.seconds, int(args.workers.split(",")[0]))


if __name__ == "__main__":
    main()
