"""No false alarms on a healthy busy queue; the exporter serves the catalogue's metrics."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

import awa
from awa import metrics
from ops.ops_helpers import summaries
from support.processes import start_worker
from support.server_connections import with_worker_processes


@pytest.mark.connections(with_worker_processes(1))
def test_healthy_busy_queue_every_check_is_ok(ops, database_url, db):
    worker = start_worker(database_url, "default:8,email:4")
    try:
        with awa.Client(database_url) as client:
            for queue in ("default", "email"):
                client.insert_many([{"seconds": 0.4}] * 40, kind="slow", queue=queue)
            client.insert_many([{}] * 300, kind="fast")
        time.sleep(1.0)  # jobs running, heartbeating, completing; the runtime elected itself
        running = db.execute("SELECT count(*) AS n FROM awa.jobs WHERE state = 'running'"
                             ).fetchone()["n"]
        assert running > 0
        # The runtime's own cutoff is 1 s; 5 s keeps a loaded test machine from turning a
        # late heartbeat into a (true, but unwanted here) warning.
        result = ops("all", "--heartbeat-staleness", "5", "--election-interval", "0.2")
        bad = {c["check"]: summaries(c) for c in result.data["checks"] if c["status"] != "ok"}
        assert result.code == 0 and not bad, bad
        assert "live runtime" in result.check("runtime")["findings"][0]["summary"]
    finally:
        worker.terminate()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_exporter_serves_database_metrics_when_no_worker_runs(database_url, db):
    with awa.Client(database_url) as client:
        client.insert_many([{}] * 7, kind="fast", queue="mail")
    db.execute("""INSERT INTO awa.dlq_entries (job_id, kind, queue, dlq_reason)
                  VALUES (990001, 'fast', 'mail', 'terminal_error')""")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "awa_ops.cli", "exporter", "--database-url",
                             database_url, "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    for spec in metrics.DATABASE_METRICS:
        assert f"# HELP {spec.prometheus} " in body, spec.prometheus
    assert 'awa_db_queue_depth{awa_job_queue="mail",awa_job_state="available"} 7.0' in body
    assert 'awa_db_dlq_depth{awa_dlq_reason="terminal_error",awa_job_queue="mail"} 1.0' in body
    assert "awa_db_leader_present 0.0" in body and "awa_db_runtimes_live 0.0" in body
    assert "awa_db_exporter_scrape_success 1.0" in body


def test_exporter_bad_listen_and_unreachable_database_are_one_line():
    bad = subprocess.run([sys.executable, "-m", "awa_ops.cli", "exporter", "--listen", "nonsense",
                          "--database-url", "postgresql://x@127.0.0.1:1/x"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 3 and len(bad.stderr.strip().splitlines()) == 1
    assert "--listen must be HOST:PORT" in bad.stderr
    down = subprocess.run([sys.executable, "-m", "awa_ops.cli", "exporter", "--listen",
                           f"127.0.0.1:{_free_port()}", "--database-url",
                           "postgresql://x@127.0.0.1:1/x"], capture_output=True, text=True,
                          timeout=30)
    assert down.returncode == 3 and "cannot connect" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr


async def test_exporter_emits_zero_series_for_every_known_queue(database_url, db):
    """Queues from queue_meta, from jobs and from live runtimes all get their per-queue
    series, zeros included (the busiest queue, all of whose jobs just finished, too)."""
    import json
    import uuid

    import awa
    from awa_ops.exporter import DatabaseCollector

    async with awa.AsyncClient(database_url) as client:
        await client.insert({"n": 1}, kind="fast", queue="mail")  # holds a job
        await client.pause_queue("paused-only")  # a queue_meta row, no jobs
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,
                      last_seen_at, snapshot_interval_ms, leader, queues)
                  VALUES (%s, 'h', 1, now(), now(), 10000, true, %s)""",
               [str(uuid.uuid4()), json.dumps([{"name": "busy"}])])
    collector = DatabaseCollector(database_url, heartbeat_staleness_s=1.0)
    try:
        families = {m.name: m for m in await collector.scrape()}
    finally:
        await collector.close()

    def series(name: str) -> dict[tuple[str, ...], float]:
        return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples}

    depth = series("awa_db_queue_depth")
    for queue in ("mail", "paused-only", "busy"):
        for state in awa.lifecycle.DEPTH_STATES:
            key = (("awa_job_queue", queue), ("awa_job_state", state))
            assert key in depth, (queue, state, sorted(depth))
    assert depth[(("awa_job_queue", "mail"), ("awa_job_state", "available"))] == 1
    assert depth[(("awa_job_queue", "busy"), ("awa_job_state", "available"))] == 0
    for name in ("awa_db_queue_lag_seconds", "awa_db_running_heartbeat_stale",
                 "awa_db_running_deadline_overdue", "awa_db_running_oldest_heartbeat_age_seconds",
                 "awa_db_unique_wedged"):
        got = {dict(k)["awa_job_queue"] for k in series(name)}
        assert got >= {"mail", "paused-only", "busy"}, (name, got)
    dlq = series("awa_db_dlq_depth")
    assert dlq[(("awa_dlq_reason", "none"), ("awa_job_queue", "busy"))] == 0
