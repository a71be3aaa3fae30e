"""End to end: a real Prometheus scrapes a running runtime and `awa-ops exporter` during a mixed
workload with a crashed worker and a pinned horizon, and loads the generated alert rules.

Every dashboard query must evaluate through Prometheus' HTTP API, and be non-empty whenever
the workload produced the metrics it reads; the pinned horizon must drive AwaXminHorizonPinned
to pending or firing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
import yaml

from awa import metrics
from awa_ops.generate import ALERTS_DIR, DASHBOARDS_DIR, render
from awa_ops.generate.alerts import RULES_FILE, Thresholds
from awa_ops.generate.promql import references, substitute_grafana_variables
from metrics.prometheus_server import PrometheusServer, free_port
from support.processes import start_worker

# Windows short enough for a test that lives seconds, long enough for >= 2 scrapes at 1 s.
E2E_SUBSTITUTIONS = {"$__rate_interval": "15s", "${queue:regex}": ".*", "$queue": ".*"}
# Thresholds small enough that the test's pinned horizon crosses them within seconds.
E2E_THRESHOLDS = Thresholds(xmin_horizon_age_seconds=1,
                            for_overrides={"AwaXminHorizonPinned": "2s"})
# What this workload must produce (so "non-empty when produced" is not vacuous).
PRODUCED = {
    "awa.job.claimed", "awa.job.completed", "awa.job.failed", "awa.job.retried",
    "awa.job.snoozed", "awa.job.in_flight", "awa.job.duration", "awa.job.wait_duration",
    "awa.job.dlq_moved", "awa.job.dlq_depth", "awa.queue.depth", "awa.queue.lag",
    "awa.dispatch.claim_batches", "awa.dispatch.claim_batch_size",
    "awa.dispatch.claim_duration", "awa.dispatch.wakeups", "awa.completion.flushes",
    "awa.completion.flush_batch_size", "awa.completion.flush_duration",
    "awa.heartbeat.batches", "awa.maintenance.rescues", "awa.maintenance.promoted",
    "awa.maintenance.promote_batches", "awa.maintenance.promote_duration",
    "awa.dispatch.empty_claims",
    "awa.maintenance.branch.duration", "awa.leader.elected", "awa.leader.active",
    "awa.runtime.info",
} | {entry.name for entry in metrics.DATABASE_METRICS
     if entry.name not in ("awa.db.table.last_autovacuum_age",  # needs an autovacuum run
                           "awa.db.unique.wedged")}  # needs a unique-claim wedge


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def start_exporter(database_url: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "awa_ops.cli", "exporter", "--database-url",
                             database_url, "--listen", f"127.0.0.1:{port}",
                             "--heartbeat-staleness", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def serving():
        assert proc.poll() is None, proc.stderr.read()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(serving, 15, "the exporter")
    return proc


def dashboard_queries(files: dict[str, str]) -> list[tuple[str, str]]:
    queries = []
    for name, text in files.items():
        if not name.startswith(DASHBOARDS_DIR):
            continue
        dashboard = json.loads(text)
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                queries.append((f"{dashboard['title']} / {panel['title']}", target["expr"]))
        for annotation in dashboard["annotations"]["list"]:
            queries.append((f"{dashboard['title']} / annotation {annotation['name']}",
                            annotation["expr"]))
    return queries


def insert_jobs(db, kind: str, queue: str, n: int, args: str = "{}", max_attempts: int = 25):
    db.execute("INSERT INTO awa.jobs_hot (kind, queue, args, max_attempts) "
               "SELECT %s, %s, %s::jsonb, %s FROM generate_series(1, %s)",
               (kind, queue, args, max_attempts, n))


@pytest.mark.timeout(120)
def test_prometheus_evaluates_every_dashboard_query_and_the_horizon_alert(
        database_url, db, tmp_path):
    files = render(E2E_THRESHOLDS, "")
    rules_path = tmp_path / RULES_FILE
    rules_path.write_text(files[f"{ALERTS_DIR}/{RULES_FILE}"])

    runtime_port, exporter_port = free_port(), free_port()
    prometheus = PrometheusServer({"awa-runtime": [f"127.0.0.1:{runtime_port}"],
                                   "awa-exporter": [f"127.0.0.1:{exporter_port}"]},
                                  rule_files=[str(rules_path)])
    exporter = runtime = crashing = pin = None
    try:
        # start everything at once: the processes' start-up dominates this test's time
        with ThreadPoolExecutor(4) as pool:
            started = [
                pool.submit(start_exporter, database_url, exporter_port),
                pool.submit(start_worker, database_url, "default:8,email:4", settings={
                    "metrics_addr": f"127.0.0.1:{runtime_port}", "dlq_enabled_by_default": True,
                    "shutdown_timeout_ms": 300}),
                # a second worker that dies (SIGKILL by its own poison job) holding a running
                # attempt; the first takes over leadership if needed and rescues it
                pool.submit(start_worker, database_url, "doomed:1"),
                pool.submit(prometheus.start),
            ]
            exporter, runtime, crashing, _ = [future.result() for future in started]
        insert_jobs(db, "crash", "doomed", 1, max_attempts=1)
        wait_until(lambda: crashing.proc.poll() is not None, 15, "the worker to crash")

        # the mixed workload, on the surviving runtime
        insert_jobs(db, "fast", "default", 200)
        insert_jobs(db, "fast", "email", 50)
        insert_jobs(db, "slow", "default", 12, '{"seconds": 0.6}')
        insert_jobs(db, "fail", "email", 4, '{"message": "smtp down"}', max_attempts=2)
        insert_jobs(db, "terminal", "email", 3)
        insert_jobs(db, "snooze", "default", 3, '{"seconds": 0.2}')
        insert_jobs(db, "retry_after", "default", 3, '{"seconds": 0.2}', max_attempts=2)
        # still running and still waiting while the dashboards are evaluated
        insert_jobs(db, "slow", "email", 2, '{"seconds": 60}')
        insert_jobs(db, "fast", "doomed", 5)  # nobody serves "doomed" any more: a backlog

        # a pinned horizon: an idle-in-transaction session holding an xid
        pin = psycopg.connect(database_url, autocommit=False)
        pin.execute("SELECT txid_current()")

        def crashed_attempt_rescued():
            return prometheus.query('sum(awa_maintenance_rescues_total{awa_rescue_kind="heartbeat"}) > 0')

        wait_until(crashed_attempt_rescued, 30, "the crashed worker's attempt to be rescued")

        def horizon_alert():
            return [a for a in httpx.get(f"{prometheus.url}/api/v1/alerts", timeout=5)
                    .json()["data"]["alerts"]
                    if a["labels"]["alertname"] == "AwaXminHorizonPinned"
                    and a["state"] in ("pending", "firing")]

        alert = wait_until(horizon_alert, 30, "AwaXminHorizonPinned to be pending or firing")
        assert alert[0]["labels"]["awa_db_xmin_source"] == "transaction"
        assert alert[0]["labels"]["severity"] == "warning"

        # past its 2 s for:, it fires (and so the dashboards' alert annotation has data)
        wait_until(lambda: prometheus.query(
            'ALERTS{alertname="AwaXminHorizonPinned", alertstate="firing"}'), 20,
            "AwaXminHorizonPinned to fire")

        # let completions, rescues and DLQ moves land in a few scrapes
        wait_until(lambda: prometheus.query("sum(awa_job_dlq_moved_total) >= 3"), 20,
                   "terminal jobs to reach the DLQ")
        time.sleep(1.5)  # so the newest series have two samples for rate()

        # one instant query for every awa series name that exists right now
        names = {sample["metric"]["__name__"] for sample in prometheus.query(
            'count by (__name__) ({__name__=~"awa_.*"})')}
        present = {entry.name for entry in metrics.ALL_METRICS
                   if names & set(metrics.prometheus_series(entry))}
        assert PRODUCED <= present, f"the workload did not produce {sorted(PRODUCED - present)}"

        queries = dashboard_queries(files)
        with ThreadPoolExecutor(8) as pool:  # each query raises on an evaluation error
            results = list(pool.map(
                lambda query: prometheus.query(substitute_grafana_variables(query[1],
                                                                            E2E_SUBSTITUTIONS)),
                queries))
        empty = []
        for (where, expr), result in zip(queries, results):
            needed = {metrics.by_prometheus_name(name).name
                      for name in references(expr).metrics
                      if metrics.by_prometheus_name(name) is not None}
            if needed <= present and not result:
                empty.append(f"{where}: {substitute_grafana_variables(expr, E2E_SUBSTITUTIONS)}")
        evaluated = len(results)
        assert evaluated > 60
        assert not empty, "queries empty although their metrics exist:\n" + "\n".join(empty)

        # every alert expression evaluates too (most are rightly empty on a healthy system)
        rules = yaml.safe_load(files[f"{ALERTS_DIR}/{RULES_FILE}"])["groups"][0]["rules"]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda rule: prometheus.query(rule["expr"]), rules))

        # the queue variable of every dashboard has values
        queues = httpx.get(f"{prometheus.url}/api/v1/label/awa_job_queue/values",
                           params={"match[]": "awa_db_queue_depth"}, timeout=5).json()["data"]
        assert {"email", "doomed"} <= set(queues)  # the queues with live jobs right now
    finally:
        if pin is not None:
            pin.close()
        for worker in (crashing, runtime):
            if worker is not None:
                worker.kill()
        if exporter is not None:
            exporter.terminate()
            exporter.wait(timeout=10)
        prometheus.stop()
