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
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import awa  # noqa: E402 - the checkout's awa, whatever the venv has
from awa import config, storage  # noqa: E402 - as above
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


# --- load: a deep backlog fed while the workers run ----------------------------------------
# The runtime timings of the load scenarios: ``short`` as the issue that found the
# double runs measured them (rescue every 500 ms, 2 s staleness), ``default`` the SDK's.
LOAD_TIMINGS: dict[str, dict[str, int]] = {
    "short": {"heartbeat_interval_ms": 300, "heartbeat_staleness_ms": 2_000,
              "heartbeat_rescue_interval_ms": 500, "deadline_rescue_interval_ms": 500,
              "callback_rescue_interval_ms": 500, "snapshot_interval_ms": 500,
              "leader_election_interval_ms": 500, "poll_interval_ms": 200,
              "promote_interval_ms": 250},
    "default": {"heartbeat_interval_ms": config.HEARTBEAT_INTERVAL_MS,
                "heartbeat_staleness_ms": config.HEARTBEAT_STALENESS_MS,
                "heartbeat_rescue_interval_ms": config.HEARTBEAT_RESCUE_INTERVAL_MS,
                "deadline_rescue_interval_ms": config.DEADLINE_RESCUE_INTERVAL_MS,
                "callback_rescue_interval_ms": config.CALLBACK_RESCUE_INTERVAL_MS,
                "snapshot_interval_ms": config.SNAPSHOT_INTERVAL_MS,
                "leader_election_interval_ms": config.LEADER_ELECTION_INTERVAL_MS,
                "poll_interval_ms": config.POLL_INTERVAL_MS,
                "promote_interval_ms": config.PROMOTE_INTERVAL_MS},
}
# Open attempts as the database counts them: claimed and not yet closed.
OPEN_ATTEMPTS = "SELECT count(*) FROM awa.jobs WHERE state = 'running'"
DUPLICATED_ROWS = "SELECT count(*) FROM (SELECT id FROM awa.jobs GROUP BY id HAVING count(*) > 1) d"
# The slowest claim statement the server ran (pg_stat_statements, loaded by the cluster).
CLAIM_STATEMENTS = """
SELECT COALESCE(max(max_exec_time), 0), COALESCE(sum(calls), 0) FROM pg_stat_statements
 WHERE query ILIKE '%%qs_claim(%%' OR query ILIKE '%%FOR UPDATE SKIP LOCKED%%jobs_hot%%'
    OR query ILIKE '%%UPDATE awa.jobs_hot%%running%%'"""
TOP_STATEMENTS = """
SELECT calls, round(total_exec_time)::bigint AS total_ms,
       round(mean_exec_time::numeric, 2) AS mean_ms, round(max_exec_time::numeric, 1) AS max_ms,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY total_exec_time DESC LIMIT 12"""
LOAD_SETTLE_S = 60.0


