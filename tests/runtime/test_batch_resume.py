"""A batch move_queue of 100,000 backlog jobs whose runner (the maintenance leader) is
SIGKILLed halfway resumes on the next leader and finishes: every job moved exactly once,
none lost, none run twice, with workers claiming from both queues throughout."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from support.processes import start_worker
from support.server_connections import with_worker_processes

TOTAL = 100_000
# Steps back to back (pace 0): the kill and the resume are under test here, not the rest
# between steps (test_batch_operations checks it), which would make the move 4x longer.
SETTINGS = {"batch_operations_interval_ms": 100, "batch_operations_pace": 0,
            "run_maintenance": True}
QUEUES = "src:2,dst:2"


def completed_by_queue(db) -> dict[str, int]:
    rows = db.execute("SELECT queue, count(*) AS n FROM awa.jobs WHERE kind = 'sleep' "
                      "AND state = 'completed' GROUP BY queue").fetchall()
    return {r["queue"]: int(r["n"]) for r in rows}


async def wait_op(client, op_id, predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        op = await client.get_batch_operation(op_id)
        if predicate(op):
            return op
        assert time.monotonic() < deadline, f"{what}: {op}"
        await asyncio.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(1_200)
@pytest.mark.parametrize("engine_name", [
    pytest.param("queue_storage", marks=pytest.mark.engine("queue_storage"), id="queue_storage"),
    pytest.param("canonical", marks=pytest.mark.engine("canonical"), id="canonical")])
@pytest.mark.connections(with_worker_processes(1, besides=8))
async def test_sigkilled_move_queue_resumes_and_moves_every_job_once(client, db,
                                                                      database_url,
                                                                      tmp_path, engine_name):
    for start in range(0, TOTAL, 10_000):
        await client.insert_many_copy([{"ms": 20, "n": i} for i in range(start, start + 10_000)],
                                      kind="sleep", queue="src")
    first = start_worker(database_url, QUEUES, settings=SETTINGS, log_dir=tmp_path / "a")
    op = await client.submit_batch_operation("move_queue", {"queue": "src", "kind": "sleep"},
                                             {"queue": "dst"}, submitted_by="resume-test")
    half = await wait_op(client, op.id, lambda o: o.processed >= TOTAL // 2,
                         600, "never got halfway")
    first.kill()  # SIGKILL: mid-chunk, mid-job
    at_kill = await client.get_batch_operation(op.id)
    assert at_kill.state == "running" and at_kill.processed < at_kill.total_matched
    assert at_kill.processed >= half.processed
    claimed_at_kill = completed_by_queue(db)
    assert claimed_at_kill.get("src", 0) > 0 and claimed_at_kill.get("dst", 0) > 0

    second = start_worker(database_url, QUEUES, settings=SETTINGS, log_dir=tmp_path / "b")
    try:
        final = await wait_op(client, op.id, lambda o: o.state == "completed",
                              900, "never completed after the restart")
        claimed_at_end = completed_by_queue(db)
    finally:
        second.kill()

    # Resumed, not restarted: the counters carry on from the kill.
    assert final.processed >= at_kill.processed
    assert final.errored == 0
    assert final.processed + final.skipped == final.total_matched
    assert final.total_matched <= TOTAL
    items = db.execute("""
        SELECT i.state, j.queue, j.state::text AS job_state,
               j.metadata->>'_awa_original_queue' AS original, count(*) AS n
          FROM awa.batch_operation_items i JOIN awa.jobs j ON j.id = i.job_id
         WHERE i.operation_id = %s
         GROUP BY 1, 2, 3, 4""", (op.id,)).fetchall()
    by = Counter()
    for r in items:
        by[(r["state"], r["queue"], r["original"])] += int(r["n"])
    # Every processed item is a job now in dst that came from src; no skipped one moved.
    assert sum(n for (s, q, o), n in by.items() if s == "processed") == final.processed
    assert all(q == "dst" and o == "src" for (s, q, o) in by if s == "processed")
    assert all(q == "src" and o is None for (s, q, o) in by if s == "skipped")
    # None lost: every job is still there, in one queue or the other.
    counts = db.execute("SELECT queue, count(*) AS n FROM awa.jobs WHERE kind = 'sleep' "
                        "GROUP BY queue").fetchall()
    assert sum(int(r["n"]) for r in counts) == TOTAL
    assert {r["queue"] for r in counts} <= {"src", "dst"}
    # Left behind in src: only jobs a worker had claimed when the move reached them (skipped,
    # or claimed before the scan) and that went back to waiting there (e.g. rescued after the
    # SIGKILL): never a job no worker had touched.
    left = db.execute("""
        SELECT j.id, j.attempt, i.state AS item FROM awa.jobs j
          LEFT JOIN awa.batch_operation_items i ON i.job_id = j.id AND i.operation_id = %s
         WHERE j.kind = 'sleep' AND j.queue = 'src' AND j.state <> 'completed'""",
                      (op.id,)).fetchall()
    assert all(r["attempt"] >= 1 and r["item"] in (None, "skipped") for r in left), left[:5]
    # None run twice by the move: within each worker every job finished at most once, and a
    # job that finished on both is one the SIGKILL cut off (its outcome not yet written):
    # the second worker ran it as the next attempt after the rescue, never the same attempt.
    done: dict[str, dict[int, list[int]]] = {"first": {}, "second": {}}
    for name, worker in (("first", first), ("second", second)):
        for line in worker.log_lines():
            word, _kind, job_id, attempt, *_ = line.split()
            if word == "done":
                done[name].setdefault(int(job_id), []).append(int(attempt))
    for name, runs in done.items():
        twice = {j: a for j, a in runs.items() if len(a) > 1}
        assert runs and not twice, (name, list(twice.items())[:10], len(twice))
    for job_id in set(done["first"]) & set(done["second"]):
        assert done["second"][job_id][0] > done["first"][job_id][0], job_id
    # Workers claimed from both queues throughout: before the kill and after it.
    assert claimed_at_end.get("dst", 0) > claimed_at_kill.get("dst", 0)
