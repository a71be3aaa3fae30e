"""Real worker subprocesses for crash tests: start, SIGKILL, wait.

    from support.processes import SHORT_INTERVALS, start_worker   # tests/ is on sys.path

    worker = start_worker(database_url, queues="default:4",
                          settings={**SHORT_INTERVALS, "deadline_duration_ms": ...})
    worker.wait_for_log("start", kind="slow")   # needs log_dir=...
    worker.kill()                                # SIGKILL, reaped

The worker is tests/support/worker_app.py (see its docstring for the handler
kinds).  Every worker is killed at interpreter exit if a test forgot to.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKER_APP = Path(__file__).with_name("worker_app.py")
ROOT = WORKER_APP.parent.parent.parent

# Intervals short enough for tests (never the production defaults).
SHORT_INTERVALS: dict[str, Any] = {
    "poll_interval_ms": 50,
    "heartbeat_interval_ms": 100,
    "heartbeat_staleness_ms": 1_000,
    "heartbeat_rescue_interval_ms": 200,
    "deadline_rescue_interval_ms": 200,
    "callback_rescue_interval_ms": 200,
    "promote_interval_ms": 50,
    "leader_election_interval_ms": 200,
    "snapshot_interval_ms": 200,
}

_live: list[WorkerProcess] = []


@dataclass
class WorkerProcess:
    proc: subprocess.Popen
    log_dir: Path | None
    instance_id: str = ""
    stderr_path: Path | None = None
    _lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final writes -- a crashed node."""
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait for the graceful shutdown; returns the exit status."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def wait(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        if self.stderr_path and self.stderr_path.exists():
            return self.stderr_path.read_text()
        return ""

    def log_lines(self) -> list[str]:
        """This process's handler log (``start|done|cancelled kind id attempt lease``)."""
        if self.log_dir is None:
            raise RuntimeError("start_worker(log_dir=...) to get handler logs")
        path = self.log_dir / f"{self.pid}.log"
        return path.read_text().splitlines() if path.exists() else []

    def wait_for_log(self, word: str, kind: str | None = None, count: int = 1,
                     timeout: float = 15.0) -> list[list[str]]:
        """Wait until ``count`` log lines start with ``word`` (and ``kind``)."""
        deadline = time.monotonic() + timeout
        while True:
            hits = [line.split() for line in self.log_lines()]
            hits = [h for h in hits if h[0] == word and (kind is None or h[1] == kind)]
            if len(hits) >= count:
                return hits
            if not self.alive:
                raise RuntimeError(f"worker {self.pid} exited ({self.proc.returncode}) before "
                                   f"{count} '{word}' line(s):\n{self.stderr()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {self.pid}: no {count} '{word}' line(s) after "
                                   f"{timeout}s; have {len(hits)}")
            time.sleep(0.02)


def start_worker(database_url: str, queues: str | list[tuple[str, int]] = "default:8", *,
                 settings: dict[str, Any] | None = None, log_dir: Path | str | None = None,
                 env: dict[str, str] | None = None, ready_timeout: float = 20.0) -> WorkerProcess:
    """Start tests/support/worker_app.py and wait until its runtime claims."""
    if not isinstance(queues, str):
        queues = ",".join(f"{name}:{n}" for name, n in queues)
    run_dir = Path(log_dir) if log_dir is not None else None
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
    stderr_dir = run_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    stderr_path = stderr_dir / f"awa-worker-{os.getpid()}-{time.monotonic_ns()}.stderr"
    full_env = {**os.environ, **(env or {}),
                "AWA_WORKER_DATABASE_URL": database_url,
                "AWA_WORKER_QUEUES": queues,
                "AWA_WORKER_SETTINGS": json.dumps({**SHORT_INTERVALS, **(settings or {})}),
                "PYTHONUNBUFFERED": "1"}
    if run_dir is not None:
        full_env["AWA_WORKER_LOG_DIR"] = str(run_dir)
    with open(stderr_path, "w") as stderr_file:  # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, str(WORKER_APP)], cwd=str(ROOT), env=full_env,
                                stdout=subprocess.PIPE, stderr=stderr_file, text=True)
    worker = WorkerProcess(proc, run_dir, stderr_path=stderr_path)
    _live.append(worker)
    deadline = time.monotonic() + ready_timeout
    assert proc.stdout is not None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            worker.kill()
            raise TimeoutError(f"worker not ready after {ready_timeout}s:\n"
                               f"{worker.stderr()[-2000:]}")
        ready, _, _ = select.select([proc.stdout], [], [], min(remaining, 0.5))
        if ready:
            line = proc.stdout.readline()
            if line.startswith("READY"):
                worker.instance_id = line.split("instance=")[1].strip()
                return worker
            if not line and proc.poll() is not None:
                raise RuntimeError(f"worker exited ({proc.returncode}) before READY:\n"
                                   f"{worker.stderr()[-2000:]}")


def kill_all() -> None:
    for worker in _live:
        if worker.alive:
            worker.kill()


atexit.register(kill_all)
