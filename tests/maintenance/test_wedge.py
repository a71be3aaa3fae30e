"""The troubleshooting guide's unique-claim wedge, with real workers: a unique job whose
mask excludes running loses its key to a newer duplicate while it runs; its worker is
SIGKILLed; rescue cancels the superseded attempt and still rescues the other rows."""

from __future__ import annotations

import pytest

import awa
from runtime.conftest import job_row, wait_until
from support.processes import start_worker
from support.server_connections import with_worker_processes

from .conftest import WEDGE_QUERY

MASK_WITHOUT_RUNNING = {"states": ["scheduled", "available", "retryable"]}
SETTINGS = {"heartbeat_staleness_ms": 600}


@pytest.mark.connections(with_worker_processes(1))
@pytest.mark.engine("canonical")  # the guide's wedge query reads awa.jobs_hot
def test_rescue_cancels_the_superseded_attempt_and_keeps_rescuing(database_url, db, log_dir):
    first = start_worker(database_url, "uq:4", log_dir=log_dir, settings=SETTINGS)
    with awa.Client(database_url) as client:
        old = client.insert({"seconds": 2}, kind="slow", queue="uq",
                            unique_opts=MASK_WITHOUT_RUNNING)
        others = [client.insert({"seconds": 2, "n": i}, kind="slow", queue="uq")
                  for i in range(2)]
        first.wait_for_log("start", kind="slow", count=3)
        # Hold the queue so the newer duplicate stays available (holding the key).
        client.pause_queue("uq")
        newer = client.insert({"seconds": 2}, kind="slow", queue="uq",
                              unique_opts=MASK_WITHOUT_RUNNING)
        first.kill()
        wedged = db.execute(WEDGE_QUERY).fetchall()
        assert [(w["stuck_job"], w["claim_holder"]) for w in wedged] == [(old.id, newer.id)]

        second = start_worker(database_url, "uq:4", log_dir=log_dir, settings=SETTINGS)
        try:
            wait_until(lambda: job_row(db, old.id)["state"] == "cancelled", timeout=15,
                       message="the superseded attempt to be cancelled")
            stuck = job_row(db, old.id)
            assert stuck["errors"][-1]["error"] == "rescued as duplicate"
            # The others may be a rescue tick later: their last heartbeat can be newer than
            # the superseded attempt's (claimed in a second batch just before the kill).
            wait_until(lambda: all(job_row(db, o.id)["errors"] for o in others), timeout=10,
                       message="the other attempts to be rescued")
            for o in others:
                assert job_row(db, o.id)["errors"][-1]["error"] == (
                    "heartbeat stale: worker presumed dead")
            assert db.execute(WEDGE_QUERY).fetchall() == []
            client.resume_queue("uq")
            wait_until(lambda: all(job_row(db, j.id)["state"] == "completed"
                                   for j in [newer, *others]), timeout=20,
                       message="the newer holder and the rescued jobs to complete")
            assert job_row(db, old.id)["state"] == "cancelled"
        finally:
            second.terminate()
