"""A real awa 0.6 fleet: awa-pg==0.6.9 worker processes, and what awa-ops / awa-tui say of it.

One test, in steps, on one database laid out and run by the Rust core
(``awa migrate`` of awa-cli 0.6.9, then three ``tests/fleet/worker.py``
processes with heartbeat 0.5 s, staleness 3 s, election 1 s):

1. healthy fleet: ``diagnose all`` exits 0; the exporter's series match the database;
2. a worker SIGKILLed: ``stuck-running`` names exactly its attempts (orphaned, with
   heartbeat ages) and the dead runtime, none of the live workers' attempts;
3. the leader SIGKILLed: ``runtime`` reports the leaderless window / failover with the
   former leader, then names the new leader;
4. a horizon pinned past ``--min-age 30``: the holder named, the bloating tables listed;
5. ``awa-tui`` in tmux survived all of it (and showed the stale attempts).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from support.rust_awa import as_url, rust_awa, rust_awa_binary, rust_awa_python

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("worker.py")
FLAGS = ["--heartbeat-staleness", "3", "--election-interval", "1"]
SLOTS = 2  # per worker: 6 slow jobs land 2 on each of 3 workers
AWA_TUI = Path(sys.executable).with_name("awa-tui")
AWA = Path(sys.executable).with_name("awa")
# The Rust core's processes import its `awa`, never this checkout's (no PYTHONPATH, no cwd).
RUST_ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "RUST_LOG": "warn"}

ENQUEUE = """
import asyncio, sys
from dataclasses import dataclass
import awa

@dataclass
class Slow:
    seconds: float = 60.0

@dataclass
class Boom:
    n: int = 0

async def main(url, n, seconds):
    client = awa.AsyncClient(url)
    for _ in range(n):
        if seconds < 0:  # a poison job: fails the same way on each of its 3 attempts
            await client.insert(Boom(1), kind="boom", queue="work", max_attempts=3)
        else:
            await client.insert(Slow(seconds), kind="slow", queue="work")

asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
"""
POISON = -1  # ENQUEUE's seconds for a poison job


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[str]
    log: Path
    jobs: set[int] = field(default_factory=set)

    def read_jobs(self) -> set[int]:
        for line in self.log.read_text().splitlines():
            if line.startswith("running "):
                self.jobs.add(int(line.split()[1]))
        return self.jobs


def enqueue(python: Path, url: str, n: int, seconds: float) -> None:
    """``n`` slow jobs through awa-pg 0.6.9's own client."""
    proc = subprocess.run([str(python), "-c", ENQUEUE, url, str(n), str(seconds)],
                          capture_output=True, text=True, timeout=120, cwd=WORKER.parent,
                          env=RUST_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]


def our_awa(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """This checkout's `awa` CLI."""
    return subprocess.run([str(AWA), "--database-url", url, *args],
                          capture_output=True, text=True, timeout=60)


def ops(url: str, state: Path, check: str, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", check,
                           "--database-url", url, "--json", *FLAGS, *extra],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "XDG_STATE_HOME": str(state)})
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def started(log: Path) -> Callable[[], bool]:
    return lambda: "started" in log.read_text()


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def summaries(result: dict[str, Any]) -> str:
    return "\n".join(f"{f['severity']}: {f['summary']}" for f in result["findings"])


def rows(url: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query, params).fetchall()


# The guide's "still open" claims, joined to attempt_state: ground truth for the exporter.
OPEN_ATTEMPTS = """
SELECT c.job_id, a.heartbeat_at, EXTRACT(EPOCH FROM now() - a.heartbeat_at)::float8 AS age
FROM awa.lease_claims c LEFT JOIN awa.attempt_state a USING (job_id, run_lease)
WHERE c.closed_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures cx WHERE cx.claim_slot = c.claim_slot
                  AND cx.job_id = c.job_id AND cx.run_lease = c.run_lease)
  AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches cb
                  WHERE cb.receipt_ranges @> c.receipt_id)
"""


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from awa_ops.exporter import DatabaseCollector

    async def go() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        collector = DatabaseCollector(url, 3.0)
        try:
            return {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for f in await collector.scrape() for s in f.samples}
        finally:
            await collector.close()

    return asyncio.run(go())