@dataclass
class LoadResult:
    scenario: str
    engine: str
    timings: str
    jobs: int
    processes: int
    slots: int
    lost: int = 0
    stuck: int = 0
    same_lease_twice: int = 0
    completed_twice: int = 0
    duplicated_rows: int = 0
    open_max: int = 0
    open_bound: int = 0
    drain_s: float = 0.0
    jobs_per_s: float = 0.0
    claim_max_ms: float = 0.0
    warnings: int = 0
    notes: list[str] = field(default_factory=list)
    top_statements: list[list[Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.stuck == 0 and self.same_lease_twice == 0
                and self.completed_twice == 0 and self.duplicated_rows == 0
                and self.open_max <= self.open_bound)


class LoadRun:
    """A producer COPYing ``--jobs`` no-op jobs in batches while the workers drain them;
    the verdict comes from the handlers' own log, the open-attempt samples and the rows."""

    def __init__(self, cluster: PrivateCluster, name: str, args: argparse.Namespace) -> None:
        self.cluster, self.name, self.args = cluster, name, args
        self.db_name = f"load_{name}"
        self.url = cluster.url(self.db_name)
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"awa-load-{name}-"))
        many = name == "many_queues"
        self.queues = ([f"q{i}" for i in range(args.queues)] if many else ["default"])
        self.per_queue = args.queue_workers if many else args.concurrency
        self.processes = 1 if many else args.workers
        self.batch = args.batch or (2_000 if many else 5_000)
        self.workers: list[WorkerProcess] = []
        slots = self.processes * len(self.queues) * self.per_queue
        self.result = LoadResult(name, args.engine or config.DEFAULT_STORAGE_ENGINE, args.timings,
                                 args.jobs, self.processes, slots,
                                 open_bound=slots + self.processes
                                 * config.COMPLETION_FLUSH_MAX_ROWS)
        self.produced = 0
        self._offsets: dict[Path, int] = {}
        self._done = 0

    def prepare(self) -> None:
        with psycopg.connect(self.cluster.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.db_name}"')
        with psycopg.connect(self.url, autocommit=True) as conn:
            storage.migrate_sync(conn, self.args.engine)
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        spec = ",".join(f"{q}:{self.per_queue}" for q in self.queues)
        for _ in range(self.processes):
            settings = dict(LOAD_TIMINGS[self.args.timings])
            if self.args.load_staleness_ms is not None:
                settings["heartbeat_staleness_ms"] = self.args.load_staleness_ms
            self.workers.append(start_worker(self.url, spec, settings=settings,
                                             log_dir=self.log_dir, ready_timeout=60))
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")

    def produce(self) -> None:
        """The producer, in a thread of its own: batches round robin over the queues."""
        async def insert() -> None:
            async with awa.AsyncClient(self.url) as client:
                left, i = self.args.jobs, 0
                while left > 0:
                    n = min(self.batch, left)
                    await client.enqueue_many_copy([{}] * n, kind=self.args.kind,
                                                   queue=self.queues[i % len(self.queues)])
                    left -= n
                    i += 1
                    self.produced += n
        asyncio.run(insert())

    def run(self) -> None:
        began = time.monotonic()
        producer = threading.Thread(target=self.produce, name="producer", daemon=True)
        producer.start()
        deadline = began + self.args.load_timeout_s
        completed = 0
        with psycopg.connect(self.url, autocommit=True) as conn:
            while time.monotonic() < deadline:
                time.sleep(self.args.sample_s)
                opened = int(conn.execute(OPEN_ATTEMPTS).fetchone()[0])  # type: ignore[index]
                self.result.open_max = max(self.result.open_max, opened)
                completed = self.done_count()
                if completed >= self.args.jobs and not producer.is_alive():
                    break
        self.result.drain_s = round(time.monotonic() - began, 1)
        self.result.jobs_per_s = round(completed / max(self.result.drain_s, 1e-9), 1)
        producer.join(timeout=5)

    def done_count(self) -> int:
        """Completions logged so far, read incrementally (the log only grows)."""
        for path in self.log_dir.glob("*.log"):
            with path.open("rb") as f:
                f.seek(self._offsets.get(path, 0))
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self._offsets[path] = self._offsets.get(path, 0) + end
            self._done += chunk[:end].count(b"done ")
        return self._done

    def judge(self) -> None:
        settle = time.monotonic() + LOAD_SETTLE_S
        with psycopg.connect(self.url, autocommit=True) as conn:
            while True:
                states: dict[str, int] = dict(conn.execute(COUNT_STATES).fetchall())
                if states.get("completed", 0) >= self.args.jobs or time.monotonic() > settle:
                    break
                time.sleep(0.5)
            self.result.duplicated_rows = int(conn.execute(DUPLICATED_ROWS).fetchone()[0])  # type: ignore[index]
            claim_max, _calls = conn.execute(CLAIM_STATEMENTS).fetchone()  # type: ignore[misc]
            self.result.claim_max_ms = round(float(claim_max), 1)
            self.result.top_statements = [list(map(_plain, row))
                                          for row in conn.execute(TOP_STATEMENTS).fetchall()]
        missing = self.args.jobs - sum(states.values())
        self.result.stuck = sum(n for s, n in states.items()
                                if s not in ("completed", "failed", "cancelled"))
        self.result.lost = (states.get("failed", 0) + states.get("cancelled", 0)
                            + max(missing, 0))
        if self.result.stuck or self.result.lost:
            self.result.notes.append(f"final states: {states}")
        starts: dict[tuple[int, int], int] = defaultdict(int)
        done_leases: dict[int, set[int]] = defaultdict(set)
        for path in self.log_dir.glob("*.log"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) < 6:
                    continue
                key = (int(parts[2]), int(parts[4]))
                if parts[0] == "start":
                    starts[key] += 1
                elif parts[0] == "done":
                    done_leases[key[0]].add(key[1])
        self.result.same_lease_twice = sum(1 for n in starts.values() if n > 1)
        self.result.completed_twice = sum(1 for s in done_leases.values() if len(s) > 1)
        never_done = self.args.jobs - len(done_leases)
        if never_done > self.result.stuck + self.result.lost:
            self.result.lost += never_done - self.result.stuck - self.result.lost
            self.result.notes.append(f"{never_done} job(s) never completed by a handler")
        for worker in self.workers:
            said = [ln for ln in worker.stderr().splitlines()
                    if " WARNING " in ln or " ERROR " in ln]
            self.result.warnings += len(said)
            self.result.notes.extend(dict.fromkeys(ln.split(": ", 1)[-1][:160]
                                                   for ln in said[:3]))

    def close(self) -> None:
        for worker in self.workers:
            if worker.alive:
                worker.kill()


