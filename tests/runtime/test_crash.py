"""Real worker subprocesses: SIGKILL mid-job, and many processes sharing a queue."""

from __future__ import annotations

import collections
import time

import pytest

import awa
from support.processes import start_worker
from support.server_connections import with_worker_processes

from .conftest import job_row, wait_until


@pytest.mark.connections(with_worker_processes(1))
def test_sigkill_mid_job_leaves_it_running_with_a_stalled_heartbeat(database_url, db, log_dir):
    worker = start_worker(database_url, "default:2", log_dir=log_dir,
                          settings={"run_maintenance": False})  # no rescue in this test
    with awa.Client(database_url) as client:
        job = client.insert({"seconds": 30}, kind="slow")
    worker.wait_for_log("start", kind="slow")
    # Heartbeats advance while the worker lives (interval 100 ms).
    first = job_row(db, job.id)["heartbeat_at"]
    wait_until(lambda: job_row(db, job.id)["heartbeat_at"] > first, timeout=5,
               message="heartbeat to advance")
    # Progress reported by the handler travels with the heartbeats.
    wait_until(lambda: job_row(db, job.id)["progress"], timeout=5, message="progress flushed")
    worker.kill()
    time.sleep(0.1)  # a heartbeat statement already sent when the kill landed may still commit
    killed = job_row(db, job.id)
    time.sleep(0.5)  # five heartbeat intervals
    after = job_row(db, job.id)
    assert after["state"] == "running"
    assert after["attempt"] == 1
    assert after["heartbeat_at"] == killed["heartbeat_at"]
    assert after["progress"]["percent"] > 0


@pytest.mark.connections(with_worker_processes(4))
def test_ten_thousand_jobs_across_four_processes_each_run_once(database_url, db, log_dir):
    total = 10_000
    workers = [start_worker(database_url, "default:32", log_dir=log_dir,
                            settings={"run_maintenance": False}) for _ in range(4)]
    try:
        with awa.Client(database_url) as client:
            for _ in range(10):
                client.enqueue_many_copy([{} for _ in range(total // 10)], kind="fast")
        wait_until(lambda: db.execute("SELECT count(*) AS n FROM awa.jobs "
                                      "WHERE state = 'completed'").fetchone()["n"] == total,
                   timeout=120, interval=0.2, message="all jobs completed")
    finally:
        for w in workers:
            assert w.terminate() == 0
    rows = db.execute("SELECT state::text AS state, attempt, count(*) AS n FROM awa.jobs "
                      "GROUP BY 1, 2").fetchall()
    assert rows == [{"state": "completed", "attempt": 1, "n": total}]
    runs = collections.Counter()
    per_worker = []
    for w in workers:
        done = [line.split() for line in w.log_lines() if line.startswith("done")]
        per_worker.append(len(done))
        runs.update(int(parts[2]) for parts in done)
    assert len(runs) == total and set(runs.values()) == {1}, "a job ran twice or never"
    assert all(n > 0 for n in per_worker), f"a worker got nothing: {per_worker}"