def sample(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


class Terminal:
    """awa-tui in a private tmux server (as tests/tui/test_terminal.py does it)."""

    def __init__(self, command: list[str]) -> None:
        tmux = shutil.which("tmux")
        assert tmux
        self.base = [tmux, "-L", f"awa-fleet-{uuid.uuid4().hex[:8]}"]
        subprocess.run(self.base + ["new-session", "-d", "-s", "tui", "-x", "180", "-y", "50",
                                    subprocess.list2cmdline(command)], check=True,
                       env={**os.environ, "TERM": "xterm-256color"})

    def screen(self) -> str:
        return subprocess.run(self.base + ["capture-pane", "-p", "-t", "tui"],
                              capture_output=True, text=True).stdout

    def showing(self, text: str) -> Callable[[], str | None]:
        """A probe: the screen when ``text`` is on it."""
        def probe() -> str | None:
            screen = self.screen()
            return screen if text in screen else None
        return probe

    def keys(self, *keys: str) -> None:
        subprocess.run(self.base + ["send-keys", "-t", "tui", *keys], check=True)

    def alive(self) -> bool:
        return subprocess.run(self.base + ["has-session", "-t", "tui"],
                              capture_output=True).returncode == 0

    def close(self) -> None:
        subprocess.run(self.base + ["kill-server"], capture_output=True)


@pytest.fixture
def fleet_db(empty_database_url: str) -> str:
    rust_awa(rust_awa_binary(), empty_database_url, "migrate")
    return empty_database_url


@pytest.mark.connections(30)
def test_a_real_fleet_dies_fails_over_and_bloats(fleet_db: str, tmp_path: Path) -> None:
    url, rust_url = fleet_db, as_url(fleet_db)
    python = rust_awa_python()
    state = tmp_path / "state"
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    workers: list[Worker] = []
    term = None
    try:
        for name in ("w1", "w2", "w3"):
            log = tmp_path / f"{name}.log"
            proc = subprocess.Popen([str(python), str(WORKER), rust_url, name, str(SLOTS)],
                                    stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
                                    cwd=WORKER.parent, env=RUST_ENV)
            workers.append(Worker(name, proc, log))
            # Staggered: w1 starts first, so it is the leader.
            wait_for(f"{name} started", started(log), 30, 0.2)
        enqueue(python, rust_url, 3 * SLOTS, 600)
        if shutil.which("tmux") and AWA_TUI.exists():
            term = Terminal([str(AWA_TUI), "--database-url", url, "--refresh", "1",
                             "--stale-after", "3"])

        # --- 1. healthy -------------------------------------------------------------
        wait_for("6 jobs running, 2 per worker",
                 lambda: all(len(w.read_jobs()) == SLOTS for w in workers), 30)
        wait_for("3 runtimes with heartbeats",
                 lambda: len(rows(url, "SELECT 1 FROM awa.runtime_instances")) == 3
                 and len([r for r in rows(url, OPEN_ATTEMPTS) if r["heartbeat_at"]]) == 6, 30)
        code, everything = ops(url, state, "all")
        assert code == 0, "\n".join(f"{c['check']}: {c['error'] or summaries(c)}"
                                     for c in everything["checks"] if c["exit_code"])
        # Our CLI's read commands read the real layout; its writes name the Rust CLI command.
        stats = json.loads(our_awa(url, "queue", "stats", "--json").stdout)
        assert [(s["queue"], s["running"]) for s in stats] == [("work", 6)], stats
        listed = json.loads(our_awa(url, "job", "list", "--state", "running", "--json").stdout)
        assert {j["id"] for j in listed} == set().union(*(w.jobs for w in workers))
        some_job = min(workers[0].jobs)
        dump = our_awa(url, "job", "dump", str(some_job))
        assert dump.returncode == 0 and "state=running" in dump.stdout, dump.stderr
        refused = our_awa(url, "job", "cancel", str(some_job))
        assert refused.returncode != 0 and "`awa job cancel <id>`" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        # a batch operation, even its preview, is the Rust core's own: one line, no traceback
        batch = our_awa(url, "batch", "preview", "--queue", "work", "--set-priority", "2")
        assert batch.returncode != 0 and "Rust-core awa" in batch.stderr, batch.stderr
        assert len(batch.stderr.strip().splitlines()) == 1, batch.stderr
        # `awa migrate` / `awa db` say what they found and change nothing.
        versions = rows(url, "SELECT count(*) AS n, max(version) AS v FROM awa.schema_version")
        migrate = our_awa(url, "migrate")
        assert migrate.returncode != 0 and len(migrate.stderr.strip().splitlines()) == 1
        for found in ("Rust-core awa", "schema version 40", "engine queue_storage",
                      "left unchanged"):
            assert found in migrate.stderr, migrate.stderr
        assert rows(url, "SELECT count(*) AS n, max(version) AS v FROM awa.schema_version") \
            == versions
        db_info = json.loads(our_awa(url, "db", "--json").stdout)
        assert (db_info["schema_version"], db_info["engine"], db_info["foreign"]) == \
            (40, "queue_storage", True)
        if term is not None:  # the overview lists the Rust core's queue, no error banner
            screen = wait_for("the TUI overview listing queue work",
                              term.showing(" work "), 20)
            assert "refresh failed" not in screen, screen
        timings["healthy"] = time.monotonic() - t0
        running = {r["job_id"] for r in rows(url, OPEN_ATTEMPTS)}
        samples = scrape(url)
        assert sample(samples, "awa_db_exporter_scrape_success") == 1.0
        assert sample(samples, "awa_db_queue_depth", awa_job_queue="work",
                      awa_job_state="running") == len(running) == 6
        assert sample(samples, "awa_db_running_heartbeat_stale", awa_job_queue="work") == 0
        assert sample(samples, "awa_db_runtimes_live") == 3
        assert sample(samples, "awa_db_leader_present") == 1.0
        youngest = sample(samples, "awa_db_running_oldest_heartbeat_age_seconds",
                          awa_job_queue="work")
        assert youngest is not None and youngest < 3

        # --- 2. a worker SIGKILLed ------------------------------------------------------
        victim, leader_worker = workers[2], workers[0]
        victim_pid = victim.proc.pid
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        killed_at = time.monotonic()

        def orphaned() -> dict[str, Any] | None:
            _, result = ops(url, state, "stuck-running")
            found = [f for f in result["findings"] if "orphaned" in f["summary"]]
            return found[0] if found else None

        finding = wait_for("the dead worker's attempts reported orphaned", orphaned, 40, 1)
        timings["worker death seen after"] = time.monotonic() - killed_at
        reported = {row["job_id"] for row in finding["evidence"]}
        assert reported == victim.jobs, (reported, victim.jobs)
        assert f"pid {victim_pid}" in finding["summary"]
        for row in finding["evidence"]:
            assert row["class"] == "orphaned" and row["heartbeat_age_s"] > 3
            assert f"pid {victim_pid}" in row["runtime"]
        _, result = ops(url, state, "stuck-running")
        alive_rows = [r for f in result["findings"] for r in f["evidence"]
                      if r.get("class") == "alive"]
        assert not {r["job_id"] for r in alive_rows} & victim.jobs
        samples = scrape(url)
        assert sample(samples, "awa_db_running_heartbeat_stale",
                      awa_job_queue="work") == len(victim.jobs)
        stale_ages = [r["age"] for r in rows(url, OPEN_ATTEMPTS) if r["job_id"] in victim.jobs]
        oldest = sample(samples, "awa_db_running_oldest_heartbeat_age_seconds",
                        awa_job_queue="work")
        assert oldest is not None and abs(oldest - max(stale_ages)) < 5
        assert sample(samples, "awa_db_runtimes_live") == 2
        if term is not None:
            term.keys("2")  # the running screen
            wait_for("the TUI showing the orphaned attempts",
                     lambda: "orphaned" in term.screen(), 15)

        # --- 3. the leader SIGKILLed ------------------------------------------------------
        leaders = rows(url, "SELECT pid FROM awa.runtime_instances WHERE leader")
        assert [r["pid"] for r in leaders] == [leader_worker.proc.pid]
        leader_worker.proc.send_signal(signal.SIGKILL)
        leader_worker.proc.wait()
        killed_at = time.monotonic()
        survivor = workers[1]
        seen: list[str] = []

        def new_leader_named() -> bool:
            _, result = ops(url, state, "runtime")
            text = summaries(result)
            seen.append(text)
            return f"pid {survivor.proc.pid}" in text and "is the leader now" in text \
                or (result["findings"][0]["severity"] == "ok"
                    and f"leader pid {survivor.proc.pid}" in text)

        wait_for("the new leader named", new_leader_named, 45, 1)
        timings["new leader named after"] = time.monotonic() - killed_at
        history = "\n".join(seen)
        former = f"pid {leader_worker.proc.pid}"
        assert former in history, history
        assert ("leaderless" in history or "leader failover" in history), history
        assert "2 live runtimes report leader" not in history
        print("runtime check during failover:", *dict.fromkeys(seen), sep="\n  ")

        # --- 3b. a poison job: its errors are read from the Rust core's payload -------------
        # A fresh worker with free slots runs the poison job and churns short jobs.
        log = tmp_path / "w4.log"
        proc = subprocess.Popen([str(python), str(WORKER), rust_url, "w4", "8"],
                                stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
                                cwd=WORKER.parent, env=RUST_ENV)
        workers.append(Worker("w4", proc, log))
        wait_for("w4 started", started(log), 30, 0.2)
        enqueue(python, rust_url, 1, POISON)
        failed = wait_for("the poison job failed 3 times", lambda: rows(
            url, "SELECT job_id FROM awa.done_entries WHERE state = 'failed'"), 60)
        poison = failed[0]["job_id"]
        rust_awa(rust_awa_binary(), url, "dlq", "move", "--queue", "work", "--reason", "poison")
        entries = json.loads(our_awa(url, "dlq", "list", "--json").stdout)
        assert [e["job"]["id"] for e in entries] == [poison], entries
        assert "payment gateway rejected" in json.dumps(entries)
        _, dlq = ops(url, state, "dlq")
        assert "repeated error" in summaries(dlq) and "payment gateway" in summaries(dlq), \
            summaries(dlq)

        # --- 4. a pinned horizon ------------------------------------------------------------
        enqueue(python, rust_url, 200, 0)
        with psycopg.connect(url, application_name="fleet-report") as holder:
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            holder.execute("SELECT count(*) FROM awa.queue_meta")
            pinned_at = time.monotonic()
            enqueue(python, rust_url, 400, 0)
            time.sleep(max(0.0, 32 - (time.monotonic() - pinned_at)))
            _, horizon = ops(url, state, "mvcc-horizon", "--min-age", "30")
            text = summaries(horizon)
            assert "fleet-report" in text and "holding xmin" in text, text
            _, dead = ops(url, state, "dead-tuples", "--min-age", "30")
            bloating = [f for f in dead["findings"] if "pinned" in f["summary"]
                        or "fleet-report" in f["why"]]
            assert bloating, summaries(dead)
            tables = {f["evidence"][0]["relname"] for f in bloating}
            assert tables, summaries(dead)
            timings["pinned for"] = time.monotonic() - pinned_at
            holder.rollback()

        # --- 5. the TUI survived ----------------------------------------------------------
        if term is not None:
            assert term.alive(), "awa-tui exited"
            screen = term.screen()
            assert "Traceback" not in screen and "refresh failed" not in screen, screen
        timings["total"] = time.monotonic() - t0
        print("fleet timings:", {k: round(v, 1) for k, v in timings.items()},
              "bloating:", sorted(tables))
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGKILL)
                w.proc.wait()
        if term is not None:
            term.close()
