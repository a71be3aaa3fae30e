"""A real Prometheus server scrapes a running runtime and computes rates from it."""

from __future__ import annotations

import asyncio
import time
import uuid

from .prometheus_server import PrometheusServer

SHORT = {"poll_interval_ms": 50, "heartbeat_interval_ms": 100, "promote_interval_ms": 50,
         "leader_election_interval_ms": 200, "snapshot_interval_ms": 200}


async def test_prometheus_scrapes_the_runtime_and_answers_the_completion_rate(client, db):
    queue = f"prom_{uuid.uuid4().hex[:8]}"

    @client.task(dict, kind="prom_job", queue=queue)
    async def handle(job):
        return None

    await client.start([(queue, 4)], metrics_addr="127.0.0.1:0", **SHORT)
    endpoint = client.runtime.metrics_endpoint
    prometheus = await asyncio.to_thread(
        PrometheusServer({"awa": [f"{endpoint.host}:{endpoint.port}"]}).start)
    try:
        rate_query = "sum(rate(awa_job_completed_total[1m])) > 0"
        deadline = time.monotonic() + 25
        result = []
        while not result and time.monotonic() < deadline:
            await client.insert_many([{}] * 5, kind="prom_job", queue=queue)
            await asyncio.sleep(0.25)
            result = await asyncio.to_thread(prometheus.query, rate_query)
        assert result, f"{rate_query} stayed empty; targets: {prometheus.targets_up()}"
        assert float(result[0]["value"][1]) > 0

        # once the workload stops, Prometheus' view converges on the database's
        completed_query = f'sum(awa_job_completed_total{{awa_job_queue="{queue}"}})'
        while True:
            done = db.execute("SELECT count(*) AS n FROM awa.jobs WHERE queue = %s AND "
                              "state = 'completed'", (queue,)).fetchone()["n"]
            live = db.execute("SELECT count(*) AS n FROM awa.jobs WHERE queue = %s AND "
                              "state <> 'completed'", (queue,)).fetchone()["n"]
            seen = await asyncio.to_thread(prometheus.query, completed_query)
            if live == 0 and seen and float(seen[0]["value"][1]) == done:
                break
            assert time.monotonic() < deadline + 10, (done, live, seen)
            await asyncio.sleep(0.25)
        [target] = prometheus.targets_up()
        assert target["health"] == "up"
    finally:
        await asyncio.to_thread(prometheus.stop)
        await client.shutdown()
