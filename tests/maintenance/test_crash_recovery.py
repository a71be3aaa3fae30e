"""Crash recovery with real worker subprocesses killed by SIGKILL."""

from __future__ import annotations

import pytest

import awa
from awa.storage.queue_storage.maintenance import RECEIPT_STALE_ERROR
from runtime.conftest import job_row, wait_until
from support.processes import start_worker
from support.server_connections import with_worker_processes

HEARTBEAT_STALE_ERROR = "heartbeat stale: worker presumed dead"
# A killed attempt that never heartbeated is, on queue storage, a receipt nobody closed.
STALE_ERRORS = {"canonical": {HEARTBEAT_STALE_ERROR},
                "queue_storage": {HEARTBEAT_STALE_ERROR, RECEIPT_STALE_ERROR}}

QUEUE_SETTINGS = {"heartbeat_staleness_ms": 600}


def done_lines(workers, job_id: int) -> list[list[str]]:
    return [line for w in workers for line in map(str.split, w.log_lines())
            if line[0] == "done" and int(line[2]) == job_id]


@pytest.mark.connections(with_worker_processes(1))
def test_sigkilled_worker_job_is_rescued_and_completed_exactly_once(database_url, db, log_dir,
                                                                   test_engine):
    first = start_worker(database_url, "default:2", log_dir=log_dir, settings=QUEUE_SETTINGS)
    with awa.Client(database_url) as client:
        job = client.insert({"seconds": 0.6}, kind="slow")
    first.wait_for_log("start", kind="slow")
    first.kill()
    second = start_worker(database_url, "default:2", log_dir=log_dir, settings=QUEUE_SETTINGS)
    try:
        wait_until(lambda: job_row(db, job.id)["state"] == "completed", timeout=20,
                   message="the rescued job to complete")
        row = job_row(db, job.id)
        assert row["attempt"] == 2
        [error] = [e["error"] for e in row["errors"]]
        assert error in STALE_ERRORS[test_engine]
        assert len(done_lines([first, second], job.id)) == 1
    finally:
        second.terminate()


@pytest.mark.connections(with_worker_processes(1))
def test_handler_hanging_past_its_deadline_is_rescued_and_its_slot_freed(
        database_url, db, log_dir):
    settings = {**QUEUE_SETTINGS, "deadline_drop_grace_ms": 1000,
                "queues": [{"name": "dl", "max_workers": 1, "deadline_duration_ms": 500}]}
    worker = start_worker(database_url, log_dir=log_dir, settings=settings)
    try:
        with awa.Client(database_url) as client:
            hung = client.insert({}, kind="hang", queue="dl", max_attempts=1)
            worker.wait_for_log("start", kind="hang")
            # The only slot is taken by the hang; this one waits behind it.
            behind = client.insert({}, kind="fast", queue="dl")
            wait_until(lambda: job_row(db, behind.id)["state"] == "completed", timeout=15,
                       message="the job behind the hang to run in the freed slot")
            row = job_row(db, hung.id)
            assert row["state"] == "failed"
            assert row["errors"][-1]["error"] == "hard deadline exceeded"

            # A handler that notices the rescue and finishes late: the finish is ignored.
            late = client.insert({"linger": 0.2}, kind="cancel_aware", queue="dl",
                                 max_attempts=1)
            worker.wait_for_log("done", kind="cancel_aware", timeout=15)
            wait_until(lambda: job_row(db, late.id)["state"] != "running", timeout=5)
            late_row = job_row(db, late.id)
            assert late_row["state"] == "failed"
            assert late_row["errors"][-1]["error"] == "hard deadline exceeded"
    finally:
        worker.terminate()


@pytest.mark.connections(with_worker_processes(2))
def test_poison_job_ends_in_dlq_and_jobs_sharing_its_process_finish(database_url, db, log_dir,
                                                                   test_engine):
    """A job that kills its worker on every attempt: a supervisor restarts the worker
    each time (as an orchestrator would); the poison job stops after max_attempts."""
    settings = {**QUEUE_SETTINGS, "dlq_enabled_by_default": True}
    workers = [start_worker(database_url, "default:4", log_dir=log_dir, settings=settings)]
    with awa.Client(database_url) as client:
        poison = client.insert({}, kind="crash", max_attempts=2)
        bystanders = [client.insert({"seconds": 0.3}, kind="slow") for _ in range(3)]

    def settled() -> bool:
        if not workers[-1].alive:
            workers.append(start_worker(database_url, "default:4", log_dir=log_dir,
                                        settings=settings))
        in_dlq = db.execute("SELECT 1 FROM awa.dlq_entries WHERE job_id = %s",
                            (poison.id,)).fetchone()
        done = all((row := job_row(db, b.id)) is not None and row["state"] == "completed"
                   for b in bystanders)
        return bool(in_dlq) and done

    try:
        wait_until(settled, timeout=25, interval=0.1, message="poison in DLQ, others done")
        entry = db.execute("SELECT * FROM awa.dlq_entries WHERE job_id = %s",
                           (poison.id,)).fetchone()
        assert entry["dlq_reason"] == "heartbeat_stale"
        assert entry["attempt"] == 2
        errors = [e["error"] for e in entry["errors"]]
        assert len(errors) == 2 and set(errors) <= STALE_ERRORS[test_engine]
        assert len(workers) >= 2  # at least two crashes: one per attempt
        for b in bystanders:
            # Completed once, by its last run.  A run can end its handler and then die with
            # its process before the completion batch commits (the poison job may crash the
            # process milliseconds later): that attempt was never completed, so its job runs
            # again -- at least once, never after a committed completion.
            runs = done_lines(workers, b.id)
            final = job_row(db, b.id)
            assert runs and final is not None and final["state"] == "completed"
            assert int(runs[-1][3]) == final["attempt"]
            assert all(int(r[3]) < final["attempt"] for r in runs[:-1])
    finally:
        for w in workers:
            if w.alive:
                w.terminate()
