"""Getting metrics and traces out: a Prometheus scrape endpoint, OTLP export, trace context.

awa records through the OpenTelemetry *API* (``awa.instruments.METRICS``, the
tracer below).  This module installs the SDK when nobody else has: if the
application already set an SDK MeterProvider / TracerProvider, ours readers
and span processors are added to it instead, so awa's metrics travel with the
application's.  The SDK and exporters are imported lazily: ``import awa``
stays light for producers that never export anything.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace

from awa import config, instruments, metrics
from awa.job import AwaError, ValidationError

if TYPE_CHECKING:  # the SDK is imported where it is used
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
DEFAULT_SERVICE_NAME = "awa"
DEFAULT_EXPORT_INTERVAL_MS = 5_000
TRACEPARENT_KEY = "traceparent"  # the W3C header, and the job metadata key it is stored under
TRACER_NAME = "awa"

_lock = threading.RLock()


# --- providers ---------------------------------------------------------------
def _resource(service_name: str | None) -> Resource:
    from opentelemetry.sdk.resources import Resource

    name = service_name or os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME
    return Resource.create({"service.name": name})


def _install_sdk_provider(get_provider: Callable[[], Any], set_provider: Callable[[Any], None],
                          sdk_class: type[Any], service_name: str | None, what: str) -> Any:
    """The global provider when it is the SDK's; installs one when none is set yet."""
    with _lock:
        current = get_provider()
        if isinstance(current, sdk_class):
            return current
        provider = sdk_class(resource=_resource(service_name))
        set_provider(provider)
        if get_provider() is not provider:
            raise AwaError(f"the application installed a {sdk_class.__name__} that is not the "
                           f"OpenTelemetry SDK's; add awa's {what} to it yourself")
        return provider


def _sdk_meter_provider(service_name: str | None = None) -> MeterProvider:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.sdk.metrics import MeterProvider

    provider: MeterProvider = _install_sdk_provider(
        otel_metrics.get_meter_provider, otel_metrics.set_meter_provider, MeterProvider,
        service_name, "exporters")
    return provider


def _sdk_tracer_provider(service_name: str | None = None) -> TracerProvider:
    from opentelemetry.sdk.trace import TracerProvider

    provider: TracerProvider = _install_sdk_provider(
        trace.get_tracer_provider, trace.set_tracer_provider, TracerProvider, service_name,
        "span exporter")
    return provider


# --- awa's histograms: pre-aggregated, turned into histogram points by the reader ---
_aggregation: Any = None


def awa_aggregation() -> Any:
    """The reader-side aggregation for ObservableGauge instruments (the SDK's ``Aggregation``).

    awa's histograms (``awa.instruments.PreHistogram``) record into fixed buckets in
    the process and are registered as observable gauges whose observations are
    whole cumulative histograms; this aggregation hands those to the reader as
    explicit-bucket histogram points (same boundaries, so Prometheus sees the
    same ``_bucket``/``_sum``/``_count``).  Every other observable gauge gets the
    SDK's default aggregation.  Readers awa creates use it; an application that
    builds its own reader passes ``preferred_aggregation()`` to it.
    """
    global _aggregation
    if _aggregation is None:
        _aggregation = _build_aggregation()
    return _aggregation


def preferred_aggregation() -> dict[type, Any]:
    """``preferred_aggregation=`` for an application's own MetricReader / OTLP exporter."""
    from opentelemetry.sdk.metrics import ObservableGauge

    return {ObservableGauge: awa_aggregation()}


