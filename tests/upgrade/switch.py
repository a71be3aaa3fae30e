"""The live switch of storage engines under load, canonical -> queue storage, and its abort.

``run`` plays one switch on a scratch database laid out for canonical:

1. 2 workers of this code (32 slots each, ``tests/upgrade/fleet_app.py``, the execution log)
   and a producer COPYing three quarters of the jobs at a steady rate;
2. mid-run (a sixteenth of the jobs completed): ``awa storage prepare --dry-run``, ``awa
   storage prepare``, ``awa storage enter-mixed`` (their rc, output and duration kept, the
   claim stall measured over them while the producer keeps a backlog); the producer keeps
   running and learns the new state by itself (its later jobs go to queue storage);
3. a second producer, started after enter-mixed, enqueues the last quarter;
4. ``finalize`` is asked every half second until it succeeds, refusals counted (one line
   each), while the fleet drains canonical; then every job is waited for.

With ``abort``, step 4 becomes: ``awa storage abort`` (to ``aborting``: new jobs go to
canonical again), a third producer enqueues a quarter more, and ``abort`` is asked again
until it ends at ``canonical``.

The verdict (``SwitchVerdict``): lost, run twice, error lines in any process's stderr, the
steps' rcs, the claim stall, how many jobs each engine completed, and jobs seen in both
engines (must be 0: an attempt ends where it started).  tests/upgrade/test_engine_switch.py
runs a small one; benchmarks/engine_switch.py 40,000 jobs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from upgrade.rolling import (
    CURRENT,
    Fleet,
    database_url,
    executions,
    judge,
    wait_all_completed,
    wait_completed,
)


@dataclass
class SwitchVerdict:
    jobs: int
    lost: int
    run_twice: int
    error_lines: list[str]
    step_rcs: dict[str, int]
    claim_stall_ms: float
    gap_p99_ms: float
    completed_canonical: int
    completed_queue_storage: int
    in_both: int
    final_state: str
    refusals: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    drain_s: float = 0.0
    # The longest gap between two handler starts while each step ran (ms), the step's own
    # duration beside it: what a claim waited for it.
    step_stalls: dict[str, tuple[float, float]] = field(default_factory=dict)

    def line(self) -> str:
        return (f"jobs {self.jobs}, lost {self.lost}, run twice {self.run_twice}, error lines "
                f"{len(self.error_lines)}, steps {self.step_rcs}, claim stall "
                f"{self.claim_stall_ms:.0f} ms (p99 gap {self.gap_p99_ms:.0f} ms), completed "
                f"in canonical {self.completed_canonical} / queue storage "
                f"{self.completed_queue_storage}, in both {self.in_both}, final state "
                f"{self.final_state}, {len(self.refusals)} refusal(s) while draining "
                f"({self.drain_s:.1f} s); per step (stall ms / step s): "
                + ", ".join(f"{k} {v[0]:.0f}/{v[1]:.2f}" for k, v in self.step_stalls.items()))


def stall_ms(log_dir: Path, window: tuple[float, float]) -> float:
    """The longest gap between two handler starts across ``window`` (unix times), counting
    from the last start before it to the first after it."""
    times = sorted(t for _, _, t in executions(log_dir))
    start, end = window
    points = [t for t in times if t < start][-1:] + [t for t in times if start <= t <= end] \
        + [t for t in times if t > end][:1]
    return max((b - a for a, b in zip(points, points[1:], strict=False)),
               default=end - start) * 1000


def storage(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CURRENT.awa(url, "storage", *args), capture_output=True, text=True,
                          timeout=300, check=False)


def _until(url: str, step: str, timeout: float, refusals: list[str],
           windows: dict[str, tuple[float, float]]) -> tuple[int, str, float]:
    """``awa storage <step>`` every half second until it succeeds: rc, its line, seconds (the
    successful call's window kept in ``windows``)."""
    started = time.monotonic()
    while True:
        at = time.time()
        done = storage(url, step)
        if done.returncode == 0 and not done.stdout.startswith(("aborting:",)):
            windows[step] = (at, time.time())
            return 0, done.stdout.strip(), time.monotonic() - started
        refusals.append((done.stdout or done.stderr).strip())
        if time.monotonic() - started > timeout:
            return done.returncode, (done.stdout or done.stderr).strip(), timeout
        time.sleep(0.5)


ENGINE_COUNTS = """
SELECT (SELECT count(*) FROM awa.jobs_hot WHERE state = 'completed') AS canonical,
       (SELECT count(*) FROM awa.jobs WHERE state = 'completed')
     - (SELECT count(*) FROM awa.jobs_hot WHERE state = 'completed') AS queue_storage,
       (SELECT count(*) FROM (SELECT id FROM awa.jobs GROUP BY id HAVING count(*) > 1) d)
           AS in_both,
       (SELECT state FROM awa.storage_transition) AS state"""


def switch(url: str, log_dir: Path, jobs: int, rate: float, abort: bool) -> SwitchVerdict:
    log_dir.mkdir(parents=True, exist_ok=True)
    first = CURRENT.migrate(url, "canonical")
    assert first.returncode == 0, first.stderr
    fleet = Fleet(url, log_dir)
    rcs: dict[str, int] = {}
    outputs: dict[str, str] = {}
    refusals: list[str] = []
    windows: dict[str, tuple[float, float]] = {}
    try:
        workers = [fleet.worker(CURRENT, f"w{i}") for i in (1, 2)]
        head = jobs * 3 // 4
        producer = fleet.producer(CURRENT, "p1", 0, head, rate)
        wait_completed(url, jobs // 16)
        started = time.time()
        for step in (("prepare", "--dry-run"), ("prepare",), ("enter-mixed",)):
            at = time.time()
            done = storage(url, *step)
            windows[" ".join(step)] = (at, time.time())
            rcs[" ".join(step)] = done.returncode
            outputs[" ".join(step)] = (f"[{time.time() - at:.2f} s] "
                                       + (done.stdout or done.stderr).strip())
        ended = time.time()
        second = fleet.producer(CURRENT, "p2", head, jobs - head, rate)
        total = jobs
        for p in (producer, second):
            assert p.proc.wait(600) == 0, p.stderr.read_text()[-2000:]
        if abort:
            done = storage(url, "abort")
            rcs["abort (to aborting)"] = done.returncode
            outputs["abort (to aborting)"] = (done.stdout or done.stderr).strip()
            more = jobs // 4
            third = fleet.producer(CURRENT, "p3", jobs, more, rate)
            assert third.proc.wait(600) == 0, third.stderr.read_text()[-2000:]
            total += more
            rc, said, drain_s = _until(url, "abort", max(120, jobs / 100), refusals, windows)
            rcs["abort (to canonical)"] = rc
            outputs["abort (to canonical)"] = said
        else:
            rc, said, drain_s = _until(url, "finalize", max(120, jobs / 100), refusals,
                                       windows)
            rcs["finalize"] = rc
            outputs["finalize"] = said
        wait_all_completed(url, total, max(120, total / 100))
        for w in workers:
            assert Fleet.stop(w) == 0, f"{w.name} exited badly: {w.stderr.read_text()[-2000:]}"
        plain = judge(log_dir, total, fleet, 0, (started, ended), ended - started)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(ENGINE_COUNTS).fetchone()
        assert row is not None
        return SwitchVerdict(total, plain.lost, plain.run_twice, plain.error_lines_before
                             + plain.error_lines, rcs, plain.claim_stall_ms, plain.gap_p99_ms,
                             row[0], row[1], row[2], row[3], refusals, outputs, drain_s,
                             {k: (stall_ms(log_dir, w), w[1] - w[0]) for k, w in windows.items()})
    finally:
        fleet.shut_down()


def run(jobs: int, admin_url: str, log_root: Path, abort: bool = False,
        rate: float | None = None) -> SwitchVerdict:
    """One switch (or switch and abort) on a scratch database."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from support.databases import create_database, drop_database

    name = create_database(admin_url)
    try:
        # Producers slower than the fleet, the first lasting about 15 s, so it runs across
        # every step (its jobs go to canonical, then to queue storage) and jobs keep arriving
        # while the state changes: a stall shows as a gap in the handler starts.
        return switch(database_url(admin_url, name), log_root / ("abort" if abort else "switch"),
                      jobs, rate or max(jobs * 3 / 4 / 15, 75.0), abort)
    finally:
        drop_database(admin_url, name)
