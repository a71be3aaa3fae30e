"""Chaos: real faults against real worker processes, judged by an independent execution log.

    python3 dev.py bench benchmarks/chaos.py                       # every scenario
    python3 dev.py bench benchmarks/chaos.py --scenario leader_sigstop --jobs 5000

Each scenario gets a fresh database on a private PostgreSQL cluster this script
starts (so terminating every backend or restarting the server never touches
the shared server), ``--jobs`` short jobs (kind ``sleep``, ``--job-ms`` each)
and ``--workers`` worker processes (tests/support/worker_app.py, the test
suite's short intervals, election 200 ms, with ``--staleness-ms`` heartbeat
staleness, 2.5 s by default).  Every
handler appends ``start``/``done`` lines with the attempt's run_lease and the
time to its own log file: that log, not the database, says what ran.

Per scenario it reports:

* ``lost``           -- jobs that never completed: missing, failed or cancelled;
* ``stuck``          -- jobs still not terminal when the settle time ran out;
* ``twice``          -- jobs that completed in two attempts, both by processes
  that were neither killed nor stopped around them (a healthy attempt run
  again: a double execution the faults do not excuse);
* ``re-executed``    -- jobs started more than once (expected after a kill);
* ``recovery``       -- seconds from the end of the last fault to the next
  completion (for pg_restart: from the server answering again).

The run fails (exit 1) when lost, twice or stuck is non-zero in any scenario.
Results go to stdout and, with ``--json FILE``, to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import awa  # noqa: E402 - the checkout's awa, whatever the venv has
from awa import storage  # noqa: E402 - as above
from support.pgcluster import PrivateCluster  # noqa: E402 - tests/ put on sys.path above
from support.processes import WorkerProcess, start_worker  # noqa: E402 - likewise

# A completion is written within a flush interval of the handler's return;
# an attempt whose process was killed or stopped this soon after is excused.
DELIVERY_WINDOW_S = 1.0
SETTLE_TIMEOUT_S = 120.0
POLL_S = 0.05

COUNT_STATES = "SELECT state::text AS state, count(*) AS n FROM awa.jobs GROUP BY state"
COMPLETED = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
LEADER_PID = ("SELECT pid FROM awa.runtime_instances WHERE leader AND NOT shutting_down "
              "AND last_seen_at > now() - interval '1 second' ORDER BY last_seen_at DESC")
ATTEMPTS_STILL_RUNNING = """
SELECT count(*) FROM awa.jobs j JOIN unnest(%s::bigint[], %s::bigint[]) AS a(id, lease)
    ON j.id = a.id AND j.run_lease = a.lease AND j.state = 'running'