def _build_aggregation() -> Any:
    # The SDK has no public extension point for a custom aggregation: an
    # Aggregation subclass implements _create_aggregation, and the point type
    # is decided by isinstance(_ExplicitBucketHistogramAggregation).
    from opentelemetry.sdk.metrics._internal.aggregation import (
        AggregationTemporality,
        _ExplicitBucketHistogramAggregation,
    )
    from opentelemetry.sdk.metrics.export import HistogramDataPoint
    from opentelemetry.sdk.metrics.view import Aggregation, DefaultAggregation

    default = DefaultAggregation()

    class _PreAggregatedHistogram(_ExplicitBucketHistogramAggregation):
        """Reports the last observed ``HistogramPoint`` (cumulative; delta on request)."""

        def __init__(self, attributes: Any, start_ns: int, reservoir_builder: Any,
                     boundaries: tuple[float, ...]) -> None:
            super().__init__(attributes, AggregationTemporality.CUMULATIVE, start_ns,
                             reservoir_builder, boundaries)
            self._point: instruments.HistogramPoint | None = None
            self._reported: instruments.HistogramPoint | None = None
            self._reported_ns = start_ns

        def aggregate(self, measurement: Any, should_sample_exemplar: bool = True) -> None:
            if isinstance(measurement.value, instruments.HistogramPoint):
                self._point = measurement.value

        def collect(self, collection_aggregation_temporality: Any,
                    collection_start_nano: int) -> Any:
            with self._lock:
                point = self._point
                if point is None:
                    return None
                counts, total, start = point.bucket_counts, point.sum, point.start_time_unix_nano
                if collection_aggregation_temporality is AggregationTemporality.DELTA:
                    before, self._reported = self._reported, point
                    start, self._reported_ns = (self._reported_ns or start), collection_start_nano
                    if before is not None:
                        counts = tuple(a - b for a, b in zip(counts, before.bucket_counts))
                        total = total - before.sum
                return HistogramDataPoint(
                    attributes=self._attributes, exemplars=[], start_time_unix_nano=start,
                    time_unix_nano=collection_start_nano, count=sum(counts), sum=total,
                    bucket_counts=counts, explicit_bounds=self._boundaries,
                    min=point.min, max=point.max)

    class AwaAggregation(Aggregation):
        """awa's histograms as histograms; any other observable gauge as the default."""

        def _create_aggregation(self, instrument: Any, attributes: Any, reservoir_factory: Any,
                                start_time_unix_nano: int) -> Any:
            boundaries = None
            if getattr(instrument.instrumentation_scope, "name", None) == instruments.METER_NAME:
                boundaries = metrics.histogram_boundaries(instrument.name)
            if boundaries is None:
                return default._create_aggregation(instrument, attributes, reservoir_factory,
                                                   start_time_unix_nano)
            return _PreAggregatedHistogram(
                attributes, start_time_unix_nano,
                reservoir_factory(_ExplicitBucketHistogramAggregation), boundaries)

    return AwaAggregation()


def _prometheus_reader(registry: Any) -> Any:
    """A PrometheusMetricReader that aggregates awa's histograms (see ``awa_aggregation``).

    The Prometheus reader takes no ``preferred_aggregation``; its MetricReader
    base keeps the per-instrument-class table, which is set here.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics._internal.instrument import _ObservableGauge

    reader = PrometheusMetricReader(registry=registry, scope_info_enabled=False)
    reader._instrument_class_aggregation[_ObservableGauge] = awa_aggregation()
    return reader


# --- Prometheus scrape endpoint ------------------------------------------------
@dataclass
class PrometheusEndpoint:
    """A running scrape endpoint; ``close()`` stops it and detaches its reader."""

    host: str
    port: int
    _server: Any = field(repr=False)
    _thread: Any = field(repr=False)
    _reader: Any = field(repr=False)
    _provider: Any = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        with _lock:
            if self._server is None:
                return
            server, self._server = self._server, None
        server.shutdown()
        server.server_close()
        self._thread.join(timeout=5)
        self._provider.remove_metric_reader(self._reader)


def parse_listen_address(addr: str, default_host: str = config.METRICS_HOST) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``port`` (host defaults to loopback) -> (host, port)."""
    text = str(addr).strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or default_host
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValidationError(f"invalid metrics address {addr!r}: use HOST:PORT or PORT, "
                              f"e.g. {config.METRICS_HOST}:9464")
    return host, port


def serve_prometheus(addr: str) -> PrometheusEndpoint:
    """Serve ``/metrics`` for Prometheus on ``addr`` (port 0 picks a free port).

    The endpoint exports only what the OTel SDK collects (awa's catalogue and
    any instruments the application created), not the process collectors of
    prometheus_client's global registry.
    """
    from prometheus_client import CollectorRegistry, start_http_server

    host, port = parse_listen_address(addr)
    provider = _sdk_meter_provider()
    registry = CollectorRegistry(auto_describe=False)
    reader = _prometheus_reader(registry)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise AwaError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; "
                       "choose another --metrics-addr") from None
    provider.add_metric_reader(reader)
    return PrometheusEndpoint(host, server.server_address[1], server, thread, reader, provider)


