"""A real Prometheus server for tests: temp config and data dir, loopback port, 1 s scrapes."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import yaml

PROMETHEUS_BIN = "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrometheusServer:
    """``with PrometheusServer({"awa": ["127.0.0.1:9464"]}) as prom: prom.query(...)``."""

    def __init__(self, targets: dict[str, list[str]], scrape_interval: str = "1s",
                 rule_files: list[str] | None = None) -> None:
        self.binary = shutil.which("prometheus") or PROMETHEUS_BIN
        self.directory = Path(tempfile.mkdtemp(prefix="awa-prometheus-"))
        self.port = free_port()
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": addrs}]}
                               for job, addrs in targets.items()],
        }
        if rule_files:
            config["rule_files"] = list(rule_files)
        (self.directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> PrometheusServer:
        with open(self.directory / "stderr.log", "wb") as stderr:  # the child keeps its own
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={self.directory / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("prometheus exited: "
                                   + (self.directory / "stderr.log").read_text()[-2000:])
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("prometheus did not become ready")

    def query(self, promql: str) -> list[dict]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"query {promql!r} failed: {body}")
        return body["data"]["result"]

    def wait_for(self, promql: str, timeout: float = 20.0) -> list[dict]:
        """Poll until ``promql`` returns a non-empty result."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.25)

    def targets_up(self) -> list[dict]:
        return httpx.get(f"{self.url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
