"""The incident matrix's real parts: a fleet of worker processes, `awa-ops exporter`, a real
Prometheus loading the alert rules on a faster clock, and the observers that record what
every signal said (issue 46).

Time is scaled by ``SCALE``: every interval of the workers (heartbeat, staleness, rescue,
snapshot, election, cleanup, ...) and every ``for:``, range window, offset and duration
threshold of the rules (``awa_ops.generate.alerts.scaled_rules``, the same source as
``alerts/awa-rules.yml``) is multiplied by it, so one real second is 1/SCALE seconds of
production time.  Reports convert back: "fired after 4.2 min" means 4.2 production minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from awa import config
from awa_ops.console import ConsoleReader
from awa_ops.generate.alerts import Thresholds, rules_document, scaled_rules
from awa_ops.session import OpsSession
from metrics.prometheus_server import PrometheusServer, free_port
from support.processes import WorkerProcess, start_worker

# One real second is 15 production seconds: a 3-minute for: takes 12 s, the 90 s heartbeat
# staleness 6 s, a runtime is gone 2 s after its last snapshot (OPS_RUNTIME_LIVE_MIN_S).
SCALE = 1 / 15
# The fastest any loop may run, whatever the scale says (a 200 ms poll becomes 50 ms).
MIN_INTERVAL_MS = 50


def scaled_settings(**overrides: Any) -> dict[str, Any]:
    """Every interval and staleness of the runtime's defaults (config.RuntimeSettings)
    times SCALE: the production timing on the matrix's clock."""
    out: dict[str, Any] = {}
    for name, value in vars(config.RuntimeSettings()).items():
        if name.endswith(("_interval_ms", "_staleness_ms")) and isinstance(value, int):
            out[name] = max(MIN_INTERVAL_MS, round(value * SCALE))
    out["shutdown_timeout_ms"] = max(MIN_INTERVAL_MS, round(config.SHUTDOWN_TIMEOUT_MS * SCALE))
    return {**out, **overrides}


def production_minutes(real_s: float) -> float:
    return real_s / SCALE / 60


@dataclass
class AlertSeen:
    """The first time an alert was seen firing, in real seconds after the incident began
    (negative: before it, i.e. while the fleet was being set up)."""

    name: str
    at_s: float
    labels: dict[str, str]


@dataclass
class Observation:
    """What every signal said at one moment."""

    at_s: float
    diagnose: dict[str, dict[str, Any]]  # check -> {status, summaries, next_steps}
    health: dict[str, Any]
    console: str | None  # the Overview's finding (Overview.problem())
    unserved: list[str]


