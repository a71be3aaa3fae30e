"""Every known queue, always: a queue whose jobs all completed, and a queue a runtime only
serves, are listed by the console's Overview (at 80x24), `awa queue stats` and the exporter,
with the completions counted (awa.known_queues is the one rule)."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from click.testing import CliRunner

import awa
from awa.cli import main as awa_cli
from awa.storage import open_engine
from awa.storage.engine import AttemptWrite
from awa_ops.exporter import DatabaseCollector
from support.processes import start_worker
from support.server_connections import with_worker_processes
from tui.conftest import NARROW, running_console, screen_text
from tui.test_live_workers import eventually

JOBS = 20


def queue_rows(app) -> dict[str, dict[str, str]]:
    table = app.screen.query_one("#queues")
    keys = table.shown_keys()
    return {str(row[0]): dict(zip(keys, (str(c) for c in row), strict=True))
            for row in (table.get_row_at(i) for i in range(table.row_count))}


def completed(database_url: str) -> int:
    with awa.Client(database_url) as client:
        return sum(s.completed_last_hour for s in client.queue_stats() if s.queue == "email")


@pytest.mark.connections(with_worker_processes(1))
async def test_a_drained_queue_and_an_idle_served_one_are_listed_everywhere(database_url,
                                                                               log_dir):
    worker = start_worker(database_url, "email:4,idle:1", log_dir=log_dir)
    try:
        async with running_console(database_url, size=NARROW, clock=None) as (app, pilot):
            with awa.Client(database_url) as client:
                client.insert_many([{}] * JOBS, kind="fast", queue="email")
            worker.wait_for_log("done", kind="fast", count=JOBS)

            def drained_and_counted():
                rows = queue_rows(app)
                email = next((q for q in app.screen.data.queues if q.queue == "email"), None)
                return ("email" in rows and rows["email"]["available"] == "0"
                        and rows["email"]["running"] == "0" and email is not None
                        and completed(database_url) == JOBS and rows)

            rows = await eventually(app, pilot, drained_and_counted,
                                    what="the email queue drained, on the overview")
            # The completions were counted while they happened (not 0 for want of depth).
            email = next(q for q in app.screen.data.queues if q.queue == "email")
            assert any(rate > 0 for rate in email.throughput), email.throughput
            assert "rate" in app.screen.query_one("#queues").shown_keys()  # Done/s at 80 cols
            assert "idle" in rows and rows["idle"]["available"] == "0"
            text = screen_text(app)
            assert "email" in text and "idle" in text
    finally:
        worker.terminate()

    # `awa queue stats`: both queues (the worker stopped; its snapshot is recent history).
    out = await asyncio.to_thread(CliRunner().invoke, awa_cli, [
        "queue", "stats", "--json", "--database-url", database_url])
    assert out.exit_code == 0, out.output
    stats = {s["queue"]: s for s in json.loads(out.output)}
    assert stats["email"]["completed_last_hour"] == JOBS and stats["email"]["total_queued"] == 0
    assert stats["idle"]["total_queued"] == 0 and stats["idle"]["completed_last_hour"] == 0

    # The exporter: zeros for both, and email's completions per second over the last minute.
    depth, rate = await exported(database_url)
    assert depth[("email", "available")] == 0 and depth[("idle", "available")] == 0
    assert rate["email"] > 0 and rate["idle"] == 0


@pytest.mark.connections(with_worker_processes(1))
async def test_a_drained_queue_stays_listed_after_its_runtimes_row_is_gone(database_url, db,
                                                                          log_dir):
    """Retention dropped the registry row of the worker that drained the queue (or it never
    listed its queues): a console opened afterwards, `queue stats` and the exporter still list
    the queue, from the descriptor every runtime declares for each queue it runs, with
    its completions."""
    worker = start_worker(database_url, "email:4", log_dir=log_dir)
    try:
        with awa.Client(database_url) as client:
            client.insert_many([{}] * JOBS, kind="fast", queue="email")
        worker.wait_for_log("done", kind="fast", count=JOBS)
    finally:
        worker.terminate()
    await eventually_sync(lambda: completed(database_url) == JOBS)
    db.execute("DELETE FROM awa.runtime_instances")

    async with running_console(database_url, size=NARROW, clock=None) as (app, pilot):
        rows = queue_rows(app)
        assert "email" in rows and rows["email"]["available"] == "0", rows
        assert "rate" in app.screen.query_one("#queues").shown_keys()  # Done/s at 80 cols

    out = await asyncio.to_thread(CliRunner().invoke, awa_cli, [
        "queue", "stats", "--json", "--database-url", database_url])
    assert out.exit_code == 0, out.output
    stats = {s["queue"]: s for s in json.loads(out.output)}
    assert stats["email"]["completed_last_hour"] == JOBS

    _, rate = await exported(database_url)
    assert rate["email"] > 0  # its completions of the last minute, per second


@pytest.mark.parametrize("test_engine", ["canonical", "queue_storage"])
async def test_a_queue_known_only_from_its_history_is_listed_everywhere(database_url, db):
    """No runtime row, no descriptor, no queue_meta and nothing waiting: only completions
    name the queue (issue 33).  The console's Overview (80x24) lists it with its Done/s,
    `queue stats` with its completions, the exporter with depth 0 and its rate."""
    async with running_console(database_url, size=NARROW, clock=None) as (app, pilot):
        await complete_jobs(database_url, "history", JOBS)
        db.execute("DELETE FROM awa.runtime_instances")
        db.execute("DELETE FROM awa.queue_descriptors")
        assert not db.execute("SELECT 1 FROM awa.queue_meta WHERE queue = 'history'").fetchall()

        def listed_with_its_rate():
            rows = queue_rows(app)
            summary = next((q for q in app.screen.data.queues if q.queue == "history"), None)
            return ("history" in rows and rows["history"]["available"] == "0"
                    and summary is not None and any(rate > 0 for rate in summary.throughput))

        await eventually(app, pilot, listed_with_its_rate,
                         what="the history-only queue with its Done/s, on the overview")
        assert "rate" in app.screen.query_one("#queues").shown_keys()  # Done/s at 80 cols
        assert "history" in screen_text(app)

    out = await asyncio.to_thread(CliRunner().invoke, awa_cli, [
        "queue", "stats", "--json", "--database-url", database_url])
    assert out.exit_code == 0, out.output
    stats = {s["queue"]: s for s in json.loads(out.output)}
    assert stats["history"]["completed_last_hour"] == JOBS
    assert stats["history"]["total_queued"] == 0

    depth, rate = await exported(database_url)
    assert depth[("history", "available")] == 0
    assert rate["history"] > 0  # its completions of the last minute, per second


async def exported(database_url: str) -> tuple[dict, dict]:
    """One scrape of the exporter: depth by (queue, state), completions per second by queue."""
    collector = DatabaseCollector(database_url)
    try:
        families = {f.name: f for f in await collector.scrape()}
    finally:
        await collector.close()
    depth = {(s.labels["awa_job_queue"], s.labels["awa_job_state"]): s.value
             for s in families["awa_db_queue_depth"].samples}
    rate = {s.labels["awa_job_queue"]: s.value
            for s in families["awa_db_queue_completed_rate"].samples}
    return depth, rate


async def complete_jobs(database_url: str, queue: str, n: int) -> None:
    """``n`` jobs inserted, claimed and completed through the storage engine (no runtime, so
    no registry row or descriptor names their queue)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        engine = await open_engine(conn)
        async with awa.AsyncClient(database_url) as client:
            await client.insert_many([{}] * n, kind="fast", queue=queue)
        jobs = await engine.claim_batch(conn, queue, n, 300_000)
        assert len(jobs) == n
        applied = await engine.complete_batch(conn, [AttemptWrite(j.id, j.run_lease)
                                                     for j in jobs])
        assert len(applied.applied) == n


async def eventually_sync(check, timeout: float = 15.0) -> None:
    import time
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.2)
