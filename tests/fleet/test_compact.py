"""awa-pg 0.6.9's compact paths, read by our read-only engine (issue 33): a queue whose
``deadline_duration`` is 0 is claimed through ``lease_claim_batches`` and completes through
``receipt_completion_batches``; its running jobs and the queue itself must show, and a
SIGKILLed worker's compact claims must be named by ``stuck-running``.

Completions are compared with 0.6.9's own admin reads twice: while they are rows of
``receipt_completion_batches``, and after 0.6.9's queue-ring prune has folded them into
``queue_terminal_rollups`` (a count per queue and priority, no times), which the test waits
for.  0.6.9 may fold a ring slot within seconds of its completions (on a quiet machine, a
read-only snapshot held by the test notwithstanding), so the first look is bracketed by two
reads of 0.6.9's records and made again on fresh completions when a fold fell inside it.

The queue's jobs all completed, so it has no depth and no ``queue_meta`` row: our
``queue stats`` once counted its completions and then dropped them with it (0 against
0.6.9's 20); the rust-core engine's ``queue_details`` keeps a queue that has completions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from awa_ops.exporter import DatabaseCollector
from fleet.test_fleet import (
    RUST_ENV,
    WORKER,
    Worker,
    fleet_db,  # noqa: F401 (a fixture used by name)
    ops,
    our_awa,
    rows,
    started,
    wait_for,
)
from support.rust_awa import as_url, rust_awa_python

pytestmark = pytest.mark.slow

SLOTS = 2
ENQUEUE = """
import asyncio, sys
from dataclasses import dataclass
import awa

@dataclass
class Slow:
    seconds: float = 60.0

@dataclass
class ZFast:
    n: int = 0

async def main(url, slow, fast):
    client = awa.AsyncClient(url)
    for _ in range(slow):
        await client.insert(Slow(600), kind="zslow", queue="zd")
    for i in range(fast):
        await client.insert(ZFast(i), kind="zfast", queue="zd")

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""
THEIRS = """
import asyncio, json, sys
import awa

async def main(url):
    client = awa.AsyncClient(url)
    await client.flush_admin_metadata()  # 0.6.9's queue_stats reads a cache
    stats = [s for s in await client.queue_stats() if s.queue == "zd"]
    running = await client.list_jobs(state="running", queue="zd", limit=100)
    completed = await client.list_jobs(state="completed", queue="zd", limit=100)
    print(json.dumps({"completed_last_hour": sum(s.completed_last_hour for s in stats),
                      "running": sum(s.running for s in stats),
                      "listed_running": len(running), "listed_completed": len(completed)}))

asyncio.run(main(sys.argv[1]))
"""
# The workers' queue-ring rotation: 0.6.9 folds a slot's terminal rows away at the latest
# when the ring comes round to it again (16 rotations); at 4 s that is a minute after the
# quick jobs, time enough for the first look under load.
ROTATE_MS = 4_000
FOLD_TIMEOUT_S = 150
FAST = 20
# Looks at fresh compact completions before giving up on seeing them unfolded.
LOOKS = 4
# 0.6.9's own records of queue zd's compact completions, all in one snapshot: still kept
# as rows (batch items less tombstones), and folded into the rollup by the ring's prune.
COMPACT_COMPLETIONS = """
SELECT (SELECT count(*) FROM awa.receipt_completion_batches b
          CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases) AS i(job_id, run_lease)
         WHERE b.queue = 'zd' AND NOT EXISTS (
               SELECT 1 FROM awa.receipt_completion_tombstones t
                WHERE t.ready_slot = b.ready_slot AND t.ready_generation = b.ready_generation
                  AND t.job_id = i.job_id AND t.run_lease = i.run_lease)) AS kept,
       (SELECT coalesce(sum(pruned_completed_count), 0) FROM awa.queue_terminal_rollups
         WHERE queue = 'zd') AS folded
"""


def run_theirs(python: Path, script: str, *args: str) -> str:
    proc = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True,
                          timeout=120, cwd=WORKER.parent, env=RUST_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def compact_completions(url: str) -> tuple[int, int]:
    """(kept as rows, folded into the rollup) for queue zd, read in one snapshot."""
    row = rows(url, COMPACT_COMPLETIONS)[0]
    return int(row["kept"]), int(row["folded"])


