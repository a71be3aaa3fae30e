"""End to end: a real Prometheus scrapes a running runtime and `awa-ops exporter` during a mixed
workload with a crashed worker and a pinned horizon, and loads the generated alert rules.

Every dashboard query must evaluate through Prometheus' HTTP API, and be non-empty whenever
the workload produced the metrics it reads; the pinned horizon must drive AwaXminHorizonPinned
to pending and then firing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
import yaml

import awa
from awa import metrics
from awa_ops.generate import ALERTS_DIR, DASHBOARDS_DIR, render
from awa_ops.generate.alerts import RULES_FILE, Thresholds
from awa_ops.generate.promql import references, substitute_grafana_variables
from metrics.prometheus_server import PrometheusServer, free_port
from support.processes import SHORT_INTERVALS, start_worker

# Windows short enough for a test that lives seconds, long enough for >= 2 scrapes at 1 s.
E2E_SUBSTITUTIONS = {"$__rate_interval": "15s", "${queue:regex}": ".*", "$queue": ".*"}
# Thresholds small enough that the test's pinned horizon crosses them within seconds.
E2E_THRESHOLDS = Thresholds(xmin_horizon_age_seconds=1,
                            for_overrides={"AwaXminHorizonPinned": "2s"})
# What this workload must produce (so "non-empty when produced" is not vacuous).
PRODUCED = {
    "awa.job.claimed", "awa.job.completed", "awa.job.failed", "awa.job.retried",
    "awa.job.cancelled", "awa.job.snoozed", "awa.job.waiting_external", "awa.job.in_flight",
    "awa.job.duration", "awa.job.wait_duration", "awa.job.dlq_moved", "awa.job.dlq_depth",
    "awa.queue.depth", "awa.queue.lag", "awa.dispatch.claim_batches",
    "awa.dispatch.claim_batch_size", "awa.dispatch.claim_duration", "awa.dispatch.wakeups",
    "awa.dispatch.empty_claims", "awa.dispatch.rate_limited", "awa.completion.stale_ignored",
    "awa.completion.flushes", "awa.completion.flush_batch_size",
    "awa.completion.flush_duration", "awa.heartbeat.batches", "awa.maintenance.rescues",
    "awa.maintenance.promoted", "awa.maintenance.promote_batches",
    "awa.maintenance.promote_duration", "awa.maintenance.branch.duration",
    "awa.leader.elected", "awa.leader.active", "awa.callback.resolved",
    "awa.enqueue.batch_size", "awa.enqueue.duration", "awa.runtime.info",
} | {entry.name for entry in metrics.DATABASE_METRICS
     if entry.name not in ("awa.db.table.last_autovacuum_age",  # needs an autovacuum run
                           "awa.db.unique.wedged",  # needs a unique-claim wedge
                           "awa.db.cron.overdue",  # one series per cron schedule: none here
                           # one series per replication slot: the shared server has none
                           # (tests/topology/test_abandoned_slot.py reads it on a real one)
                           "awa.db.replication_slot.retained_wal_bytes")}

# The leader's ring series, on a database laid out for queue storage (one cleanup tick).
QUEUE_STORAGE_PRODUCED = {
    "awa.maintenance.rotate.attempts", "awa.maintenance.rotate.duration",
    "awa.maintenance.prune.duration", "awa.ring.current_slot", "awa.ring.generation",
    "awa.ring.slot_count", "awa.ring.occupied_slots", "awa.storage.info",
}


async def wait_until(predicate, timeout: float, what: str):
    """Poll a blocking predicate (in a thread, so the runtime's loop keeps running)."""
    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(predicate)
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)


