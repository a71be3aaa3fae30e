"""A fleet of real worker processes (fleet_worker.py) and what their execution log says.

    fleet = Fleet(pooled_url, log_dir, processes=8)
    fleet.start()
    fleet.kill(pid)               # SIGKILL, reaped; remembered as a fault
    log = fleet.read_log()        # ExecutionLog: starts, dones, crons, leadership per pid
                                  # (read incrementally: only new lines are parsed)
    fleet.stop()

Shared by tests/topology/test_fleet.py and benchmarks/pgbouncer.py.
"""

from __future__ import annotations

import bisect
import os
import select
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

WORKER = Path(__file__).with_name("fleet_worker.py")
READY_TIMEOUT_S = 60.0
Run = tuple[int, int, float]


@dataclass
class ExecutionLog:
    """Every line of every process's log, by what it says."""

    # job id -> [(pid, run_lease, t)]
    starts: dict[int, list[Run]] = field(default_factory=lambda: defaultdict(list))
    dones: dict[int, list[Run]] = field(default_factory=lambda: defaultdict(list))
    # cron slot -> [(pid, job id, t)]
    crons: dict[str, list[Run]] = field(default_factory=lambda: defaultdict(list))
    # (t, pid, "on" | "off"), in time order
    leadership: list[tuple[float, int, str]] = field(default_factory=list)
    # pid -> {(job id, run_lease)} started and not (yet) done: kept as lines arrive, so
    # "who has attempts in flight" is one lookup, not a pass over every start.
    in_flight: dict[int, set[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(set))
    # The latest done line's time (0.0 before any).
    last_done: float = 0.0

    def done_times(self) -> list[float]:
        return sorted(t for runs in self.dones.values() for _, _, t in runs)

    def add(self, pid: int, line: str) -> None:
        """One whole line of process ``pid``'s log."""
        words = line.split()
        try:
            if words[0] in ("start", "done") and len(words) == 4:
                job_id, lease, t = int(words[1]), int(words[2]), float(words[3])
                if words[0] == "start":
                    self.starts[job_id].append((pid, lease, t))
                    self.in_flight[pid].add((job_id, lease))
                else:
                    self.dones[job_id].append((pid, lease, t))
                    self.in_flight[pid].discard((job_id, lease))
                    self.last_done = max(self.last_done, t)
            elif words[0] == "cron" and len(words) == 4:
                self.crons[words[2]].append((pid, int(words[1]), float(words[3])))
            elif words[0] == "leader" and len(words) == 3:
                bisect.insort(self.leadership, (float(words[2]), pid, words[1]))
        except (IndexError, ValueError):
            return  # a line cut by a SIGKILL


class LogReader:
    """Reads the processes' logs incrementally: each poll parses only the bytes appended
    since the last one (a full re-parse per poll took seconds at 50,000 jobs under load,
    long enough to miss every short-lived state the harness waits for)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.log = ExecutionLog()
        self._offsets: dict[Path, int] = {}

    def read(self) -> ExecutionLog:
        for path in sorted(self.log_dir.glob("*.log")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # a line still being written waits for its newline
            if not end:
                continue
            self._offsets[path] = offset + end
            pid = int(path.stem)
            for line in chunk[:end].decode(errors="replace").splitlines():
                self.log.add(pid, line)
        return self.log


def parse_logs(log_dir: Path) -> ExecutionLog:
    """Every log of ``log_dir``, parsed once."""
    return LogReader(log_dir).read()


class Fleet:
    def __init__(self, database_url: str, log_dir: Path, *, processes: int = 8,
                 slots: int = 64, connections: int = 10, cron: bool = False,
                 direct_database_url: str | None = None) -> None:
        self.database_url = database_url
        self.direct_database_url = direct_database_url
        self.log_dir = log_dir
        self.processes = processes
        self.slots = slots
        self.connections = connections
        self.cron = cron
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.killed: dict[int, float] = {}  # pid -> when it was SIGKILLed
        log_dir.mkdir(parents=True, exist_ok=True)
        self._reader = LogReader(log_dir)

    def start(self) -> None:
        """Every process at once, then wait for each to claim.  One that never gets ready
        stops them all: the test's ``finally`` is not reached, and left running the others
        would poll on (at full CPU against a stopped pooler) for the rest of the suite."""
        spawned = [self._spawn() for _ in range(self.processes)]
        try:
            for proc in spawned:
                self._wait_ready(proc)
        except BaseException:
            self.stop()
            raise

    def start_one(self) -> int:
        return self._wait_ready(self._spawn())

    def _spawn(self) -> subprocess.Popen[str]:
        env = {**os.environ, "FLEET_DATABASE_URL": self.database_url,
               "FLEET_LOG_DIR": str(self.log_dir), "FLEET_SLOTS": str(self.slots),
               "FLEET_CONNECTIONS": str(self.connections),
               "FLEET_CRON": "1" if self.cron else "0", "PYTHONUNBUFFERED": "1"}
        if self.direct_database_url:
            env["FLEET_DIRECT_DATABASE_URL"] = self.direct_database_url
        stderr = open(self.log_dir / f"stderr-{time.monotonic_ns()}.txt", "w")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen([sys.executable, str(WORKER)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=stderr)
        stderr.close()
        self.procs[proc.pid] = proc
        return proc

    def _wait_ready(self, proc: subprocess.Popen[str]) -> int:
        deadline = time.monotonic() + READY_TIMEOUT_S
        assert proc.stdout is not None
        while True:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(min(remaining, 0.5), 0))
            if ready:
                line = proc.stdout.readline()
                if line.startswith("READY"):
                    break
                if not line:
                    raise RuntimeError(f"fleet worker exited ({proc.wait()}) before READY: "
                                       f"{self.stderr_tail()}")
            if remaining <= 0:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"fleet worker not ready after {READY_TIMEOUT_S}s: "
                                   f"{self.stderr_tail()}")
        return proc.pid

    def kill(self, pid: int) -> None:
        proc = self.procs[pid]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.killed[pid] = time.time()

    def alive(self) -> list[int]:
        return [pid for pid, p in self.procs.items() if p.poll() is None]

    def read_log(self) -> ExecutionLog:
        """The execution log so far: one object, brought up to date by each call."""
        return self._reader.read()

    def stderr_tail(self, chars: int = 3000) -> str:
        texts = [p.read_text(errors="replace") for p in sorted(self.log_dir.glob("stderr-*"))]
        return "\n".join(t for t in texts if t.strip())[-chars:]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
