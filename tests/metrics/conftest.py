"""Shared helpers for the metrics tests: scraping, and a real OTLP/HTTP receiver."""

from __future__ import annotations

import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from awa import telemetry


def scrape(url: str) -> dict[str, list]:
    """Prometheus series name -> samples, parsed by prometheus_client's own parser."""
    response = httpx.get(url, timeout=5)
    response.raise_for_status()
    series: dict[str, list] = defaultdict(list)
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            series[sample.name].append(sample)
    return series


def value(series: dict[str, list], name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(s.value for s in series.get(name, [])
               if all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture
def prometheus_endpoint():
    endpoint = telemetry.serve_prometheus("127.0.0.1:0")
    yield endpoint
    endpoint.close()


class OtlpReceiver:
    """An OTLP/HTTP (protobuf) collector stand-in: keeps every request body by path."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = defaultdict(list)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.bodies[self.path].append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def metric_points(self) -> dict[str, list]:
        """OTel metric name -> data points, over every export received."""
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        points: dict[str, list] = defaultdict(list)
        for body in self.bodies["/v1/metrics"]:
            request = ExportMetricsServiceRequest.FromString(body)
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        data = getattr(metric, metric.WhichOneof("data"))
                        points[metric.name].extend(data.data_points)
        return points

    def spans(self) -> list:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
        found = []
        for body in self.bodies["/v1/traces"]:
            request = ExportTraceServiceRequest.FromString(body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    found.extend(ss.spans)
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp_receiver():
    receiver = OtlpReceiver()
    yield receiver
    telemetry.shutdown_telemetry()
    receiver.close()
