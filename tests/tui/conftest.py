"""Real rows for the console to show, a fixed clock, and a driven app.

Rows carry absolute timestamps around ``T0`` and the app reads time from a
clock fixed at ``T0`` (advanced by hand when a test needs ages to tick), so
what a screen shows is exact and snapshot-stable.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import DataTable

from awa_tui.app import AwaConsole
from support.arrange import insert_job

T0 = datetime(2026, 1, 15, 12, 0, 0, tzinfo=UTC)
SIZE = (160, 45)


class Clock:
    """The console's clock, fixed at T0 until a test moves it."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def at(seconds: float) -> datetime:
    """T0 plus (or minus) some seconds."""
    return T0 + timedelta(seconds=seconds)


def add_runtime(db, *, host: str = "worker-a", pid: int = 101, leader: bool = False,
                last_seen: datetime | None = None, queues: list[str] | None = None,
                snapshot_interval_ms: int = 10_000, instance_id: str | None = None,
                timing: dict[str, int] | None = None, **flags: bool) -> str:
    """A registry row; ``timing`` (heartbeat_interval_ms, heartbeat_staleness_ms) is
    published with each queue, as a runtime's snapshot does (awa.runtime.snapshot)."""
    instance_id = instance_id or str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}:{pid}"))
    columns = {"healthy": True, "postgres_connected": True, "poll_loop_alive": True,
               "heartbeat_alive": True, "maintenance_alive": leader, "shutting_down": False,
               **flags}
    db.execute(
        f"""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version, started_at,
                last_seen_at, snapshot_interval_ms, leader, queues, {", ".join(columns)})
            VALUES (%s, %s, %s, '0.1.0', %s, %s, %s, %s, %s, {", ".join(["%s"] * len(columns))})""",
        [instance_id, host, pid, at(-3600), last_seen or at(-1), snapshot_interval_ms, leader,
         json.dumps([{"queue": q, **timing} for q in queues or ["default"]] if timing
                    else queues or ["default"]), *columns.values()])
    return instance_id


def add_job(db, *, state: str = "available", kind: str = "send_email", queue: str = "default",
            args: dict | None = None, attempt: int = 0, max_attempts: int = 25,
            created: datetime | None = None, run_at: datetime | None = None,
            attempted: datetime | None = None, heartbeat: datetime | None = None,
            deadline: datetime | None = None, finalized: datetime | None = None,
            errors: list[dict] | None = None, tags: list[str] | None = None,
            metadata: dict | None = None, progress: dict | None = None,
            unique_key: bytes | None = None, run_lease: int | None = None) -> int:
    return insert_job(
        db, state, kind=kind, queue=queue, args=args or {}, attempt=attempt,
        max_attempts=max_attempts, created_at=created or at(-60),
        run_at=run_at or created or at(-60), attempted_at=attempted, heartbeat_at=heartbeat,
        deadline_at=deadline, finalized_at=finalized, errors=errors, tags=tags or [],
        metadata=metadata or {}, progress=progress, unique_key=unique_key,
        unique_states="11111000" if unique_key else None,
        run_lease=run_lease if run_lease is not None else attempt)


def add_running(db, *, heartbeat_age: float = 2, deadline_in: float = 240,
                running_for: float = 30, **kw: Any) -> int:
    return add_job(db, state="running", attempt=kw.pop("attempt", 1),
                   attempted=at(-running_for), heartbeat=at(-heartbeat_age),
                   deadline=at(deadline_in), **kw)


def add_dlq(db, job_id: int, *, kind: str = "send_email", queue: str = "default",
            reason: str = "max_attempts_exhausted", error: str = "smtp timeout",
            dlq_at: datetime | None = None, attempt: int = 25) -> int:
    db.execute(
        """INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, attempt, errors,
               dlq_reason, dlq_at, created_at, run_at, finalized_at)
           VALUES (%s, %s, %s, '{"to": "x@example.com"}', 'failed', %s, %s::jsonb[], %s, %s,
                   %s, %s, %s)""",
        [job_id, kind, queue, attempt,
         [json.dumps({"error": error, "attempt": attempt, "at": at(-100).isoformat()})],
         reason, dlq_at or at(-100), at(-600), at(-600), dlq_at or at(-100)])
    return job_id