LOAD_SCENARIOS = ("deep_backlog", "many_queues")


def _plain(value: Any) -> Any:
    """A JSON-ready value (pg_stat_statements' numerics are Decimals)."""
    return value if isinstance(value, (int, str)) else float(value)


def run_load(cluster: PrivateCluster, name: str, args: argparse.Namespace) -> LoadResult:
    run = LoadRun(cluster, name, args)
    try:
        run.prepare()
        run.run()
        run.judge()
    finally:
        run.close()
    return run.result


def format_load(r: LoadResult) -> str:
    notes = f"  [{'; '.join(r.notes)}]" if r.notes else ""
    return (f"{'ok  ' if r.ok else 'FAIL'} {r.scenario:<13} engine={r.engine} "
            f"timings={r.timings} jobs={r.jobs} processes={r.processes} slots={r.slots} "
            f"lost={r.lost} stuck={r.stuck} same_lease_twice={r.same_lease_twice} "
            f"completed_twice={r.completed_twice} duplicated_rows={r.duplicated_rows} "
            f"open_max={r.open_max}/{r.open_bound} drain={r.drain_s}s "
            f"jobs_per_s={r.jobs_per_s} claim_max_ms={r.claim_max_ms} "
            f"warnings={r.warnings}{notes}")


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
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS)
                        + list(LOAD_SCENARIOS),
                        help="run only these (repeatable); default: the fault scenarios")
    parser.add_argument("--engine", choices=sorted(storage.ENGINES), default=None,
                        help="storage engine of the scenario databases (default: the default)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=3,
                        help="worker processes (deep_backlog: 2 is the measured shape)")
    parser.add_argument("--concurrency", type=int, default=16, help="handlers per worker")
    parser.add_argument("--job-ms", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6, help="kills in worker_sigkill")
    parser.add_argument("--staleness-ms", type=int, default=2_500,
                        help="heartbeat staleness of the workers (the test suite's 1 s is too "
                             "tight for a loaded 2-core machine after a restart)")
    load = parser.add_argument_group("load scenarios (deep_backlog, many_queues)")
    load.add_argument("--timings", choices=sorted(LOAD_TIMINGS), default="short",
                      help="runtime timings of the workers")
    load.add_argument("--load-staleness-ms", type=int, default=None,
                      help="the workers' heartbeat staleness instead of --timings' own: on a "
                           "machine shared with other heavy work, a handler's heartbeat "
                           "starved past 2 s gets its live attempt rescued and run again "
                           "(at-least-once, as designed), which reads as completed twice")
    load.add_argument("--batch", type=int, default=0,
                      help="jobs per COPY batch (default 5,000; many_queues 2,000)")
    load.add_argument("--kind", choices=("fast", "logged"), default="logged",
                      help="the handler: logged also inserts a row per job into a table "
                           "through a pool of its own (a handler that writes, as most do)")
    load.add_argument("--queues", type=int, default=50, help="many_queues: queues")
    load.add_argument("--queue-workers", type=int, default=32,
                      help="many_queues: max_workers of each queue")
    load.add_argument("--load-timeout-s", type=float, default=900.0,
                      help="give up draining after this long")
    load.add_argument("--sample-s", type=float, default=3.0,
                      help="how often the open attempts are counted (through awa.jobs: on "
                           "queue storage at depth a count costs the server ~0.3 s)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    results: list[Result | LoadResult] = []
    with PrivateCluster("-c", "shared_preload_libraries=pg_stat_statements") as cluster:
        for name in names:
            if name in LOAD_SCENARIOS:
                loaded = run_load(cluster, name, args)
                results.append(loaded)
                print(format_load(loaded), flush=True)
                continue
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