"""
TERMINATE_BACKENDS = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@dataclass
class Fault:
    """A process that was killed or stopped, and when (for the delivery window)."""

    pid: int
    start: float
    end: float


@dataclass
class Result:
    scenario: str
    jobs: int
    lost: int = 0
    stuck: int = 0
    twice: int = 0
    re_executed: int = 0
    recovery_s: float | None = None
    new_leader_s: float | None = None
    rescued_while_stopped: int | None = None
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.stuck == 0 and self.twice == 0


class Run:
    """One scenario: its database, its workers, its fault record."""

    def __init__(self, cluster: PrivateCluster, name: str, args: argparse.Namespace) -> None:
        self.cluster, self.name, self.args = cluster, name, args
        self.db_name = f"chaos_{name}"
        self.url = cluster.url(self.db_name)
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"awa-chaos-{name}-"))
        self.workers: list[WorkerProcess] = []
        self.faults: list[Fault] = []
        self.stopped: set[int] = set()
        self.result = Result(name, jobs=0)

    # -- set-up -------------------------------------------------------------------
    def prepare(self) -> None:
        with psycopg.connect(self.cluster.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.db_name}"')
        with psycopg.connect(self.url, autocommit=True) as conn:
            storage.migrate_sync(conn, self.args.engine)

        self.enqueue(self.args.jobs, self.args.job_ms)
        for _ in range(self.args.workers):
            self.spawn()

    def enqueue(self, jobs: int, job_ms: int) -> None:
        async def insert() -> None:
            async with awa.AsyncClient(self.url) as client:
                await client.enqueue_many_copy([{"ms": job_ms}] * jobs, kind="sleep",
                                               priority=1 if job_ms > self.args.job_ms else 2)
        asyncio.run(insert())
        self.result.jobs += jobs

    def spawn(self) -> WorkerProcess:
        worker = start_worker(self.url, f"default:{self.args.concurrency}",
                              settings={"heartbeat_staleness_ms": self.args.staleness_ms},
                              log_dir=self.log_dir, ready_timeout=60)
        self.workers.append(worker)
        return worker

    def alive(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive and w.pid not in self.stopped]

    # -- observation ---------------------------------------------------------------
    def completed(self) -> int | None:
        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                return int(conn.execute(COMPLETED).fetchone()[0])  # type: ignore[index]
        except psycopg.Error:
            return None  # the server is down or restarting

    def leader(self) -> WorkerProcess | None:
        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                rows = conn.execute(LEADER_PID).fetchall()
        except psycopg.Error:
            return None
        pids = {row[0] for row in rows}
        return next((w for w in self.alive() if w.pid in pids), None)

    def wait_for_leader(self, timeout: float = 20.0,
                        other_than: WorkerProcess | None = None) -> WorkerProcess | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None and leader is not other_than:
                return leader
            time.sleep(POLL_S)
        return None

    def next_completion_after(self, since: float, timeout: float = 60.0) -> float | None:
        """Seconds from ``since`` (time.time()) to the first completion logged after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = [t for word, _, _, _, t in self.log_entries() if word == "done" and t > since]
            if done:
                return min(done) - since
            time.sleep(POLL_S)
        return None

    def moved_on(self, attempts: set[tuple[int, int]]) -> int:
        """How many of these (job, run_lease) attempts the database no longer has running."""
        with psycopg.connect(self.url) as conn:
            rows = conn.execute(ATTEMPTS_STILL_RUNNING, ([j for j, _ in attempts],
                                                         [lease for _, lease in attempts]))
            return len(attempts) - int(rows.fetchone()[0])  # type: ignore[index]

    def log_entries(self) -> list[tuple[str, int, int, int, float]]:
        """(word, pid, job id, run_lease, unix time) for every handler log line."""
        entries = []
        for path in self.log_dir.glob("*.log"):
            pid = int(path.stem)
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 6 and parts[0] in ("start", "done"):
                    entries.append((parts[0], pid, int(parts[2]), int(parts[4]), float(parts[5])))
        return entries

    # -- faults ------------------------------------------------------------------------
    def kill(self, worker: WorkerProcess) -> None:
        now = time.time()
        worker.kill()
        self.faults.append(Fault(worker.pid, now, float("inf")))

    def stop(self, worker: WorkerProcess, seconds: float) -> tuple[float, float]:
        started = time.time()
        os.kill(worker.pid, signal.SIGSTOP)
        self.stopped.add(worker.pid)
        return started, started + seconds

    def cont(self, worker: WorkerProcess, started: float) -> None:
        os.kill(worker.pid, signal.SIGCONT)
        self.stopped.discard(worker.pid)
        self.faults.append(Fault(worker.pid, started, time.time()))

    # -- the verdict -----------------------------------------------------------------
    def settle(self) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            if (self.completed() or 0) >= self.result.jobs:
                break
            time.sleep(0.2)
        with psycopg.connect(self.url) as conn:
            states: dict[str, int] = dict(conn.execute(COUNT_STATES).fetchall())
        terminal_bad = sum(states.get(s, 0) for s in ("failed", "cancelled"))
        missing = self.result.jobs - sum(states.values())
        unfinished = sum(n for s, n in states.items()
                         if s not in ("completed", "failed", "cancelled"))
        self.result.lost = terminal_bad + max(missing, 0)
        self.result.stuck = unfinished
        if unfinished or terminal_bad:
            self.result.notes.append(f"final states: {states}")
        self._judge_log()

    def _faulted(self, pid: int, start: float, end: float) -> bool:
        return any(f.pid == pid and f.start <= end + DELIVERY_WINDOW_S and f.end >= start
                   for f in self.faults)

    def _judge_log(self) -> None:
        starts: dict[tuple[int, int], tuple[int, float]] = {}
        runs: dict[int, int] = defaultdict(int)
        healthy_done: dict[int, set[int]] = defaultdict(set)
        for word, pid, job_id, lease, t in sorted(self.log_entries(), key=lambda e: e[4]):
            if word == "start":
                starts[(job_id, lease)] = (pid, t)
                runs[job_id] += 1
            else:
                pid_started, t0 = starts.get((job_id, lease), (pid, t))
                if not self._faulted(pid, t0, t):
                    healthy_done[job_id].add(lease)
        self.result.re_executed = sum(1 for n in runs.values() if n > 1)
        self.result.twice = sum(1 for leases in healthy_done.values() if len(leases) > 1)

    def close(self) -> None:
        for worker in self.workers:
            if worker.alive:
                os.kill(worker.pid, signal.SIGCONT)
                worker.kill()


# --- scenarios -------------------------------------------------------------------------------
def worker_sigkill(run: Run) -> None:
    """SIGKILL a random worker every few seconds and start a replacement."""
    rng = random.Random(7)
    last = time.time()
    for _ in range(run.args.rounds):
        time.sleep(3.0)
        if (run.completed() or 0) >= run.result.jobs:
            break
        run.kill(rng.choice(run.alive()))
        last = time.time()
        run.spawn()
    run.result.recovery_s = run.next_completion_after(last)


def terminate_backends(run: Run) -> None:
    """pg_terminate_backend every awa connection of the database, a few times."""
    last = time.time()
    for _ in range(3):
        time.sleep(3.0)
        with psycopg.connect(run.url, autocommit=True) as conn:
            n = conn.execute(TERMINATE_BACKENDS).fetchone()[0]  # type: ignore[index]
        run.result.notes.append(f"terminated {n} backends")
        last = time.time()
    run.result.recovery_s = run.next_completion_after(last)


