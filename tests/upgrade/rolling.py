"""A rolling upgrade under load, from a previous release to this checkout, and back.

``roll`` runs, on one database and one engine:

1. the old release's ``awa migrate``; 2 old workers (32 slots each) and an old producer COPYing
   half the jobs at a steady rate;
2. mid-run, this checkout's ``awa migrate`` (its rc, output and duration kept);
3. 2 new workers; the old ones SIGTERMed one at a time, each drained before the next;
4. a new producer enqueues the other half; every job is waited for.

``rollback`` then does the reverse on the migrated database: 2 old workers start, the new
ones are SIGTERMed one by one, and an old producer enqueues more.  Every handler writes the
execution log (``fleet_app.py``); ``Verdict`` reads it: jobs, lost (enqueued and never run to
completion), run twice (a job whose completing run ran more than once; the workload also
fails, retries, snoozes and runs longer attempts, so every way an attempt ends is written by
both releases), error lines (WARNING and above, or a
traceback, in any process's stderr), the migration's rc, and the claim stall: the longest gap
between two handler starts while the migration ran (the queue held a backlog throughout).
tests/upgrade/test_rolling.py runs a small one; benchmarks/upgrade.py the full 40,000 jobs.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

HERE = Path(__file__).resolve().parent
APP = HERE / "fleet_app.py"
SLOTS = 32
# A stopped runtime counts as live for `--contract` this long after its last snapshot
# (fleet_app.py's 500 ms interval: awa.config's OPS_RUNTIME_LIVE_MIN_S applies).
LIVE_WINDOW_S = 2.5
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL|WARNING)\b|Traceback")
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) ")  # fleet_app's asctime


def database_url(admin_url: str, name: str) -> str:
    return make_conninfo(admin_url, dbname=name)


@dataclass(frozen=True)
class Code:
    """A release's python (``import awa`` is that release's) and its ``awa`` command."""

    name: str
    python: str

    @classmethod
    def of(cls, release: Any) -> Code:
        return cls(release.name, release.python)

    def awa(self, url: str, *args: str) -> list[str]:
        return [self.python, "-c", "import sys; from awa.cli import main; sys.exit(main())",
                *args, "--database-url", url]

    def migrate(self, url: str, engine: str | None = None,
                *more: str) -> subprocess.CompletedProcess[str]:
        args = ["migrate", *(("--engine", engine) if engine else ()), *more]
        return subprocess.run(self.awa(url, *args), capture_output=True, text=True,
                              timeout=300, check=False, cwd=HERE)

    def contract(self, url: str) -> tuple[int, str]:
        """``awa migrate --contract``: its rc and what it said (stdout, else stderr)."""
        done = self.migrate(url, None, "--contract")
        return done.returncode, (done.stdout.strip() or done.stderr.strip())


def _current_version() -> str:
    from awa.version import __version__  # this checkout's: tests run on its venv
    return __version__


CURRENT = Code(_current_version(), sys.executable)


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[str]
    stderr: Path


@dataclass
class Fleet:
    """The processes of one run, their logs under ``log_dir``."""

    url: str
    log_dir: Path
    processes: list[Process] = field(default_factory=list)

    def _spawn(self, code: Code, name: str, *args: str) -> Process:
        err = self.log_dir / f"{name}.err"
        proc = subprocess.Popen([code.python, str(APP), *args], stdout=subprocess.PIPE,
                                stderr=err.open("w"), text=True, cwd=HERE)
        p = Process(name, proc, err)
        self.processes.append(p)
        return p

    def worker(self, code: Code, tag: str) -> Process:
        p = self._spawn(code, f"worker-{tag}", "worker", self.url, str(self.log_dir), tag,
                        str(SLOTS))
        assert p.proc.stdout is not None
        line = p.proc.stdout.readline()
        if "READY" not in line:
            p.proc.wait(30)
            raise AssertionError(f"worker {tag} did not start: {p.stderr.read_text()[-2000:]}")
        return p

    def producer(self, code: Code, tag: str, first: int, count: int, rate: float) -> Process:
        return self._spawn(code, f"producer-{tag}", "producer", self.url, str(first),
                           str(count), str(rate))

    @staticmethod
    def stop(p: Process, timeout: float = 30) -> int:
        """SIGTERM, then wait for the drain; its exit status."""
        p.proc.send_signal(signal.SIGTERM)
        return p.proc.wait(timeout)

    def close(self) -> None:
        for p in self.processes:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()

    def shut_down(self) -> None:
        """SIGTERM every process still running, give each 15 s to drain, then ``close``."""
        for p in self.processes:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGTERM)
        for p in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.proc.wait(15)
        self.close()  # SIGKILL what did not drain

    def error_lines(self, since: float = 0.0) -> tuple[list[str], list[str]]:
        """The error lines of every process's stderr: ``(before, from)`` unix time ``since``
        (a line without a time of its own, a traceback's, goes with the line before it)."""
        before: list[str] = []
        after: list[str] = []
        for p in self.processes:
            at = 0.0
            for line in p.stderr.read_text().splitlines():
                stamp = LOG_TIME.match(line)
                if stamp:
                    at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if ERROR_LINE.search(line):
                    (before if at < since else after).append(f"{p.name}: {line}")
        return before, after


@dataclass
class Verdict:
    jobs: int
    lost: int
    run_twice: int
    error_lines: list[str]  # from the migration's start on (the whole run for a rollback)
    migrate_rc: int
    migrate_s: float
    claim_stall_ms: float
    gap_p99_ms: float = 0.0  # the same gap's 99th percentile over the whole run: the baseline
    notes: list[str] = field(default_factory=list)
    # The old release's own, on its own layout before the migration started: not the
    # upgrade's doing, reported apart (e.g. 32a8704's heartbeat deadlocking with its own
    # completion, which this layout's qs_heartbeat no longer does).
    error_lines_before: list[str] = field(default_factory=list)
    # `awa migrate --contract` while older runtimes were live: its rc and one line.
    contract: tuple[int, str] = (0, "")
    # Whether the old release's code speaks an older schema or layout than this code's (then
    # the contract step must refuse while its runtimes are live; else it may run).
    older_layout: bool = True

    @property
    def ok(self) -> bool:
        return not (self.lost or self.run_twice or self.error_lines or self.migrate_rc)

    def line(self) -> str:
        before = (f" (+{len(self.error_lines_before)} of the old release alone before it)"
                  if self.error_lines_before else "")
        return (f"jobs {self.jobs}, lost {self.lost}, run twice {self.run_twice}, error lines "
                f"{len(self.error_lines)}{before}, migrate rc {self.migrate_rc} "
                f"({self.migrate_s:.2f} s), claim stall {self.claim_stall_ms:.0f} ms (p99 gap "
                f"{self.gap_p99_ms:.0f} ms)")


def executions(log_dir: Path) -> list[tuple[int, str, float]]:
    """Every handler run in the execution log: ``(n, outcome, unix time)``."""
    runs = []
    for path in log_dir.glob("exec-*.log"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 8:
                runs.append((int(parts[1]), parts[4], float(parts[7])))
    return runs


def wait_all_completed(url: str, total: int, timeout: float) -> None:
    """Until ``total`` jobs are completed (AssertionError naming what is left after
    ``timeout``)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FILTER (WHERE state = 'completed'), count(*) "
                               "FROM awa.jobs").fetchone()
            assert row is not None
            if row[0] >= total:
                return
            if time.monotonic() > deadline:
                states = conn.execute("SELECT state::text, count(*) FROM awa.jobs "
                                      "GROUP BY 1 ORDER BY 1").fetchall()
                raise AssertionError(f"{row[0]} of {total} jobs completed after {timeout} s: "
                                     f"{states}")
            time.sleep(0.2)


def judge(log_dir: Path, total: int, fleet: Fleet, migrate_rc: int, window: tuple[float, float],
          migrate_s: float) -> Verdict:
    runs = executions(log_dir)
    # A job's run that is meant to complete it: exactly one per job (fleet_app.py).
    per_job = Counter(n for n, outcome, _ in runs if outcome == "ok")
    lost = sum(1 for n in range(total) if per_job[n] == 0)
    twice = sum(1 for count in per_job.values() if count > 1)
    start, end = window
    times = sorted(t for _, _, t in runs)
    inside = [t for t in times if start <= t <= end]
    before = [t for t in times if t < start][-1:]
    after = [t for t in times if t > end][:1]
    points = before + inside + after
    stall = max((b - a for a, b in zip(points, points[1:], strict=False)), default=end - start)
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    p99 = gaps[int(len(gaps) * 0.99)] if gaps else 0.0
    before_lines, lines = fleet.error_lines(since=start)
    return Verdict(total, lost, twice, lines, migrate_rc, migrate_s, stall * 1000, p99 * 1000,
                   error_lines_before=before_lines)


def roll(old: Code, new: Code, url: str, engine: str, log_dir: Path, jobs: int,
         rate: float) -> tuple[Verdict, Fleet]:
    """The roll-forward (module docstring); the fleet is left running on the new code
    (two new workers) for ``rollback``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    first = old.migrate(url, engine)
    assert first.returncode == 0, first.stderr
    older = _older_layout(url, engine)
    half = jobs // 2
    fleet = Fleet(url, log_dir)
    try:
        verdict, fleet = _roll(old, new, url, fleet, log_dir, jobs, half, rate)
        verdict.older_layout = older
        return verdict, fleet
    except BaseException:
        fleet.close()  # a failed roll leaves no worker running (the caller never gets it)
        raise


def _roll(old: Code, new: Code, url: str, fleet: Fleet, log_dir: Path, jobs: int, half: int,
          rate: float) -> tuple[Verdict, Fleet]:
    old_workers = [fleet.worker(old, f"old{i}") for i in (1, 2)]
    producer = fleet.producer(old, "old", 0, half, rate)
    wait_completed(url, half // 4)  # a quarter of the old half done: mid-run
    started = time.time()
    migrated = new.migrate(url)
    ended = time.time()
    (log_dir / "migrate.out").write_text(f"{started:.3f} - {ended:.3f}\n" + migrated.stdout
                                         + migrated.stderr)
    new_workers = [fleet.worker(new, f"new{i}") for i in (1, 2)]
    contract = new.contract(url)
    for w in old_workers:
        assert fleet.stop(w) == 0, f"{w.name} exited badly: {w.stderr.read_text()[-2000:]}"
    assert producer.proc.wait(600) == 0, producer.stderr.read_text()[-2000:]
    second = fleet.producer(new, "new", half, jobs - half, rate)
    assert second.proc.wait(600) == 0, second.stderr.read_text()[-2000:]
    wait_all_completed(url, jobs, max(120, jobs / 100))
    verdict = judge(log_dir, jobs, fleet, migrated.returncode, (started, ended), ended - started)
    verdict.notes.append(migrated.stdout.strip() or migrated.stderr.strip())
    verdict.contract = contract
    fleet.processes[:] = [p for p in fleet.processes if p in new_workers]
    return verdict, fleet


def rollback(old: Code, fleet: Fleet, jobs_before: int, jobs: int, rate: float) -> Verdict:
    """Back to ``old`` on the migrated database: old workers start, the new ones drain one by
    one, an old producer enqueues ``jobs`` more."""
    new_workers = list(fleet.processes)
    for i in (1, 2):
        fleet.worker(old, f"back{i}")
    contract = CURRENT.contract(fleet.url)
    for w in new_workers:
        assert fleet.stop(w) == 0, f"{w.name} exited badly: {w.stderr.read_text()[-2000:]}"
    producer = fleet.producer(old, "back", jobs_before, jobs, rate)
    assert producer.proc.wait(600) == 0, producer.stderr.read_text()[-2000:]
    total = jobs_before + jobs
    wait_all_completed(fleet.url, total, max(120, total / 100))
    now = time.time()
    verdict = judge(fleet.log_dir, total, fleet, 0, (now, now), 0.0)
    verdict.error_lines += verdict.error_lines_before  # every line of the rollback counts
    verdict.error_lines_before = []
    verdict.contract = contract
    return verdict


def _older_layout(url: str, engine: str) -> bool:
    """Whether the database the old release laid out is at an older schema version, or
    (queue storage) an older layout, than this code's: what its runtimes speak."""
    from awa.schema import current_migration_version
    from awa.schema.layout import QUEUE_STORAGE_LAYOUT_VERSION

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT max(version) FROM awa.schema_version").fetchone()
        if row is None or row[0] < current_migration_version():
            return True
        if engine != "queue_storage":
            return False
        # A layout from before qs_layout_version() existed is older still (a missing function
        # fails the statement that names it, so it is asked for only once seen).
        present = conn.execute("SELECT to_regproc('awa.qs_layout_version') IS NOT NULL"
                               ).fetchone()
        layout = (conn.execute("SELECT awa.qs_layout_version()").fetchone()
                  if present and present[0] else None)
    return layout is None or layout[0] < QUEUE_STORAGE_LAYOUT_VERSION


def _layout_state(url: str) -> list[str]:
    """The manifest lines, each function with a digest of its body: what a migration changed."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text || ' ' || md5(p.prosrc) FROM pg_proc p "
            "WHERE p.pronamespace = 'awa'::regnamespace").fetchall()
    from upgrade.manifest import installed

    return installed(url) + sorted(r[0] for r in rows)


def wait_completed(url: str, completed: int, timeout: float = 60) -> None:
    """Until the fleet has completed ``completed`` jobs (mid-run: it is busy, with a
    backlog)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
                               ).fetchone()
            if row is not None and row[0] >= completed:
                return
            time.sleep(0.05)
    raise AssertionError(f"the fleet completed fewer than {completed} jobs in {timeout} s")


def run(old_release: str, engine: str, jobs: int, admin_url: str, log_root: Path,
        rollback_jobs: int | None = None, rate: float | None = None) -> dict[str, Verdict]:
    """Both directions on a scratch database: ``{"roll": ..., "rollback": ...}``."""
    sys.path.insert(0, str(HERE.parent))
    from support.databases import create_database, drop_database
    from upgrade.releases import build

    old = Code.of(build(old_release))
    name = create_database(admin_url)
    url = database_url(admin_url, name)
    log_dir = log_root / f"{old_release}-{engine}"
    fleet = None
    try:
        # Producers slower than the fleet, so each half lasts about 6 s: the queue is never
        # empty for long, and a stall while the migration runs shows as a gap in the starts.
        rate = rate or max(jobs / 12, 200.0)
        forward, fleet = roll(old, CURRENT, url, engine, log_dir, jobs, rate)
        back = rollback(old, fleet, jobs, rollback_jobs or jobs // 4, rate)
        back.older_layout = forward.older_layout
        for p in fleet.processes:
            assert Fleet.stop(p) == 0, f"{p.name} exited badly: {p.stderr.read_text()[-2000:]}"
        time.sleep(LIVE_WINDOW_S)  # the stopped runtimes' snapshots age out
        back.notes.append("contract once all stopped: " + " ".join(
            map(str, CURRENT.contract(url))))

        before = _layout_state(url)
        again = old.migrate(url)
        after = _layout_state(url)
        changed = [line for line in after if line not in before]
        back.notes.append(f"{old.name}'s awa migrate on the migrated database: rc "
                          f"{again.returncode}, {(again.stdout or again.stderr).strip()!r}, "
                          + (f"changed {len(changed)} object(s), e.g. {changed[:3]}" if changed
                             else "nothing changed"))
        return {"roll": forward, "rollback": back}
    finally:
        if fleet is not None:
            fleet.shut_down()
        drop_database(admin_url, name)
    return {}
