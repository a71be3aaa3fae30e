"""The catalogue's shape: every required metric, the Prometheus naming rule, the instruments
(awa.instruments: one per runtime entry)."""

from __future__ import annotations

import pytest
from opentelemetry.metrics import Counter, Histogram, UpDownCounter, _Gauge

from awa import instruments, metrics
from awa.instruments import METRICS
from awa.metrics import DATABASE_METRICS, RUNTIME_METRICS

# Issue 8 item 1, plus the brief's additions (snoozed, waiting_external, cron fires, leader
# changes).
REQUIRED_RUNTIME = {
    "awa.job.completed", "awa.job.failed", "awa.job.retried", "awa.job.cancelled",
    "awa.job.snoozed", "awa.job.waiting_external", "awa.job.claimed", "awa.job.in_flight",
    "awa.job.duration", "awa.job.wait_duration", "awa.job.dlq_moved", "awa.job.dlq_retried",
    "awa.job.dlq_purged", "awa.job.dlq_depth", "awa.queue.depth", "awa.queue.lag",
    "awa.dispatch.claim_batches", "awa.dispatch.claim_batch_size", "awa.dispatch.claim_duration",
    "awa.dispatch.wakeups", "awa.dispatch.empty_claims", "awa.dispatch.rate_limited",
    "awa.completion.flushes", "awa.completion.flush_batch_size", "awa.completion.flush_duration",
    "awa.completion.stale_ignored", "awa.heartbeat.batches", "awa.maintenance.rescues",
    "awa.maintenance.promote_batches", "awa.maintenance.promote_duration",
    "awa.maintenance.branch.duration", "awa.maintenance.branch.overrun", "awa.leader.elected",
    "awa.leader.active", "awa.enqueue.batch_size", "awa.enqueue.duration", "awa.runtime.info",
    "awa.cron.fired",
}

# Issue 9 §3: what the database exporter must publish.
REQUIRED_DATABASE_LABELS = {
    "awa_db_queue_depth": {"awa_job_queue", "awa_job_state"},
    "awa_db_queue_lag_seconds": {"awa_job_queue"},
    "awa_db_running_oldest_heartbeat_age_seconds": {"awa_job_queue"},
    "awa_db_running_deadline_overdue": {"awa_job_queue"},
    "awa_db_runtimes_live": set(),
    "awa_db_leader_present": set(),
    "awa_db_dlq_depth": {"awa_job_queue", "awa_dlq_reason"},
    "awa_db_unique_wedged": {"awa_job_queue"},
    "awa_db_transaction_oldest_age_seconds": {"awa_db_txn_state"},
    "awa_db_xmin_horizon_age_seconds": {"awa_db_xmin_source"},
    "awa_db_table_dead_tuples": {"awa_db_table"},
    "awa_db_table_live_tuples": {"awa_db_table"},
    "awa_db_table_last_autovacuum_age_seconds": {"awa_db_table"},
    "awa_db_notification_queue_usage": set(),
    "awa_db_exporter_scrape_duration_seconds": set(),
    "awa_db_exporter_scrape_success": set(),
}


def test_every_required_runtime_metric_is_catalogued():
    names = {entry.name for entry in RUNTIME_METRICS}
    assert REQUIRED_RUNTIME - names == set()


def test_every_required_database_metric_is_catalogued_with_its_labels():
    by_prometheus = {entry.prometheus: set(entry.labels) for entry in DATABASE_METRICS}
    for name, labels in REQUIRED_DATABASE_LABELS.items():
        assert by_prometheus.get(name) == labels, name