LONG_JOB_MS = 14_000


def pg_restart(run: Run) -> None:
    """Stop the whole server for ten seconds, then start it again.

    A few long jobs run straight through the outage: their workers are alive
    the whole time, so they must not be presumed dead and run again.
    """
    run.enqueue(32, LONG_JOB_MS)
    time.sleep(3.0)
    run.cluster.stop("fast")
    time.sleep(10.0)
    run.cluster.start()
    run.result.recovery_s = run.next_completion_after(time.time())


def leader_sigkill(run: Run) -> None:
    """SIGKILL the maintenance leader three times; each time a new one must take over."""
    last = time.time()
    for _ in range(3):
        leader = run.wait_for_leader()
        if leader is None:
            run.result.notes.append("no leader found")
            return
        time.sleep(1.0)
        run.kill(leader)
        last = time.time()
        run.spawn()
        new = run.wait_for_leader(other_than=leader)
        run.result.new_leader_s = time.time() - last if new else None
    run.result.recovery_s = run.next_completion_after(last)


def leader_sigstop(run: Run) -> None:
    """SIGSTOP the leader for ten seconds: another runtime must lead and rescue meanwhile."""
    _stopped_worker(run, leader=True)


def nonleader_sigstop(run: Run) -> None:
    """SIGSTOP a non-leader for ten seconds: its attempts are rescued; its late finishes ignored."""
    _stopped_worker(run, leader=False)


def _stopped_worker(run: Run, *, leader: bool) -> None:
    current = run.wait_for_leader()
    if current is None:
        run.result.notes.append("no leader found")
        return
    time.sleep(2.0)
    victim = current if leader else next(w for w in run.alive() if w is not current)
    started, until = run.stop(victim, 10.0)
    time.sleep(0.2)  # let the log settle: the stopped process writes nothing more
    finished = {(job, lease) for word, pid, job, lease, _ in run.log_entries()
                if pid == victim.pid and word == "done"}
    orphaned = {(job, lease) for word, pid, job, lease, _ in run.log_entries()
                if pid == victim.pid and word == "start" and (job, lease) not in finished}
    if leader:
        new = run.wait_for_leader(timeout=10.0, other_than=victim)
        run.result.new_leader_s = time.time() - started if new else None
    time.sleep(max(until - time.time(), 0.0))
    # Orphaned attempts the leader rescued (their lease moved on) while the process was stopped.
    run.result.rescued_while_stopped = run.moved_on(orphaned)
    run.result.notes.append(f"{len(orphaned)} attempts orphaned by the stop")
    run.cont(victim, started)
    run.result.recovery_s = run.next_completion_after(time.time())


SCENARIOS: dict[str, Callable[[Run], None]] = {
    "worker_sigkill": worker_sigkill,
    "terminate_backends": terminate_backends,
    "pg_restart": pg_restart,
    "leader_sigkill": leader_sigkill,
    "leader_sigstop": leader_sigstop,
    "nonleader_sigstop": nonleader_sigstop,
}


def run_scenario(cluster: PrivateCluster, name: str, args: argparse.Namespace) -> Result:
    run = Run(cluster, name, args)
    began = time.monotonic()
    try:
        run.prepare()
        SCENARIOS[name](run)
        run.settle()
    finally:
        run.close()
    run.result.elapsed_s = round(time.monotonic() - began, 1)
    return run.result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only these (repeatable); default: all")
    parser.add_argument("--engine", choices=sorted(storage.ENGINES), default=None,
                        help="storage engine of the scenario databases (default: the default)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16, help="handlers per worker")
    parser.add_argument("--job-ms", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6, help="kills in worker_sigkill")
    parser.add_argument("--staleness-ms", type=int, default=2_500,
                        help="heartbeat staleness of the workers (the test suite's 1 s is too "
                             "tight for a loaded 2-core machine after a restart)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    results = []
    with PrivateCluster() as cluster:
        for name in names:
            result = run_scenario(cluster, name, args)
            results.append(result)
            print(format_result(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    failed = [r.scenario for r in results if not r.ok]
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    print(f"all {len(results)} scenarios: 0 lost, 0 completed twice, 0 stuck")
    return 0


def format_result(r: Result) -> str:
    extra = "".join(f" {k}={v}" for k, v in (
        ("recovery_s", r.recovery_s and round(r.recovery_s, 2)),
        ("new_leader_s", r.new_leader_s and round(r.new_leader_s, 2)),
        ("rescued_while_stopped", r.rescued_while_stopped)) if v is not None)
    notes = f"  [{'; '.join(r.notes)}]" if r.notes else ""
    return (f"{'ok  ' if r.ok else 'FAIL'} {r.scenario:<20} jobs={r.jobs} lost={r.lost} "
            f"twice={r.twice} stuck={r.stuck} re_executed={r.re_executed}{extra} "
            f"elapsed={r.elapsed_s}s{notes}")


if __name__ == "__main__":
    sys.exit(main())
