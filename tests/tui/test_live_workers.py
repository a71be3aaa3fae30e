"""The console against real worker subprocesses: leader, a SIGKILLed worker, cancel, DLQ retry."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import awa
from support.processes import start_worker
from support.server_connections import with_worker_processes
from tui.conftest import add_dlq, press, running_console, screen_text

STALE_AFTER_S = 1.0  # the workers' heartbeat_staleness_ms (support.processes.SHORT_INTERVALS)


async def eventually(app, pilot, check: Callable[[], Any], timeout: float = 15.0,
                     what: str = "condition") -> Any:
    """Refresh the console until ``check()`` holds (the worker acts on its own schedule)."""
    deadline = time.monotonic() + timeout
    while True:
        await app.refresh_now()
        await press(app, pilot)
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n"
                                 f"{screen_text(app)}")
        await asyncio.sleep(0.1)


def running_row(app, job_id: int) -> dict[str, str] | None:
    table = app.screen.query_one("#running")
    for i in range(table.row_count):
        row = table.get_row_at(i)
        if str(row[2]) == str(job_id):
            return {"status": str(row[1]), "runtime": str(row[6]), "heartbeat": str(row[8])}
    return None


@pytest.mark.connections(with_worker_processes(1))
async def test_leader_is_marked_and_a_sigkilled_workers_job_goes_stale(database_url, log_dir):
    worker = start_worker(database_url, "default:2", log_dir=log_dir)
    try:
        async with running_console(database_url, clock=None,
                                   stale_after_s=STALE_AFTER_S) as (app, pilot):
            await eventually(app, pilot, lambda: "★ LEADER" in screen_text(app),
                             what="the worker to win leadership")
            text = screen_text(app)
            assert f":{worker.pid}" in text or str(worker.pid) in text
            assert "NO LEADER" not in text and "NO LIVE RUNTIME" not in text

            with awa.Client(database_url) as client:
                job = client.insert({"seconds": 60}, kind="slow")
            worker.wait_for_log("start", kind="slow")
            await press(app, pilot, "2")
            row = await eventually(app, pilot, lambda: running_row(app, job.id),
                                   what="the slow job to show as running")
            assert row["status"] == "alive"
            assert row["runtime"].endswith(f":{worker.pid}")

            worker.kill()
            row = await eventually(
                app, pilot,
                lambda: (r := running_row(app, job.id)) and r["status"] != "alive" and r,
                what="the killed worker's job to stop looking alive")
            # Heartbeat past the staleness cutoff and its runtime gone: rescue is due.
            assert row["status"] == "orphaned"
            assert row["runtime"] == f"{socket.gethostname()}:{worker.pid} (gone)"
            await press(app, pilot, "1")
            await eventually(app, pilot, lambda: "NO LIVE RUNTIME" in screen_text(app),
                             what="the overview banner")
    finally:
        worker.kill()


@pytest.mark.connections(with_worker_processes(1))
async def test_cancel_reaches_the_running_handler(database_url, db, log_dir):
    worker = start_worker(database_url, "default:2", log_dir=log_dir)
    try:
        with awa.Client(database_url) as client:
            job = client.insert({"seconds": 60}, kind="slow")
        worker.wait_for_log("start", kind="slow")
        async with running_console(database_url, clock=None,
                                   stale_after_s=STALE_AFTER_S) as (app, pilot):
            await press(app, pilot, "2")
            await eventually(app, pilot, lambda: running_row(app, job.id), what="the job")
            table = app.screen.query_one("#running")
            table.move_cursor(row=[str(c) for c in table.get_column("id")].index(str(job.id)))
            await press(app, pilot, "c", "y")
            assert f"cancelled 1 job(s): {job.id}" in screen_text(app)
        # The handler saw the cancel (via the listener) long before its 60 s were up.
        worker.wait_for_log("cancelled", kind="slow", timeout=10)
        row = db.execute("SELECT state::text FROM awa.jobs WHERE id = %s", [job.id]).fetchone()
        assert row["state"] == "cancelled"
    finally:
        worker.kill()


@pytest.mark.connections(with_worker_processes(1))
async def test_dlq_retry_is_run_by_a_live_worker(database_url, db, log_dir):
    # dlq_at now, or the worker's retention would clean it up before we look.
    add_dlq(db, 777, kind="fast", queue="default", reason="terminal_error",
            dlq_at=datetime.now(UTC))
    worker = start_worker(database_url, "default:2", log_dir=log_dir)
    try:
        async with running_console(database_url, clock=None) as (app, pilot):
            await press(app, pilot, "4")
            table = app.screen.query_one("#dlq")
            assert [str(c) for c in table.get_column("id")] == ["777"]
            await press(app, pilot, "r", "y")
            assert "retried from the DLQ 1 job(s): 777" in screen_text(app)
            assert table.row_count == 0
        worker.wait_for_log("done", kind="fast", timeout=10)
        for _ in range(100):
            row = db.execute("SELECT state::text FROM awa.jobs WHERE id = 777").fetchone()
            if row["state"] == "completed":
                break
            await asyncio.sleep(0.05)
        assert row["state"] == "completed"
    finally:
        worker.kill()


@pytest.mark.connections(with_worker_processes(2))
async def test_a_sigkilled_workers_attempt_is_named_with_its_dead_runtime(database_url, log_dir,
                                                                          tmp_path):
    """Who runs what: the attempt names the runtime that claimed it (recorded at claim),
    not just a runtime serving its queue -- while two serve it, and once its own is gone."""
    import json
    import os
    import subprocess
    import sys

    victim = start_worker(database_url, "default:2", log_dir=log_dir)
    bystander = None
    try:
        with awa.Client(database_url) as client:
            job = client.insert({"seconds": 60}, kind="slow")
        victim.wait_for_log("start", kind="slow")
        # Serves the queue too, but presumes heartbeats stale only after a minute: as leader
        # it does not rescue the attempt while the test looks at it.
        bystander = start_worker(database_url, "default:2", log_dir=log_dir,
                                 settings={"heartbeat_staleness_ms": 60_000})
        host = socket.gethostname()
        async with running_console(database_url, size=(120, 35), clock=None,
                                   stale_after_s=STALE_AFTER_S) as (app, pilot):
            await press(app, pilot, "2")
            # Two live runtimes serve the queue: the one that claimed it is named alone.
            row = await eventually(app, pilot, lambda: running_row(app, job.id),
                                   what="the slow job to show as running")
            assert row["status"] == "alive"
            assert row["runtime"] == f"{host}:{victim.pid}"

            victim.kill()
            row = await eventually(
                app, pilot,
                lambda: (r := running_row(app, job.id)) and r["status"] == "orphaned" and r,
                what="the killed worker's attempt to read orphaned")
            assert row["runtime"] == f"{host}:{victim.pid} (gone)"

            # Job detail says who claimed it, by instance id, and that it is gone.
            await press(app, pilot, "enter")
            text = screen_text(app)
            assert f"runs on {host}:{victim.pid} ({victim.instance_id[:20]}" in text.replace(
                "\n", "")
            assert "gone" in text

        # stuck-running evidence: the claiming runtime's id and name, gone.
        env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
        proc = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "stuck-running",
                               "--database-url", database_url, "--json",
                               "--heartbeat-staleness", "1"],
                              capture_output=True, text=True, timeout=60, env=env)
        findings = json.loads(proc.stdout)["findings"]
        evidence = [e for f in findings for e in f["evidence"] if e.get("job_id") == job.id]
        assert evidence, proc.stdout
        [attempt] = evidence
        assert attempt["claimed_by"] == victim.instance_id
        assert attempt["runtime"].startswith(f"gone: {host}:{victim.pid} "
                                             f"({victim.instance_id[:8]})")
        assert attempt["class"] in ("orphaned", "deadline overdue")
    finally:
        victim.kill()
        if bystander is not None:
            bystander.kill()