class Fleet:
    """One scenario's world: its database, workers, exporter and Prometheus."""

    def __init__(self, url: str, directory: Path, cluster: Any = None) -> None:
        self.url = url
        self.directory = directory
        # The scenario's own PostgreSQL (support.pgcluster.PrivateCluster) when its incident
        # is server-wide (a replication slot, a stopped server): None on a shared server.
        self.cluster = cluster
        self.workers: list[WorkerProcess] = []
        self.metrics_ports: dict[int, int] = {}  # worker pid -> its metrics port
        self.exporter: subprocess.Popen[bytes] | None = None
        self.exporter_port = free_port()
        self.targets_file = directory / "targets.json"
        self.prometheus: PrometheusServer | None = None
        self.t0 = time.monotonic()
        self.started = self.t0  # when Prometheus started (start())
        self.alerts: dict[str, AlertSeen] = {}
        self.observations: list[Observation] = []
        self.diagnose_flags: list[str] = []
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self.env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}

    # --- parts ---------------------------------------------------------------------
    def start(self) -> Fleet:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.start_exporter()
        self._write_targets()
        rules = self.directory / "rules.yml"
        rules.write_text(yaml.safe_dump(rules_document(scaled_rules(Thresholds(), SCALE), ""),
                                        sort_keys=False))
        self.prometheus = PrometheusServer({}, rule_files=[str(rules)])
        cfg_path = self.prometheus.directory / "prometheus.yml"
        cfg = yaml.safe_load(cfg_path.read_text())
        cfg["scrape_configs"] = [{"job_name": "awa", "file_sd_configs": [
            {"files": [str(self.targets_file)], "refresh_interval": "1s"}]}]
        cfg_path.write_text(yaml.safe_dump(cfg))
        self.prometheus.start()
        self.started = time.monotonic()
        self._poller = threading.Thread(target=self._poll_alerts, daemon=True)
        self._poller.start()
        return self

    def start_exporter(self) -> None:
        with open(self.directory / "exporter.log", "ab") as log:  # the child keeps its own
            self.exporter = subprocess.Popen(
                [sys.executable, "-m", "awa_ops.cli", "exporter", "--database-url", self.url,
                 "--listen", f"127.0.0.1:{self.exporter_port}"],
                stdout=subprocess.DEVNULL, stderr=log, env=self.env)
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.exporter_port}/metrics",
                             timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.exporter.poll() is not None:
                raise RuntimeError("awa-ops exporter did not start: "
                                   + (self.directory / "exporter.log").read_text()[-2000:])
            time.sleep(0.1)

    def stop_exporter(self) -> None:
        if self.exporter is not None and self.exporter.poll() is None:
            self.exporter.kill()
            self.exporter.wait(10)

    def worker(self, queues: str, env: dict[str, str] | None = None,
               **settings: Any) -> WorkerProcess:
        port = free_port()
        worker = start_worker(self.url, queues,
                              settings=scaled_settings(metrics_addr=f"127.0.0.1:{port}",
                                                       **settings),
                              log_dir=self.directory / "workers", env=env)
        self.workers.append(worker)
        self.metrics_ports[worker.pid] = port
        self._write_targets()
        return worker

    def _write_targets(self) -> None:
        targets = [f"127.0.0.1:{self.exporter_port}"] + [
            f"127.0.0.1:{self.metrics_ports[w.pid]}" for w in self.workers if w.alive]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": targets}]))
        tmp.replace(self.targets_file)

    def forget_dead(self) -> None:
        """Prometheus scrapes only live processes (a dead one is a down target, as in
        production service discovery after the pod is gone)."""
        self._write_targets()

    def close(self) -> None:
        self._stop.set()
        for w in self.workers:
            if w.alive:
                try:
                    os.kill(w.pid, 18)  # SIGCONT: a frozen one must be able to die
                except ProcessLookupError:
                    pass
                w.kill()
        self.stop_exporter()
        if self.prometheus is not None:
            self.prometheus.stop()

    # --- the clock ---------------------------------------------------------------
    def incident_begins(self) -> None:
        """From now on, alerts count against the scenario's expectation."""
        self.t0 = time.monotonic()

    def wait_for_history(self, real_s: float) -> None:
        """Wait until Prometheus has ``real_s`` of history.  Rules that count a series born
        inside their window (``recent_increase``, ``gauge_growth``) stay silent until the
        window lies inside Prometheus' history -- a fresh Prometheus cannot tell a burst from
        an old total -- so an incident such a rule must catch begins after it, as it would in
        production where Prometheus has run for days."""
        time.sleep(max(0.0, self.started + real_s - time.monotonic()))

    def now_s(self) -> float:
        return time.monotonic() - self.t0

    def sleep_until(self, at_s: float) -> None:
        time.sleep(max(0.0, at_s - self.now_s()))

    # --- observers ---------------------------------------------------------------
    def _poll_alerts(self) -> None:
        assert self.prometheus is not None
        while not self._stop.is_set():
            try:
                body = httpx.get(f"{self.prometheus.url}/api/v1/alerts", timeout=3).json()
                for alert in body["data"]["alerts"]:
                    name = alert["labels"]["alertname"]
                    if alert["state"] == "firing" and name not in self.alerts:
                        labels = {k: v for k, v in alert["labels"].items()
                                  if k not in ("alertname", "severity")}
                        self.alerts[name] = AlertSeen(name, self.now_s(), labels)
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            self._stop.wait(0.5)

    def observe(self) -> Observation:
        at = self.now_s()
        timing = scaled_settings()
        diagnose = subprocess.run(
            [sys.executable, "-m", "awa_ops.cli", "diagnose", "all", "--database-url", self.url,
             "--json", "--election-interval", str(timing["leader_election_interval_ms"] / 1000),
             "--rescue-interval", str(timing["heartbeat_rescue_interval_ms"] / 1000),
             *self.diagnose_flags], capture_output=True, text=True, env=self.env, timeout=120)
        checks: dict[str, dict[str, Any]] = {}
        try:
            for c in json.loads(diagnose.stdout)["checks"]:
                checks[c["check"]] = {
                    "status": c["status"],
                    "summaries": [f["summary"] for f in c["findings"]
                                  if f["severity"] != "ok"] or [c.get("error") or ""],
                    "next_steps": [f["next_step"] or "" for f in c["findings"]
                                   if f["severity"] != "ok"]}
        except (ValueError, KeyError):
            checks["all"] = {"status": "could not run", "summaries": [diagnose.stderr[-500:]],
                             "next_steps": []}
        health = subprocess.run(
            [sys.executable, "-m", "awa", "health", "--json", "--database-url", self.url],
            capture_output=True, text=True, env=self.env, timeout=60)
        try:
            report = json.loads(health.stdout)
        except ValueError:
            report = {"status": "could not run", "problems": [health.stderr[-300:]]}
        problem, unserved = asyncio.run(self._console())
        return Observation(at, checks, report, problem, unserved)

    async def _console(self) -> tuple[str | None, list[str]]:
        try:
            session = await OpsSession.open(self.url, read_only=True)
        except Exception as exc:  # noqa: BLE001 - any failed read is what the console shows
            # recorded as seen; the console itself keeps its last screen and marks the read
            # failed (awa_tui)
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return f"READ FAILED: {first}", []
        try:
            overview = await ConsoleReader(session).overview()
            return overview.problem(), overview.unserved()
        finally:
            await session.close()


@dataclass
class Verdict:
    """One scenario's expectation against what was seen."""

    scenario: str
    alerts_expected: dict[str, float]  # name -> must fire within (real s)
    alerts_seen: dict[str, AlertSeen]
    observations: list[Observation]
    problems: list[str] = field(default_factory=list)
    # (signal, expected, seen) for the precision/recall tally
    tally: list[tuple[str, bool, bool]] = field(default_factory=list)