@pytest.mark.connections(33)
def test_compact_claims_and_completions_are_read(fleet_db: str, tmp_path: Path) -> None:  # noqa: F811
    url, rust_url = fleet_db, as_url(fleet_db)
    python = rust_awa_python()
    state = tmp_path / "state"
    workers: list[Worker] = []
    pin: psycopg.Connection[Any] | None = None

    def ours() -> dict[str, Any]:
        stats = {s["queue"]: s for s in json.loads(our_awa(url, "queue", "stats",
                                                           "--json").stdout)}
        return stats["zd"]

    def theirs() -> dict[str, int]:
        return json.loads(run_theirs(python, THEIRS, rust_url))

    # One exporter across the run: its completion rate for zd, with the times around the
    # scrape (the rate's database clock falls between them).
    loop = asyncio.new_event_loop()
    collector = DatabaseCollector(url, 3.0)

    def exported_rate() -> tuple[float, float, float]:
        started = time.time()
        families = loop.run_until_complete(collector.scrape())
        rate = [s.value for f in families for s in f.samples
                if s.name == "awa_db_queue_completed_rate"
                and s.labels.get("awa_job_queue") == "zd"]
        return started, time.time(), rate[0] if rate else 0.0

    try:
        for name in ("z1", "z2"):
            log = tmp_path / f"{name}.log"
            proc = subprocess.Popen([str(python), str(WORKER), rust_url, name, "1", "120000",
                                     str(SLOTS), str(ROTATE_MS)], stdout=log.open("w"),
                                    stderr=subprocess.STDOUT, text=True, cwd=WORKER.parent,
                                    env=RUST_ENV)
            workers.append(Worker(name, proc, log))
            wait_for(f"{name} started", started(log), 30, 0.2)
        # Before the ring comes round, 0.6.9 prunes a finished ring slot (folding its
        # terminal rows away) early only while no client backend of the database holds a
        # snapshot: this read-only transaction holds one until the first look is done.
        pin = psycopg.connect(url, autocommit=True, application_name="compact-test-pin")
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT 1")
        first_scrape = exported_rate()
        # Quick jobs first (they complete through the compact path), then the slow ones.
        # --- before the fold: the completions are rows of receipt_completion_batches ----
        # On a quiet machine 0.6.9 folds them within a rotation or so, the held snapshot
        # notwithstanding, so each look is bracketed by two reads of its records and made
        # again on fresh completions when a fold fell inside it.
        done = 0
        for _ in range(LOOKS):
            folded = compact_completions(url)[1]
            run_theirs(python, ENQUEUE, rust_url, "0", str(FAST))
            done += FAST

            def all_recorded(total: int = done) -> bool:
                return sum(compact_completions(url)) == total

            wait_for("compact completions", all_recorded, 30)
            if compact_completions(url) == (FAST, folded):
                before_c, before_c_theirs = ours(), theirs()
                if compact_completions(url) == (FAST, folded):
                    break
            wait_for("the last completions folded", lambda: compact_completions(url)[0] == 0,
                     FOLD_TIMEOUT_S, 0.5)
        else:
            pytest.fail(f"0.6.9 folded the compact completions during each of {LOOKS} looks")
        assert before_c_theirs["completed_last_hour"] == FAST, before_c_theirs
        assert before_c["completed_last_hour"] == before_c_theirs["completed_last_hour"], \
            (before_c, before_c_theirs)
        # The slow jobs go to a later ring slot than the quick ones: a slot whose jobs still
        # run is not pruned, and the quick ones' slot must be free to fold.
        quick_generation = rows(url, "SELECT max(ready_generation) AS g FROM "
                                     "awa.receipt_completion_batches")[0]["g"]
        if quick_generation is not None:  # (None: folded already, the slot is free)
            wait_for("the queue ring rotated past the quick jobs' slot", lambda: rows(
                url, "SELECT generation FROM awa.queue_ring_state")[0]["generation"]
                > quick_generation, 30, 0.5)
        run_theirs(python, ENQUEUE, rust_url, str(2 * SLOTS), "0")
        wait_for("4 zero-deadline jobs running, 2 per worker",
                 lambda: all(len(w.read_jobs()) == SLOTS for w in workers), 30)
        # The compact claim path was taken (no row-local lease_claims at all).
        assert rows(url, "SELECT 1 FROM awa.lease_claim_batches LIMIT 1")
        assert not rows(url, "SELECT 1 FROM awa.lease_claims LIMIT 1")
        running = workers[0].jobs | workers[1].jobs
        assert len(running) == 2 * SLOTS
        before, before_theirs = ours(), theirs()

        # Running counts equal the jobs the workers really run (their own "running" lines).
        # 0.6.9's own admin reads do not see compact claims at all (running 0): what its
        # workers run is the truth there.
        assert before["running"] == len(running), before
        assert (before_theirs["running"], before_theirs["listed_running"]) == (0, 0), \
            before_theirs
        listed = json.loads(our_awa(url, "job", "list", "--state", "running", "--queue", "zd",
                                    "--json").stdout)
        assert {j["id"] for j in listed} == running

        # --- the fold: the snapshot released, 0.6.9 prunes the quick jobs' ring slot ------
        pin.close()
        wait_for("0.6.9 to fold the compact completions into queue_terminal_rollups",
                 lambda: compact_completions(url) == (0, done), FOLD_TIMEOUT_S, 1)
        after, after_theirs = ours(), theirs()
        # 0.6.9 keeps only their number, per queue and priority, without times: its own
        # completed_last_hour and completed list drop them, and so does ours.
        assert (after_theirs["completed_last_hour"], after_theirs["listed_completed"]) == \
            (0, 0), after_theirs
        assert after["completed_last_hour"] == after_theirs["completed_last_hour"], \
            (after, after_theirs)
        # Where they went: our exporter counts the folded completions (kept rows plus
        # 0.6.9's rollup, one snapshot per scrape), though no window holds them any more:
        # its rate since the first scrape is every completion over the time between.
        before_first, after_first, _ = first_scrape
        before_second, after_second, rate = exported_rate()
        assert done / (after_second - before_first) <= rate \
            <= done / (before_second - after_first), (rate, first_scrape)
        # The compact claims of the running jobs are still read as running after the fold.
        assert after["running"] == len(running), after
        listed = json.loads(our_awa(url, "job", "list", "--state", "running", "--queue", "zd",
                                    "--json").stdout)
        assert {j["id"] for j in listed} == running

        # SIGKILL one worker: its compact claims are named by stuck-running, none other.
        victim, survivor = workers
        victim.proc.kill()
        victim.proc.wait(timeout=10)

        def orphaned() -> set[int] | None:
            _, result = ops(url, state, "stuck-running")
            ids = {row["job_id"] for f in result["findings"] if "orphaned" in f["summary"]
                   for row in f["evidence"]}
            return ids or None

        named = wait_for("the dead worker's compact claims named", orphaned, 60, 1)
        assert named == victim.jobs and not named & survivor.jobs
    finally:
        loop.run_until_complete(collector.close())
        loop.close()
        if pin is not None:
            pin.close()
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(timeout=10)
