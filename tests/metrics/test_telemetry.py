"""Export paths without a runtime: the Prometheus endpoint, OTLP/HTTP export, trace context."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from opentelemetry import trace

from awa import AwaError, Job, JobState, ValidationError, metrics, telemetry
from awa.instruments import METRICS, job_attributes, queue_attributes

from .conftest import scrape, value


def _unique(name: str) -> str:
    return f"{name}_{time.monotonic_ns()}"


def test_endpoint_exports_catalogue_names_labels_and_buckets(prometheus_endpoint):
    queue = _unique("q")
    attrs = job_attributes("send_email", queue)
    METRICS.job_completed.add(3, attrs)
    METRICS.job_duration.record(0.02, attrs)
    METRICS.job_duration.record(7.0, attrs)
    METRICS.job_in_flight.add(2, queue_attributes(queue))
    METRICS.queue_lag.set(1.5, queue_attributes(queue))
    METRICS.queue_depth.set(9, {metrics.ATTR_QUEUE: queue, metrics.ATTR_STATE: "available"})

    series = scrape(prometheus_endpoint.url)

    assert value(series, "awa_job_completed_total", awa_job_kind="send_email",
                 awa_job_queue=queue) == 3
    assert value(series, "awa_job_in_flight", awa_job_queue=queue) == 2
    assert value(series, "awa_queue_lag_seconds", awa_job_queue=queue) == 1.5
    assert value(series, "awa_queue_depth", awa_job_queue=queue, awa_job_state="available") == 9
    buckets = [s for s in series["awa_job_duration_seconds_bucket"]
               if s.labels["awa_job_queue"] == queue]
    assert [float(s.labels["le"]) for s in buckets] == [*metrics.SECONDS_BUCKETS, float("inf")]
    by_le = {float(s.labels["le"]): s.value for s in buckets}
    assert (by_le[0.01], by_le[0.025], by_le[5.0], by_le[10.0]) == (0, 1, 1, 2)
    assert value(series, "awa_job_duration_seconds_count", awa_job_queue=queue) == 2
    # exactly the catalogue's labels, nothing added (no otel_scope_* labels)
    sample = next(s for s in series["awa_job_completed_total"]
                  if s.labels["awa_job_queue"] == queue)
    assert set(sample.labels) == set(metrics.by_name("awa.job.completed").labels)


def test_two_endpoints_see_the_same_values_and_close_detaches(prometheus_endpoint):
    queue = _unique("q")
    second = telemetry.serve_prometheus("127.0.0.1:0")
    try:
        METRICS.dispatch_empty_claims.add(4, queue_attributes(queue))
        for url in (prometheus_endpoint.url, second.url):
            assert value(scrape(url), "awa_dispatch_empty_claims_total", awa_job_queue=queue) == 4
    finally:
        second.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(second.url, timeout=2)
    second.close()  # idempotent
    METRICS.dispatch_empty_claims.add(1, queue_attributes(queue))
    assert value(scrape(prometheus_endpoint.url), "awa_dispatch_empty_claims_total",
                 awa_job_queue=queue) == 5


def test_endpoint_defaults_to_loopback(prometheus_endpoint):
    endpoint = telemetry.serve_prometheus("0")
    try:
        assert endpoint.host == "127.0.0.1" and endpoint.port > 0
        assert httpx.get(endpoint.url, timeout=5).status_code == 200
    finally:
        endpoint.close()


@pytest.mark.parametrize("addr", ["nonsense", "127.0.0.1:99999", "host:", ":-1"])
def test_bad_address_is_a_one_line_validation_error(addr):
    with pytest.raises(ValidationError, match=r"invalid metrics address .*HOST:PORT") as info:
        telemetry.serve_prometheus(addr)
    assert "\n" not in str(info.value)


def test_busy_port_says_what_to_do():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(AwaError, match=rf"cannot serve metrics on 127.0.0.1:{port}: .*"
                                           r"choose another --metrics-addr"):
            telemetry.serve_prometheus(f"127.0.0.1:{port}")


def test_current_traceparent_is_the_ambient_span():
    assert telemetry.current_traceparent() is None
    tracer = telemetry._sdk_tracer_provider().get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        context = span.get_span_context()
        assert telemetry.current_traceparent() == (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}")
    assert telemetry.current_traceparent() is None


def test_otlp_export_of_metrics_and_linked_handler_spans(otlp_receiver):
    telemetry.init_telemetry(otlp_receiver.url, service_name="awa-test", export_interval_ms=100)
    queue = _unique("q")
    METRICS.job_completed.add(2, job_attributes("report", queue))

    tracer = trace.get_tracer("test-producer")
    with tracer.start_as_current_span("enqueue") as producer:
        traceparent = telemetry.current_traceparent()
    job = Job(id=42, kind="report", queue=queue, args={}, state=JobState.Running, attempt=3,
              metadata={"traceparent": traceparent})
    with telemetry.handler_span(job) as span:
        telemetry.set_outcome(span, "completed")
    telemetry.shutdown_telemetry()  # flushes both

    points = otlp_receiver.metric_points()["awa.job.completed"]
    ours = [p for p in points
            if {a.key: a.value.string_value for a in p.attributes}.get(metrics.ATTR_QUEUE) == queue]
    assert ours and ours[-1].as_int == 2
    spans = [s for s in otlp_receiver.spans() if s.name == "awa.job report"]
    assert len(spans) == 1
    handler = spans[0]
    attributes = {a.key: a.value for a in handler.attributes}
    assert attributes[metrics.ATTR_QUEUE].string_value == queue
    assert attributes[metrics.ATTR_KIND].string_value == "report"
    assert attributes[metrics.ATTR_ATTEMPT].int_value == 3
    assert attributes[metrics.ATTR_OUTCOME].string_value == "completed"
    producer_context = producer.get_span_context()
    assert [(int.from_bytes(link.trace_id, "big"), int.from_bytes(link.span_id, "big"))
            for link in handler.links] == [(producer_context.trace_id, producer_context.span_id)]
    # a link, not a parent: the handler starts its own trace
    assert int.from_bytes(handler.trace_id, "big") != producer_context.trace_id


def test_handler_span_without_producer_context_has_no_link(otlp_receiver):
    telemetry.init_telemetry(otlp_receiver.url, export_interval_ms=100)
    job = Job(id=1, kind="lonely", queue="q", args={}, state=JobState.Running, attempt=1,
              metadata={"traceparent": "garbage"})
    with pytest.raises(RuntimeError):
        with telemetry.handler_span(job):
            raise RuntimeError("boom")
    telemetry.shutdown_telemetry()
    (span,) = [s for s in otlp_receiver.spans() if s.name == "awa.job lonely"]
    assert list(span.links) == []
    assert span.status.code == span.status.STATUS_CODE_ERROR


def test_init_from_environment(otlp_receiver, monkeypatch):
    monkeypatch.delenv(telemetry.OTLP_ENDPOINT_ENV, raising=False)
    assert telemetry.init_telemetry_from_env() is False
    monkeypatch.setenv(telemetry.OTLP_ENDPOINT_ENV, otlp_receiver.url)
    assert telemetry.init_telemetry_from_env() is True
    METRICS.leader_elected.add(1)
    telemetry.shutdown_telemetry()
    assert "awa.leader.elected" in otlp_receiver.metric_points()


@pytest.mark.parametrize("endpoint", ["", "collector:4318"])
def test_bad_otlp_endpoint_is_a_validation_error(endpoint, monkeypatch):
    monkeypatch.delenv(telemetry.OTLP_ENDPOINT_ENV, raising=False)
    with pytest.raises(ValidationError, match="pass an http\\(s\\) URL"):
        telemetry.init_telemetry(endpoint)


def test_instruments_created_before_the_provider_export_once_it_is_set():
    """METRICS is built at import, on OTel's proxy meter; a fresh process proves the rebinding."""
    import subprocess
    import sys

    program = (
        "from awa import telemetry\n"
        "from awa.instruments import METRICS, job_attributes\n"
        "from opentelemetry import metrics as otel\n"
        "assert not hasattr(otel.get_meter_provider(), 'add_metric_reader')  # no SDK yet\n"
        "METRICS.job_completed.add(1, job_attributes('k', 'before'))  # dropped\n"
        "endpoint = telemetry.serve_prometheus('127.0.0.1:0')\n"
        "METRICS.job_completed.add(2, job_attributes('k', 'after'))\n"
        "print(endpoint.url)\n"
        "import httpx; print(httpx.get(endpoint.url).text)\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert 'awa_job_completed_total{awa_job_kind="k",awa_job_queue="after"} 2.0' in out
    assert 'awa_job_queue="before"' not in out