def seed_system(db) -> dict[str, Any]:
    """A small, busy-looking system: two queues, a leader and a worker, every running class."""
    ids: dict[str, Any] = {}
    timing = {"heartbeat_interval_ms": 5_000, "heartbeat_staleness_ms": 90_000}
    ids["leader"] = add_runtime(db, host="worker-a", pid=101, leader=True,
                                queues=["default", "email"], timing=timing)
    ids["worker"] = add_runtime(db, host="worker-b", pid=202, queues=["email"], timing=timing)
    ids["gone"] = add_runtime(db, host="worker-c", pid=303, queues=["email"],
                              last_seen=at(-600))
    for i in range(3):
        add_job(db, state="available", kind="send_email", queue="email", created=at(-40 + i))
    add_job(db, state="scheduled", kind="report", run_at=at(3600))
    add_job(db, state="retryable", kind="send_email", queue="email", attempt=1, run_at=at(30))
    for i in range(4):
        add_job(db, state="completed", kind="report", attempt=1, finalized=at(-1 - i))
    ids["failed"] = add_job(db, state="failed", kind="send_email", queue="email", attempt=25,
                            max_attempts=25, finalized=at(-300), tags=["billing"],
                            errors=[{"error": "smtp timeout", "attempt": 25,
                                     "at": at(-300).isoformat(), "terminal": True}])
    ids["alive"] = add_running(db, kind="send_email", queue="email", heartbeat_age=2)
    ids["stale"] = add_running(db, kind="report", queue="default", heartbeat_age=120,
                               running_for=600, deadline_in=60)
    ids["overdue"] = add_running(db, kind="send_email", queue="email", heartbeat_age=3,
                                 deadline_in=-15, running_for=400)
    ids["orphaned"] = add_running(db, kind="resize", queue="images", heartbeat_age=5)
    ids["dlq"] = add_dlq(db, 9001, reason="terminal_error", error="invalid address")
    add_dlq(db, 9002, queue="email", reason="max_attempts_exhausted", error="smtp timeout")
    return ids


def screen_text(app: AwaConsole) -> str:
    """What the terminal shows now, as plain text."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text()


async def settle(app: AwaConsole, pilot) -> None:
    """Wait for every refresh/action the app started, then for the screen to repaint.

    A DataTable sizes its columns to new rows only when it next goes idle; on a loaded
    machine that can come after the pauses, and a snapshot then shows columns as wide as
    their headers.  So wait, briefly, for every table to have laid out its rows (Textual
    keeps that pending flag private: ``_require_update_dimensions``)."""
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
            table._require_update_dimensions for table in app.screen.query(DataTable)):
        await pilot.pause(0.02)


async def press(app: AwaConsole, pilot, *keys: str) -> None:
    """Press each key only after what the previous one started has finished
    (a screen switch loads its rows before the next key acts on them)."""
    for key in keys:
        await pilot.press(key)
        await settle(app, pilot)
    if not keys:
        await settle(app, pilot)


# The terminals an on-call engineer really has: an SSH default and a laptop half-screen.
NARROW, MEDIUM = (80, 24), (120, 35)


def fixed_findings() -> list[Any]:
    """Diagnostics that do not depend on what else the shared server is doing."""
    from awa_ops.findings import CheckResult, Finding, Severity
    evidence = [{"job_id": 9001 + i, "kind": "send_email", "queue": "email",
                 "application_name": "awa-worker", "heartbeat_age_s": 120.5 + i,
                 "runtime": "worker-c:303 (gone)"} for i in range(3)]
    return [
        CheckResult("stuck-running", [Finding(
            Severity.CRITICAL, "3 running jobs have a heartbeat older than 90s",
            why="their worker is gone or wedged; rescue moves them back to retryable",
            next_step="awa-ops diagnose heartbeats", evidence=evidence,
            runbook="runbooks/stuck-running.md")], engine="canonical", duration_ms=12),
        CheckResult("dlq", [Finding(Severity.WARNING, "2 DLQ entries in the last 1.0h")],
                    engine="canonical", duration_ms=3),
        CheckResult("schema", [Finding(Severity.OK, "schema version 1 matches this code")],
                    engine="canonical", duration_ms=1),
    ]


@asynccontextmanager
async def running_console(database_url: str, size: tuple[int, int] = SIZE,
                          **kwargs: Any) -> AsyncIterator[tuple[AwaConsole, Any]]:
    kwargs.setdefault("clock", Clock())
    kwargs.setdefault("label", "test")
    kwargs.setdefault("live", False)
    app = AwaConsole(database_url, **kwargs)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        yield app, pilot


@pytest.fixture
def log_dir(tmp_path):
    """Where worker subprocesses write their start/done lines."""
    path = tmp_path / "worker-logs"
    path.mkdir()
    return path