# --- OTLP export ---------------------------------------------------------------
@dataclass
class _OtlpState:
    metric_reader: Any
    span_processor: Any
    meter_provider: Any


_otlp: _OtlpState | None = None
_otlp_args: tuple[str, str | None, int] | None = None


def init_telemetry(endpoint: str | None = None, service_name: str | None = None,
                   export_interval_ms: int = DEFAULT_EXPORT_INTERVAL_MS) -> bool:
    """Export awa's metrics and handler spans over OTLP/HTTP to ``endpoint``.

    ``endpoint`` is the collector's base URL (``http://collector:4318``);
    without it ``OTEL_EXPORTER_OTLP_ENDPOINT`` is used.  Idempotent, as in
    awa-pg 0.6.9: True when this call set the export up, False when the same
    export was already running; other arguments replace the previous export.
    Pair with ``shutdown_telemetry()``, which flushes what is buffered.
    """
    global _otlp, _otlp_args
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    base = (endpoint or os.environ.get(OTLP_ENDPOINT_ENV) or "").strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValidationError(f"invalid OTLP endpoint {base or '(none)'!r}: pass an http(s) URL "
                              f"such as http://localhost:4318 or set {OTLP_ENDPOINT_ENV}")
    if export_interval_ms <= 0:
        raise ValidationError("export_interval_ms must be positive")
    with _lock:
        if _otlp is not None and _otlp_args == (base, service_name, export_interval_ms):
            return False
        shutdown_telemetry()
        _otlp_args = (base, service_name, export_interval_ms)
        meter_provider = _sdk_meter_provider(service_name)
        tracer_provider = _sdk_tracer_provider(service_name)
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics",
                               preferred_aggregation=preferred_aggregation()),
            export_interval_millis=export_interval_ms)
        meter_provider.add_metric_reader(reader)
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces"),
                                       schedule_delay_millis=export_interval_ms)
        tracer_provider.add_span_processor(processor)
        _otlp = _OtlpState(reader, processor, meter_provider)
    return True


def init_telemetry_from_env() -> bool:
    """Called by the runtime at start: OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set."""
    with _lock:
        if _otlp is not None or not os.environ.get(OTLP_ENDPOINT_ENV):
            return _otlp is not None
        init_telemetry()
        return True


def shutdown_telemetry() -> None:
    """Flush and stop the OTLP export started by ``init_telemetry`` (no-op otherwise)."""
    global _otlp
    with _lock:
        state, _otlp = _otlp, None
    if state is None:
        return
    state.span_processor.force_flush()
    state.span_processor.shutdown()
    # Export what is pending first: remove_metric_reader detaches the reader
    # before shutting it down, so its final collection would see nothing.
    state.metric_reader.force_flush()
    state.meter_provider.remove_metric_reader(state.metric_reader)


# --- tracing -------------------------------------------------------------------
def current_traceparent() -> str | None:
    """The ambient W3C traceparent, for the producer to store in job metadata."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get(TRACEPARENT_KEY)


def _producer_link(job: Any) -> list[trace.Link]:
    metadata = getattr(job, "metadata", None) or {}
    traceparent = metadata.get(TRACEPARENT_KEY) if isinstance(metadata, dict) else None
    if not isinstance(traceparent, str):
        return []
    context = trace.get_current_span(propagate.extract({TRACEPARENT_KEY: traceparent}))
    span_context = context.get_span_context()
    return [trace.Link(span_context)] if span_context.is_valid else []


@contextmanager
def handler_span(job: Any) -> Iterator[trace.Span]:
    """The span one handler attempt runs in, linked to the producer's trace.

    A link (not a parent): the job may run long after, and many times after,
    the request that enqueued it.  Set the outcome with ``set_outcome(span, ...)``.
    """
    attributes = {
        metrics.ATTR_KIND: job.kind,
        metrics.ATTR_QUEUE: job.queue,
        metrics.ATTR_ATTEMPT: job.attempt,
        metrics.ATTR_JOB_ID: job.id,
    }
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(f"awa.job {job.kind}", kind=trace.SpanKind.CONSUMER,
                                      links=_producer_link(job),
                                      attributes=attributes) as span:
        yield span


def set_outcome(span: trace.Span, outcome: str) -> None:
    """Record how the attempt ended (completed, retryable, failed, cancelled, ...)."""
    span.set_attribute(metrics.ATTR_OUTCOME, outcome)
