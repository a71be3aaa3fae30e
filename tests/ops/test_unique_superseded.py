"""A superseded attempt is not a wedge (issue 46's matrix scenario unique_claim_superseded):
a running job whose unique key a newer job took (a mask without running admits it) is
normal while it heartbeats, so the exporter's awa_db_unique_wedged -- AwaUniqueClaimWedged's
input -- counts it only once its heartbeat is past its runtime's staleness and rescue has
not cancelled it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import awa
from awa_ops.exporter import DatabaseCollector
from support.polling import wait_until
from support.processes import start_worker
from support.server_connections import with_worker_processes

MASK = {"states": ["scheduled", "available", "retryable"]}


def wedged(database_url: str) -> float:
    """The exporter's awa_db_unique_wedged of queue reports, from one real scrape."""
    async def scrape() -> dict[str, float]:
        collector = DatabaseCollector(database_url)
        try:
            families = {m.name: m for m in await collector.scrape()}
        finally:
            await collector.close()
        return {s.labels["awa_job_queue"]: s.value
                for s in families["awa_db_unique_wedged"].samples}
    return asyncio.run(scrape()).get("reports", 0)


@pytest.mark.connections(with_worker_processes(1, besides=3))
def test_superseded_attempt_counts_as_wedged_only_when_stale_and_unrescued(database_url,
                                                                          tmp_path, ops):
    # no maintenance: nothing rescues the attempt once its worker is gone
    worker = start_worker(database_url, "reports:1", settings={"run_maintenance": False},
                          log_dir=tmp_path)
    try:
        with awa.Client(database_url) as client:
            client.insert({"seconds": 600}, kind="slow", queue="reports", unique_opts=MASK)
            worker.wait_for_log("start", kind="slow")
            client.insert({"seconds": 600}, kind="slow", queue="reports", unique_opts=MASK,
                          run_at=timedelta(hours=6))
        # the old attempt runs and heartbeats: superseded, not wedged
        assert wedged(database_url) == 0
        # diagnose unique-wedge sees it on every engine (it read canonical's table alone,
        # so on queue storage it said OK whatever was running), as information
        seen = ops("unique-wedge")
        assert seen.code == 0, seen.data
        assert any("1 running job superseded" in f["summary"] for f in seen.findings())
        worker.kill()
        # its heartbeat goes past the runtime's staleness (1 s) and nothing rescues it
        wait_until(lambda: wedged(database_url) == 1, timeout=20,
                   message="the stale superseded attempt counted as wedged")
    finally:
        worker.kill()
