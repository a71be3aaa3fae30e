"""Getting metrics and traces out: a Prometheus scrape endpoint, OTLP export, trace context.

awa records through the OpenTelemetry *API* (``awa.metrics.METRICS``, the
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from opentelemetry import propagate, trace

from awa import config, metrics
from awa.job import AwaError, ValidationError

log = logging.getLogger(__name__)

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
DEFAULT_SERVICE_NAME = "awa"
DEFAULT_EXPORT_INTERVAL_MS = 5_000
TRACEPARENT_KEY = "traceparent"  # the W3C header, and the job metadata key it is stored under
TRACER_NAME = "awa"

_lock = threading.RLock()


# --- providers ---------------------------------------------------------------
def _resource(service_name: str | None):
    from opentelemetry.sdk.resources import Resource

    name = service_name or os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME
    return Resource.create({"service.name": name})


def _install_sdk_provider(get_provider, set_provider, sdk_class, service_name: str | None,
                          what: str):
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


def _sdk_meter_provider(service_name: str | None = None):
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.sdk.metrics import MeterProvider

    return _install_sdk_provider(otel_metrics.get_meter_provider, otel_metrics.set_meter_provider,
                                 MeterProvider, service_name, "exporters")


def _sdk_tracer_provider(service_name: str | None = None):
    from opentelemetry.sdk.trace import TracerProvider

    return _install_sdk_provider(trace.get_tracer_provider, trace.set_tracer_provider,
                                 TracerProvider, service_name, "span exporter")


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
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    host, port = parse_listen_address(addr)
    provider = _sdk_meter_provider()
    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(registry=registry, scope_info_enabled=False)
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


def init_telemetry(endpoint: str | None = None, service_name: str | None = None,
                   export_interval_ms: int = DEFAULT_EXPORT_INTERVAL_MS) -> None:
    """Export awa's metrics and handler spans over OTLP/HTTP to ``endpoint``.

    ``endpoint`` is the collector's base URL (``http://collector:4318``);
    without it ``OTEL_EXPORTER_OTLP_ENDPOINT`` is used.  Calling it again
    replaces the previous export.  Pair with ``shutdown_telemetry()``, which
    flushes what is buffered.
    """
    global _otlp
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
        shutdown_telemetry()
        meter_provider = _sdk_meter_provider(service_name)
        tracer_provider = _sdk_tracer_provider(service_name)
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics"),
            export_interval_millis=export_interval_ms)
        meter_provider.add_metric_reader(reader)
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces"),
                                       schedule_delay_millis=export_interval_ms)
        tracer_provider.add_span_processor(processor)
        _otlp = _OtlpState(reader, processor, meter_provider)


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


def _producer_link(job: Any) -> list:
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
