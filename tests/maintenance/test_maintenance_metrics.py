"""Maintenance metrics on real runtimes' Prometheus endpoints: queue-health gauges come
from the leader only; branches are timed; rescues and DLQ moves are counted."""

from __future__ import annotations

import socket

import pytest

from awa import metrics
from awa.metrics import by_name, prometheus_label, prometheus_name
from metrics.conftest import scrape, value
from runtime.conftest import wait_until
from support.processes import start_worker
from support.server_connections import with_worker_processes

from .conftest import insert_job

Q = prometheus_label(metrics.ATTR_QUEUE)
STATE = prometheus_label(metrics.ATTR_STATE)
BRANCH = prometheus_label(metrics.ATTR_BRANCH)
RESCUE_KIND = prometheus_label(metrics.ATTR_RESCUE_KIND)
REASON = prometheus_label(metrics.ATTR_DLQ_REASON)


def name(otel_name: str) -> str:
    return prometheus_name(by_name(otel_name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.connections(with_worker_processes(2))
def test_leader_publishes_queue_health_and_counts_its_work(database_url, db):
    for _ in range(3):
        insert_job(db, state="available", queue="idle", attempt=0, run_at_offset_s=-5)
    db.execute("""INSERT INTO awa.dlq_entries (job_id, kind, queue, dlq_reason)
                  VALUES (7001, 'k', 'idle', 'manual')""")
    stale = insert_job(db, queue="lost", heartbeat_age_s=60, attempt=1, max_attempts=1)
    ports = [free_port(), free_port()]
    settings = {"heartbeat_staleness_ms": 1000, "queue_health_interval_ms": 100,
                "dlq_enabled_by_default": True}
    workers = [start_worker(database_url, "default:1",
                            settings={**settings, "metrics_addr": f"127.0.0.1:{p}"})
               for p in ports]
    urls = [f"http://127.0.0.1:{p}/metrics" for p in ports]
    try:
        def leader_scrape():
            for url in urls:
                s = scrape(url)
                if value(s, name("awa.leader.active")) == 1 and value(
                        s, name("awa.queue.depth"), **{Q: "idle", STATE: "available"}) == 3:
                    return url, s
            return None

        leader_url, series = wait_until(leader_scrape, timeout=15, interval=0.2,
                                        message="the leader's queue gauges")
        assert value(series, name("awa.queue.lag"), **{Q: "idle"}) >= 4
        assert value(series, name("awa.job.dlq_depth"), **{Q: "idle"}) == 1
        assert value(series, name("awa.leader.elected")) == 1
        promote_passes = name("awa.maintenance.branch.duration") + "_count"
        assert value(series, promote_passes, **{BRANCH: "promote"}) > 0
        wait_until(lambda: db.execute("SELECT 1 FROM awa.dlq_entries WHERE job_id = %s",
                                      (stale,)).fetchone(), timeout=10, message="rescue")
        after = scrape(leader_url)
        assert value(after, name("awa.maintenance.rescues"),
                     **{Q: "lost", RESCUE_KIND: "heartbeat"}) == 1
        assert value(after, name("awa.job.dlq_moved"), **{REASON: "heartbeat_stale"}) == 1

        follower = scrape(next(u for u in urls if u != leader_url))
        assert value(follower, name("awa.leader.active")) == 0
        assert value(follower, name("awa.queue.depth")) == 0
        assert value(follower, name("awa.maintenance.rescues")) == 0
    finally:
        for w in workers:
            w.terminate()