@pytest.mark.parametrize("otel_name, prometheus", [
    ("awa.job.completed", "awa_job_completed_total"),
    ("awa.job.duration", "awa_job_duration_seconds"),
    ("awa.queue.lag", "awa_queue_lag_seconds"),
    ("awa.job.in_flight", "awa_job_in_flight"),
    ("awa.maintenance.branch.duration", "awa_maintenance_branch_duration_seconds"),
    ("awa.dispatch.claim_batch_size", "awa_dispatch_claim_batch_size"),
    ("awa.db.xmin_horizon.age", "awa_db_xmin_horizon_age_seconds"),
])
def test_prometheus_names_follow_the_design_rule(otel_name, prometheus):
    assert metrics.by_name(otel_name).prometheus == prometheus
    assert metrics.by_prometheus_name(prometheus) is metrics.by_name(otel_name)


def test_histogram_series_resolve_to_their_entry():
    entry = metrics.by_name("awa.job.duration")
    assert metrics.prometheus_series(entry) == (
        "awa_job_duration_seconds_bucket", "awa_job_duration_seconds_sum",
        "awa_job_duration_seconds_count")
    assert metrics.by_prometheus_name("awa_job_duration_seconds_bucket") is entry
    assert metrics.by_prometheus_name("awa_job_completed_total_bucket") is None
    assert metrics.by_prometheus_name("awa_no_such_metric") is None


def test_queue_label_is_awa_job_queue():
    assert metrics.prometheus_label(metrics.ATTR_QUEUE) == "awa_job_queue"
    assert "awa_job_queue" in metrics.by_name("awa.job.completed").labels


def test_sections_are_separate_namespaces():
    assert all(e.name.startswith("awa.db.") and e.source == "database" for e in DATABASE_METRICS)
    assert not any(e.name.startswith("awa.db.") or e.source != "runtime" for e in RUNTIME_METRICS)
    assert len({e.prometheus for e in metrics.ALL_METRICS}) == len(metrics.ALL_METRICS)
    assert all(e.kind == "gauge" for e in DATABASE_METRICS)


def test_every_entry_is_documented_and_well_formed():
    for entry in metrics.ALL_METRICS:
        assert entry.help.strip() and entry.help.endswith("."), entry.name
        assert entry.kind in ("counter", "histogram", "gauge", "updown"), entry.name
        assert entry.unit, entry.name
        assert entry.name.startswith("awa.") and entry.name == entry.name.lower(), entry.name
        assert all(key.startswith("awa.") for key in entry.attributes), entry.name
        assert (entry.buckets is not None) == (entry.kind == "histogram"), entry.name


def test_second_valued_histograms_span_a_millisecond_to_a_minute():
    seconds = [e for e in RUNTIME_METRICS if e.kind == "histogram" and e.unit == "s"]
    assert {"awa.job.duration", "awa.job.wait_duration"} <= {e.name for e in seconds}
    for entry in seconds:
        assert entry.buckets[0] <= 0.001 and entry.buckets[-1] >= 60, entry.name
        assert list(entry.buckets) == sorted(entry.buckets), entry.name


_INSTRUMENT_TYPE = {"counter": Counter, "histogram": Histogram, "updown": UpDownCounter,
                    "gauge": _Gauge}


def test_metrics_singleton_has_one_instrument_per_runtime_entry():
    for entry in RUNTIME_METRICS:
        instrument = getattr(METRICS, entry.attribute_name)
        assert isinstance(instrument, _INSTRUMENT_TYPE[entry.kind]), entry.name
        # proxy instruments (no provider yet) keep the name privately
        assert (getattr(instrument, "name", None) or instrument._name) == entry.name


def test_unknown_instrument_names_say_where_to_add_them():
    with pytest.raises(AttributeError, match="RUNTIME_METRICS in awa/metrics.py"):
        METRICS.job_teleported  # noqa: B018


def test_cached_attribute_sets():
    assert instruments.job_attributes("send_email", "email") == {
        metrics.ATTR_KIND: "send_email", metrics.ATTR_QUEUE: "email"}
    assert instruments.job_attributes("send_email", "email") is instruments.job_attributes(
        "send_email", "email")
    assert instruments.queue_attributes("email") == {metrics.ATTR_QUEUE: "email"}
