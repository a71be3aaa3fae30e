"""Producer-side metrics and the trace path producer -> job metadata -> handler span."""

from __future__ import annotations

import asyncio
import time
import uuid

from opentelemetry import trace

from awa import metrics, telemetry

from .conftest import scrape, value


async def test_enqueue_histograms_count_each_batch(client, prometheus_endpoint):
    before = await asyncio.to_thread(scrape, prometheus_endpoint.url)
    await client.insert_many([{}] * 7, kind="enq", queue="enq_q")
    await client.enqueue_many_copy([{}] * 5, kind="enq", queue="enq_q")
    await client.insert({}, kind="enq", queue="enq_q")
    after = await asyncio.to_thread(scrape, prometheus_endpoint.url)

    def delta(name):
        return value(after, name) - value(before, name)

    size = metrics.by_name("awa.enqueue.batch_size").prometheus
    duration = metrics.by_name("awa.enqueue.duration").prometheus
    assert delta(f"{size}_count") == 3 and delta(f"{size}_sum") == 13
    assert delta(f"{duration}_count") == 3 and delta(f"{duration}_sum") > 0


async def test_handler_span_links_to_the_producer_trace(client, db, otlp_receiver):
    telemetry.init_telemetry(otlp_receiver.url, service_name="awa-test", export_interval_ms=200)
    queue = f"trace_{uuid.uuid4().hex[:8]}"
    done = asyncio.Event()

    @client.task(dict, kind="traced", queue=queue)
    async def handle(job):
        done.set()

    await client.start([(queue, 2)], poll_interval_ms=50, heartbeat_interval_ms=100)
    try:
        with trace.get_tracer("test-app").start_as_current_span("http request") as request:
            job = await client.insert({}, kind="traced", queue=queue)
        stored = db.execute("SELECT metadata FROM awa.jobs WHERE id = %s",
                            (job.id,)).fetchone()["metadata"]
        context = request.get_span_context()
        assert stored["traceparent"].split("-")[1:3] == [f"{context.trace_id:032x}",
                                                        f"{context.span_id:016x}"]
        await asyncio.wait_for(done.wait(), 10)
        deadline = time.monotonic() + 10
        while db.execute("SELECT state::text AS s FROM awa.jobs WHERE id = %s",
                         (job.id,)).fetchone()["s"] != "completed":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    finally:
        await client.shutdown()
    await asyncio.to_thread(telemetry.shutdown_telemetry)

    [span] = [s for s in otlp_receiver.spans() if s.name == "awa.job traced"]
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes[metrics.ATTR_QUEUE].string_value == queue
    assert attributes[metrics.ATTR_ATTEMPT].int_value == 1
    assert attributes[metrics.ATTR_OUTCOME].string_value == "completed"
    [link] = span.links
    assert int.from_bytes(link.trace_id, "big") == context.trace_id
    assert int.from_bytes(link.span_id, "big") == context.span_id


async def test_cron_fires_and_triggers_count_as_inserted(client, db, prometheus_endpoint):
    """Cron is an enqueue path too: each fired or triggered job is in awa.job.inserted."""
    from awa.runtime.maintenance import cron

    queue = f"cron_{uuid.uuid4().hex[:8]}"
    client.periodic(f"{queue}_every_minute", "* * * * *", dict, {}, kind="cron_kind",
                    queue=queue)
    await client.sync_cron_jobs()
    db.execute("UPDATE awa.cron_jobs SET created_at = now() - interval '5 minutes' "
               "WHERE name = %s", (f"{queue}_every_minute",))
    inserted = metrics.by_name("awa.job.inserted").prometheus
    fired = metrics.by_name("awa.cron.fired").prometheus
    before = await asyncio.to_thread(scrape, prometheus_endpoint.url)
    outcome = await cron.evaluate(await client._get_pool())
    await client.trigger_cron_job(f"{queue}_every_minute")
    after = await asyncio.to_thread(scrape, prometheus_endpoint.url)

    rows = db.execute("SELECT count(*) AS n FROM awa.jobs WHERE queue = %s AND kind = %s",
                      (queue, "cron_kind")).fetchone()["n"]
    assert outcome.fired == {f"{queue}_every_minute": 1} and rows == 2
    labels = {"awa_job_kind": "cron_kind", "awa_job_queue": queue}
    assert value(after, inserted, **labels) - value(before, inserted, **labels) == rows
    assert value(after, fired, awa_job_queue=queue) == 1  # the trigger is not a schedule fire