def start_exporter(database_url: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "awa_ops.cli", "exporter", "--database-url",
                             database_url, "--listen", f"127.0.0.1:{port}",
                             "--heartbeat-staleness", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # generous: a process start on a loaded 2-core machine
    stderr = proc.stderr
    assert stderr is not None  # stderr=PIPE
    while True:
        assert proc.poll() is None, stderr.read()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the exporter did not start"
        time.sleep(0.1)


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


def register_handlers(client: awa.AsyncClient) -> None:
    @client.task(dict, kind="e2e_fast")
    async def fast(job):
        return None

    @client.task(dict, kind="e2e_slow")
    async def slow(job):  # runs until done or cancelled; a cancelled run reports late (stale)
        for _ in range(int(job.args["seconds"] / 0.05)):
            if job.is_cancelled():
                await asyncio.sleep(0.2)
                return awa.Cancel("stopped")
            await asyncio.sleep(0.05)

    @client.task(dict, kind="e2e_fail")
    async def fail(job):
        raise RuntimeError("smtp down")

    @client.task(dict, kind="e2e_terminal")
    async def terminal(job):
        raise awa.TerminalError("malformed address")

    @client.task(dict, kind="e2e_snooze")
    async def snooze(job):
        if not job.metadata.get("snoozed"):
            job.update_metadata({"snoozed": True})
            return awa.Snooze(0.2)
        return None

    @client.task(dict, kind="e2e_retry")
    async def retry(job):
        return awa.RetryAfter(0.2) if job.attempt == 1 else None

    @client.task(dict, kind="e2e_cancel")
    async def cancel(job):
        return awa.Cancel("not needed")

    @client.task(dict, kind="e2e_wait")
    async def wait(job):
        token = await job.register_callback(timeout_seconds=3600)
        return awa.WaitForCallback(token)


@pytest.mark.connections(20)
@pytest.mark.timeout(120)
async def test_prometheus_evaluates_every_dashboard_query_and_the_horizon_alert(
        client, database_url, db, tmp_path, test_engine):
    files = render(E2E_THRESHOLDS, "")
    produced = PRODUCED | (QUEUE_STORAGE_PRODUCED if test_engine == "queue_storage" else set())
    if test_engine != "queue_storage":  # canonical has no rings: the exporter reports none
        produced = {name for name in produced if not name.startswith("awa.db.ring.")}
    rules_path = tmp_path / RULES_FILE
    rules_path.write_text(files[f"{ALERTS_DIR}/{RULES_FILE}"])
    runtime_port, exporter_port = free_port(), free_port()
    prometheus = PrometheusServer({"awa-runtime": [f"127.0.0.1:{runtime_port}"],
                                   "awa-exporter": [f"127.0.0.1:{exporter_port}"]},
                                  rule_files=[str(rules_path)])
    register_handlers(client)
    exporter = crashing = pin = None
    query = prometheus.query
    try:
        # processes start while the runtime starts: their start-up dominates this test
        with ThreadPoolExecutor(3) as pool:
            started = [pool.submit(start_exporter, database_url, exporter_port),
                       # a worker that dies (SIGKILL by its own poison job) holding an attempt
                       pool.submit(start_worker, database_url, "doomed:1"),
                       pool.submit(prometheus.start)]
            await client.start(
                [{"name": "default", "max_workers": 8},
                 {"name": "email", "max_workers": 4, "dlq_enabled": True,
                  "rate_limit": (20, 2)}],
                metrics_addr=f"127.0.0.1:{runtime_port}", **SHORT_INTERVALS)
            exporter, crashing, _ = [await asyncio.wrap_future(f) for f in started]

        await client.insert_many([{}], kind="crash", queue="doomed", max_attempts=1)
        # the mixed workload, through the producer (so enqueue metrics are recorded too)
        await client.insert_many([{}] * 150, kind="e2e_fast")
        await client.insert_many([{}] * 40, kind="e2e_fast", queue="email")
        await client.insert_many([{"seconds": 0.5}] * 8, kind="e2e_slow")
        await client.insert_many([{}] * 3, kind="e2e_fail", queue="email", max_attempts=2)
        await client.insert_many([{}] * 3, kind="e2e_terminal", queue="email")
        for kind in ("e2e_snooze", "e2e_retry", "e2e_cancel", "e2e_wait"):
            await client.insert_many([{}] * 2, kind=kind)
        # still running, and still waiting, while the dashboards are evaluated
        running = await client.insert_many([{"seconds": 60}] * 3, kind="e2e_slow",
                                           queue="email")
        await client.insert_many([{}] * 5, kind="e2e_fast", queue="doomed")  # nobody serves it

        # a pinned horizon: an idle-in-transaction session holding an xid
        pin = psycopg.connect(database_url, autocommit=False)
        pin.execute("SELECT txid_current()")

        await wait_until(lambda: crashing.proc.poll() is not None, 15, "the worker to crash")
        # operator actions: cancel a running job, resolve a callback, retry and purge the DLQ
        await wait_until(lambda: db.execute(
            "SELECT count(*) AS n FROM awa.jobs WHERE id = %s AND state = 'running'",
            (running[0].id,)).fetchone()["n"], 15, "a long job to run")
        await client.cancel(running[0].id)
        (waiting,) = await wait_until(lambda: db.execute(
            "SELECT callback_id FROM awa.jobs WHERE state = 'waiting_external' LIMIT 1"
        ).fetchall(), 15, "a job waiting for its callback")
        await client.complete_external(str(waiting["callback_id"]))
        dlq = await wait_until(lambda: db.execute(
            "SELECT job_id FROM awa.dlq_entries WHERE kind = 'e2e_terminal' ORDER BY job_id"
        ).fetchall()[2:] and db.execute("SELECT job_id FROM awa.dlq_entries").fetchall(), 15,
            "the terminal jobs in the DLQ")
        assert await client.retry_from_dlq(dlq[0]["job_id"]) is not None
        assert await client.purge_dlq_job(dlq[1]["job_id"])  # dlq[2] stays: a DLQ depth

        await wait_until(lambda: query(
            'sum(awa_maintenance_rescues_total{awa_rescue_kind="heartbeat"}) > 0'), 30,
            "the crashed worker's attempt to be rescued")

        def horizon_alert():
            return [a for a in httpx.get(f"{prometheus.url}/api/v1/alerts", timeout=5)
                    .json()["data"]["alerts"]
                    if a["labels"]["alertname"] == "AwaXminHorizonPinned"
                    and a["state"] in ("pending", "firing")]

        alert = await wait_until(horizon_alert, 30, "AwaXminHorizonPinned pending or firing")
        assert alert[0]["labels"]["awa_db_xmin_source"] == "transaction"
        assert alert[0]["labels"]["severity"] == "warning"
        # past its 2 s for:, it fires (and so the dashboards' alert annotation has data)
        await wait_until(lambda: query(
            'ALERTS{alertname="AwaXminHorizonPinned", alertstate="firing"}'), 20,
            "AwaXminHorizonPinned to fire")
        await wait_until(lambda: query("sum(awa_callback_resolved_total) > 0"), 20,
                         "the resolved callback to be scraped")
        await asyncio.sleep(1.5)  # so the newest series have two samples for rate()

        # every awa series name that exists, asked until the workload's have all arrived (the
        # leader publishes some, the DLQ depth among them, once per health interval: on a
        # loaded machine, after the waits above)
        def present_names() -> set[str]:
            names = {sample["metric"]["__name__"]
                     for sample in query('count by (__name__) ({__name__=~"awa_.*"})')}
            return {entry.name for entry in metrics.ALL_METRICS
                    if names & set(metrics.prometheus_series(entry))}

        def all_produced() -> set[str] | None:
            present = present_names()
            return present if present >= produced else None

        try:
            present = await wait_until(all_produced, 30, "every produced series")
        except AssertionError:
            missing = sorted(produced - present_names())
            raise AssertionError(f"the workload did not produce {missing}") from None

        queries = dashboard_queries(files)
        promql = [substitute_grafana_variables(expr, E2E_SUBSTITUTIONS) for _, expr in queries]
        rules = yaml.safe_load(files[f"{ALERTS_DIR}/{RULES_FILE}"])["groups"][0]["rules"]

        def evaluate_all():
            with ThreadPoolExecutor(8) as pool:  # each query raises on an evaluation error
                return (list(pool.map(query, promql)),
                        list(pool.map(query, [rule["expr"] for rule in rules])))

        results, _ = await asyncio.to_thread(evaluate_all)
        empty = []
        for (where, expr), text, result in zip(queries, promql, results):
            needed = {metrics.by_prometheus_name(name).name
                      for name in references(expr).metrics
                      if metrics.by_prometheus_name(name) is not None}
            if needed <= present and not result:
                # a scrape that timed out on this busy machine leaves a one-second gap:
                # only a query that stays empty is a broken query
                for _ in range(6):
                    await asyncio.sleep(0.5)
                    if await asyncio.to_thread(query, text):
                        break
                else:
                    empty.append(f"{where}: {text}")
        assert len(results) > 60
        assert not empty, "queries empty although their metrics exist:\n" + "\n".join(empty)

        # the queue variable of every dashboard has values
        response = await asyncio.to_thread(
            httpx.get, f"{prometheus.url}/api/v1/label/awa_job_queue/values",
            params={"match[]": "awa_db_queue_depth"}, timeout=5)
        assert {"email", "doomed"} <= set(response.json()["data"])  # queues with live jobs
    finally:
        if pin is not None:
            pin.close()
        await client.shutdown(200)
        if crashing is not None:
            crashing.kill()
        if exporter is not None:
            exporter.terminate()
            exporter.wait(timeout=10)
        prometheus.stop()
