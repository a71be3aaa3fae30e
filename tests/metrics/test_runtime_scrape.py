"""Scrape a running runtime after a mixed workload; every metric it exercised must be
exported under its catalogue name and labels, with values matching the database."""

from __future__ import annotations

import asyncio
import time
import uuid

import psycopg
import pytest

import awa
import awa.bridge
from awa import metrics

from .conftest import scrape, value

SHORT = {"poll_interval_ms": 50, "heartbeat_interval_ms": 100, "promote_interval_ms": 50,
         "leader_election_interval_ms": 200, "snapshot_interval_ms": 200,
         "queue_health_interval_ms": 100, "heartbeat_rescue_interval_ms": 200,
         "deadline_rescue_interval_ms": 200, "callback_rescue_interval_ms": 200}


def _queue(prefix: str) -> str:
    """Counters are per process: a fresh queue label isolates this test's series."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _rows(db, sql: str, *params):
    return db.execute(sql, params).fetchall()


async def _settle(db, queues: list[str], timeout: float = 20.0) -> None:
    """Until no job of ``queues`` is available, running, scheduled or retryable."""
    deadline = time.monotonic() + timeout
    while True:
        live = _rows(db, "SELECT count(*) AS n FROM awa.jobs WHERE queue = ANY(%s) AND state "
                         "IN ('available', 'running', 'scheduled', 'retryable')", queues)[0]["n"]
        if live == 0:
            return
        assert time.monotonic() < deadline, f"{live} job(s) still live"
        await asyncio.sleep(0.05)


async def _scrape_until(url: str, check, timeout: float = 10.0):
    """Scrape until ``check(series)`` holds (leader gauges are published on an interval)."""
    deadline = time.monotonic() + timeout
    while True:
        series = await asyncio.to_thread(scrape, url)
        if check(series) or time.monotonic() > deadline:
            return series
        await asyncio.sleep(0.1)


@pytest.mark.connections(16)
async def test_mixed_workload_metrics_match_the_database(client, db, database_url):
    queue, dlq_queue = _queue("mx"), _queue("mxdlq")
    release = asyncio.Event()

    @client.task(dict, kind="m_ok", queue=queue)
    async def ok(job):
        return None

    @client.task(dict, kind="m_slow", queue=queue)
    async def slow(job):  # outlives a few heartbeats; stops when cancelled by an operator
        for _ in range(100):
            if job.is_cancelled() or release.is_set():
                return awa.Cancel("operator") if job.is_cancelled() else None
            await asyncio.sleep(0.02)

    @client.task(dict, kind="m_terminal", queue=queue)
    async def terminal(job):
        raise awa.TerminalError("no")

    @client.task(dict, kind="m_retry", queue=queue)
    async def retry(job):
        return awa.RetryAfter(0.05)

    @client.task(dict, kind="m_snooze", queue=queue)
    async def snooze(job):
        if job.attempt == 1 and not job.metadata.get("snoozed"):
            job.update_metadata({"snoozed": True})
            return awa.Snooze(0.05)
        return None

    @client.task(dict, kind="m_cancel", queue=queue)
    async def cancel(job):
        return awa.Cancel("not needed")

    @client.task(dict, kind="m_wait", queue=queue)
    async def wait(job):
        token = await job.register_callback(timeout_seconds=3600)
        return awa.WaitForCallback(token)

    @client.task(dict, kind="m_poison", queue=dlq_queue)
    async def poison(job):
        raise awa.TerminalError("poison")

    @client.task(dict, kind="m_tx", queue=queue)
    async def through_other_paths(job):  # inserted by a transaction and by the bridge
        return None

    # descriptors: exported as info series once the runtime stored them
    client.queue_descriptor(queue, display_name="Mixed", owner="team-mx",
                            docs_url="https://docs.example/mx", tags=["mixed", "test"])
    client.job_kind_descriptor("m_ok", display_name="OK job", owner="team-ok")

    await client.start([{"name": queue, "max_workers": 8},
                        {"name": dlq_queue, "max_workers": 2, "dlq_enabled": True}],
                       metrics_addr="127.0.0.1:0", **SHORT)
    try:
        url = client.runtime.metrics_endpoint.url
        instance = str(client.runtime.instance_id)
        await client.insert_many([{}] * 20, kind="m_ok", queue=queue)
        for kind, n, attempts in (("m_terminal", 3, 25), ("m_retry", 3, 2), ("m_snooze", 3, 25),
                                  ("m_cancel", 2, 25), ("m_wait", 2, 25)):
            await client.insert_many([{}] * n, kind=kind, queue=queue, max_attempts=attempts)
        await client.insert_many([{}] * 2, kind="m_poison", queue=dlq_queue)
        # the other enqueue paths: COPY, a committed and a rolled-back transaction, the bridge
        await client.enqueue_many_copy([{}] * 2, kind="m_tx", queue=queue)
        await client.insert_many_copy([{}] * 1, kind="m_tx", queue=queue)
        async with await client.transaction() as tx:
            await tx.insert({}, kind="m_tx", queue=queue)
            await tx.insert_many([{}] * 2, kind="m_tx", queue=queue)
        tx = await client.transaction()
        await tx.insert({}, kind="m_tx", queue=queue)
        await tx.rollback()  # never written: never counted
        async with await psycopg.AsyncConnection.connect(database_url,
                                                        autocommit=True) as conn:
            await awa.bridge.insert_job(conn, {}, kind="m_tx", queue=queue)
        slow_jobs = await client.insert_many([{}] * 2, kind="m_slow", queue=queue)
        # one slow job is cancelled by an operator while it runs, the other completes
        while _rows(db, "SELECT state::text AS s FROM awa.jobs WHERE id = %s",
                    slow_jobs[0].id)[0]["s"] != "running":
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # a few heartbeat batches
        assert await client.cancel(slow_jobs[0].id) is not None
        await asyncio.sleep(0.1)
        release.set()
        await _settle(db, [queue, dlq_queue])
        await asyncio.sleep(0.1)  # the last completion flush
        # operator and callback transitions, recorded by the process that applies them
        waiting = _rows(db, "SELECT callback_id FROM awa.jobs WHERE queue = %s AND "
                            "state = 'waiting_external' ORDER BY id", queue)
        await client.complete_external(str(waiting[0]["callback_id"]), {"ok": True})
        dlq_ids = [r["job_id"] for r in _rows(
            db, "SELECT job_id FROM awa.dlq_entries WHERE queue = %s ORDER BY job_id", dlq_queue)]
        assert await client.purge_dlq_job(dlq_ids[0])
        assert await client.move_failed_to_dlq(
            _rows(db, "SELECT id FROM awa.jobs WHERE queue = %s AND kind = 'm_terminal' "
                      "ORDER BY id LIMIT 1", queue)[0]["id"]) is not None

        def leader_gauges_current(series):
            return (value(series, "awa_queue_depth", awa_job_queue=queue,
                          awa_job_state="failed") == 5
                    and value(series, "awa_queue_depth", awa_job_queue=queue,
                              awa_job_state="waiting_external") == 1
                    and value(series, "awa_job_dlq_depth", awa_job_queue=queue) == 1
                    and value(series, "awa_job_dlq_depth", awa_job_queue=dlq_queue) == 1
                    and value(series, "awa_queue_info", awa_job_queue=queue) == 1)

        series = await _scrape_until(url, leader_gauges_current)
    finally:
        await client.shutdown()

    # --- every awa_* series is a catalogue entry with exactly its labels ------------------
    for name, samples in series.items():
        if not name.startswith("awa_"):
            continue
        entry = metrics.by_prometheus_name(name)
        assert entry is not None and entry.source == "runtime", f"{name} is not catalogued"
        for sample in samples:
            assert set(sample.labels) - {"le"} == set(entry.labels), (name, sample.labels)

    # --- job transitions = database rows --------------------------------------------------
    states = {(r["kind"], r["state"]): r["n"] for r in _rows(
        db, "SELECT kind, state::text AS state, count(*) AS n FROM awa.jobs "
            "WHERE queue = %s GROUP BY 1, 2", queue)}

    def job_metric(metric, kind, q=queue, **labels):
        return value(series, metric, awa_job_kind=kind, awa_job_queue=q, **labels)

    for kind in ("m_ok", "m_snooze", "m_slow", "m_wait"):
        assert job_metric("awa_job_completed_total", kind) == states.get((kind, "completed"), 0)
    assert states[("m_ok", "completed")] == 20 and states[("m_snooze", "completed")] == 3
    assert states[("m_wait", "completed")] == 1  # by its callback
    assert value(series, "awa_callback_resolved_total", awa_job_queue=queue,
                 awa_callback_outcome="complete") == 1
    assert job_metric("awa_job_failed_total", "m_terminal", awa_job_terminal="true") \
        == states[("m_terminal", "failed")] + 1 == 3  # one moved to the DLQ by an operator
    assert job_metric("awa_job_failed_total", "m_retry", awa_job_terminal="true") \
        == states[("m_retry", "failed")] == 3
    assert job_metric("awa_job_retried_total", "m_retry") == 3  # attempt 1 of each, of 2
    assert job_metric("awa_job_snoozed_total", "m_snooze") == 3
    assert job_metric("awa_job_cancelled_total", "m_cancel") == states[("m_cancel", "cancelled")]
    assert job_metric("awa_job_cancelled_total", "m_slow") == states[("m_slow", "cancelled")] == 1
    assert job_metric("awa_job_waiting_external_total", "m_wait") \
        == states[("m_wait", "waiting_external")] + 1 == 2
    dlq = {(r["queue"], r["kind"], r["dlq_reason"]): r["n"] for r in _rows(
        db, "SELECT queue, kind, dlq_reason, count(*) AS n FROM awa.dlq_entries "
            "WHERE queue = ANY(%s) GROUP BY 1, 2, 3", [queue, dlq_queue])}
    assert dlq == {(dlq_queue, "m_poison", "terminal_error"): 1, (queue, "m_terminal", "manual"): 1}
    assert job_metric("awa_job_dlq_moved_total", "m_poison", dlq_queue,
                      awa_dlq_reason="terminal_error") == 2  # moved, then one purged
    assert value(series, "awa_job_dlq_purged_total", awa_job_queue=dlq_queue) == 1
    assert job_metric("awa_job_dlq_moved_total", "m_terminal", awa_dlq_reason="manual") == 1
    assert job_metric("awa_job_failed_total", "m_poison", dlq_queue, awa_job_terminal="true") == 2

    # claims: one per handler run; every run has a duration, a wait and one flushed outcome
    runs = {r["kind"]: r["n"] for r in _rows(
        db, "SELECT kind, sum(attempt) + count(*) FILTER (WHERE kind = 'm_snooze') AS n "
            "FROM (SELECT kind, attempt FROM awa.jobs WHERE queue = %s UNION ALL "
            "      SELECT kind, attempt FROM awa.dlq_entries WHERE queue = %s) AS j "
            "GROUP BY kind", queue, queue)}
    for kind, n in runs.items():
        assert job_metric("awa_job_claimed_total", kind) == n, kind
        assert job_metric("awa_job_duration_seconds_count", kind) == n, kind
        assert job_metric("awa_job_wait_duration_seconds_count", kind) == n, kind
    claimed = sum(runs.values())
    assert value(series, "awa_dispatch_claim_batch_size_sum", awa_job_queue=queue) == claimed
    assert value(series, "awa_dispatch_claim_batch_size_count", awa_job_queue=queue) \
        == value(series, "awa_dispatch_claim_batches_total", awa_job_queue=queue) >= 1
    assert value(series, "awa_dispatch_claim_duration_seconds_count", awa_job_queue=queue) >= 1
    assert value(series, "awa_job_in_flight", awa_job_queue=queue) == 0
    reasons = {s.labels["awa_dispatch_reason"] for s in series["awa_dispatch_wakeups_total"]
               if s.labels["awa_job_queue"] == queue}
    assert "notify" in reasons and reasons <= set(metrics.DISPATCH_REASONS)
    # the operator's cancel won; the handler's late Cancel (and perhaps a heartbeat) was stale
    assert value(series, "awa_completion_stale_ignored_total", awa_job_queue=queue) >= 1
    assert value(series, "awa_completion_flushes_total") >= 1
    assert value(series, "awa_completion_flush_batch_size_sum") >= claimed
    assert value(series, "awa_heartbeat_batches_total") >= 1

    # --- maintenance and leadership ------------------------------------------------------
    assert value(series, "awa_maintenance_promoted_total", awa_job_queue=queue) == 3 + 3
    assert value(series, "awa_maintenance_promote_batches_total") >= 1
    branches = {s.labels["awa_maintenance_branch"]
                for s in series["awa_maintenance_branch_duration_seconds_count"]}
    assert {"promote", "queue_health"} <= branches
    assert value(series, "awa_leader_active") == 1
    assert value(series, "awa_leader_elected_total") >= 1
    info = [s for s in series["awa_runtime_info"]
            if s.labels["awa_runtime_instance_id"] == instance]
    assert info and info[0].value == 1 and info[0].labels["awa_runtime_version"] == awa.__version__

    # --- leader gauges = database ------------------------------------------------------------
    # the leader counts live states and failed (not the unbounded completed/cancelled)
    depth = {r["state"]: r["n"] for r in _rows(
        db, "SELECT state::text AS state, count(*) AS n FROM awa.jobs WHERE queue = %s "
            "GROUP BY 1", queue)}
    for state in ("available", "running", "scheduled", "retryable", "waiting_external", "failed"):
        assert value(series, "awa_queue_depth", awa_job_queue=queue,
                     awa_job_state=state) == depth.get(state, 0), state
    assert value(series, "awa_job_dlq_depth", awa_job_queue=dlq_queue) == 1
    assert "awa_queue_lag_seconds" in series

    # --- the series added with issue 18 -------------------------------------------------
    # awa.job.inserted: every enqueue path, per (kind, queue) = the rows in the database
    written = {(r["kind"], r["queue"]): r["n"] for r in _rows(
        db, "SELECT kind, queue, count(*) AS n FROM (SELECT kind, queue FROM awa.jobs UNION ALL "
            "SELECT kind, queue FROM awa.dlq_entries) AS j WHERE queue = ANY(%s) GROUP BY 1, 2",
        [queue, dlq_queue])}
    assert written[("m_tx", queue)] == 2 + 1 + 3 + 1  # COPY x2, transaction, bridge
    written[("m_poison", dlq_queue)] += 1  # the DLQ entry the operator purged was inserted too
    for (kind, q), n in written.items():
        assert job_metric("awa_job_inserted_total", kind, q) == n, (kind, q)
    inserted_series = {(s.labels["awa_job_kind"], s.labels["awa_job_queue"])
                       for s in series["awa_job_inserted_total"]
                       if s.labels["awa_job_queue"] in (queue, dlq_queue)
                       and s.value > 0}  # (every kind x queue has its 0 series from the start)
    assert inserted_series == set(written)

    # dispatch: the free slots seen last; idle, every slot is free but those the queue's
    # other claimer holds for its own (empty) claim: max_workers 8 -> batches of 4, 2 -> 1
    assert 8 - 4 <= value(series, "awa_dispatch_capacity_available", awa_job_queue=queue) <= 8
    assert 2 - 1 <= value(series, "awa_dispatch_capacity_available",
                          awa_job_queue=dlq_queue) <= 2
    # an empty claim gives back every permit it was granted (at least one)
    assert value(series, "awa_dispatch_unused_permits_total", awa_job_queue=queue) \
        >= value(series, "awa_dispatch_empty_claims_total", awa_job_queue=queue) >= 1
    wake_claims = value(series, "awa_dispatch_wake_to_claim_duration_seconds_count",
                        awa_job_queue=queue)
    assert 1 <= wake_claims <= value(series, "awa_dispatch_claim_duration_seconds_count",
                                     awa_job_queue=queue)
    assert value(series, "awa_dispatch_wake_to_claim_duration_seconds_sum",
                 awa_job_queue=queue) > 0

    # promotion batch size: one observation per promotion batch, summing to the promoted jobs
    assert value(series, "awa_maintenance_promote_batch_size_count") \
        == value(series, "awa_maintenance_promote_batches_total") >= 1
    assert value(series, "awa_maintenance_promote_batch_size_sum") \
        == value(series, "awa_maintenance_promoted_total")
    le = {float(s.labels["le"]) for s in series["awa_maintenance_promote_batch_size_bucket"]}
    assert le == {*map(float, metrics.BATCH_SIZE_BUCKETS), float("inf")}

    # descriptor info series = the descriptor rows the runtime stored
    (qrow,) = _rows(db, "SELECT * FROM awa.queue_descriptors WHERE queue = %s", queue)
    (info,) = [s for s in series["awa_queue_info"] if s.labels["awa_job_queue"] == queue]
    assert info.value == 1 and qrow["owner"] == "team-mx" and qrow["tags"] == ["mixed", "test"]
    assert info.labels == {"awa_job_queue": queue, "awa_descriptor_display_name": "Mixed",
                           "awa_descriptor_owner": qrow["owner"],
                           "awa_descriptor_docs_url": qrow["docs_url"],
                           "awa_descriptor_tags": ",".join(qrow["tags"]),
                           "awa_descriptor_hash": qrow["descriptor_hash"]}
    (krow,) = _rows(db, "SELECT * FROM awa.job_kind_descriptors WHERE kind = 'm_ok'")
    (kinfo,) = [s for s in series["awa_job_kind_info"] if s.labels["awa_job_kind"] == "m_ok"]
    assert kinfo.value == 1 and kinfo.labels["awa_descriptor_owner"] == krow["owner"] == "team-ok"
    # The kind's descriptor leaves its docs URL and tags unset: they read the documented
    # placeholder, never "" (issue 33), though other series of the metric carry the labels.
    assert not krow["docs_url"] and not krow["tags"]
    assert kinfo.labels["awa_descriptor_docs_url"] == "none"  # metrics.UNSET_LABEL_VALUE
    assert kinfo.labels["awa_descriptor_tags"] == "none"
    empty = [(name, s.labels) for name, samples in series.items() if name.startswith("awa_")
             for s in samples if "" in s.labels.values()]
    assert not empty, empty
    assert kinfo.labels["awa_descriptor_hash"] == krow["descriptor_hash"]
    assert kinfo.labels["awa_descriptor_display_name"] == krow["display_name"]
    # the runtime reports the same hash in its runtime_instances row (what drift compares)
    (hashes,) = _rows(db, "SELECT descriptor_hashes FROM awa.runtime_instances "
                          "WHERE instance_id = %s", instance)
    assert hashes["descriptor_hashes"]["queues"][queue] == info.labels["awa_descriptor_hash"]


async def test_every_queue_series_is_there_from_the_start_at_zero(client, database_url,
                                                                   prometheus_endpoint):
    """A worker that has run nothing yet still exports its queue's and kinds' counters (each
    small closed set of label values included: terminal, dispatch reason, rescue kind), the
    in-flight gauge and its queues' histograms (count 0) at 0: dashboards and alerts read 0,
    not "no data"."""
    queue = _queue("idle")

    @client.task(dict, kind="z_kind", queue=queue)
    async def handler(job):
        return None

    await client.start([{"name": queue, "max_workers": 2}], **SHORT)
    try:
        series = await asyncio.to_thread(scrape, prometheus_endpoint.url)
    finally:
        await client.shutdown()
    seedable = {metrics.ATTR_QUEUE, metrics.ATTR_KIND, *metrics.SEEDED_VALUES}
    checked = 0
    for entry in metrics.RUNTIME_METRICS:
        if entry.kind == "gauge" or metrics.ATTR_QUEUE not in entry.attributes or not set(
                entry.attributes) <= seedable:
            continue
        if entry.kind == "histogram" and metrics.ATTR_KIND in entry.attributes:
            continue  # not seeded: kind x queue x bucket
        if entry.kind == "histogram":
            name = entry.prometheus + "_count"
        else:
            name = entry.prometheus + ("_total" if entry.kind == "counter"
                                       and not entry.prometheus.endswith("_total") else "")
        got = [s for s in series.get(name, []) if s.labels.get("awa_job_queue") == queue]
        assert got, name  # present from the start
        for attribute, values in metrics.SEEDED_VALUES.items():
            if attribute in entry.attributes:  # every value of the closed set
                label = metrics.prometheus_label(attribute)
                assert {s.labels[label] for s in got} == {
                    str(v).lower() for v in values}, (name, got)
        if entry.name.startswith("awa.job."):  # nothing ran: every job series reads 0
            assert all(s.value == 0 for s in got), (name, got)
        checked += 1
    assert checked >= 15, checked  # the seeded catalogue, not a handful
