"""Snapshots of the main screens: a fixed clock and seeded rows make every cell exact.

Update after an intended change with:
    .venv/bin/python -m pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from awa_tui.app import AwaConsole
from tui.conftest import MEDIUM, NARROW, SIZE, Clock, fixed_findings, seed_system, settle


def console(database_url: str) -> AwaConsole:
    return AwaConsole(database_url, clock=Clock(), label="test", live=False)


def keys(*pressed: str):
    async def run_before(pilot) -> None:
        await settle(pilot.app, pilot)
        for key in pressed:
            await pilot.press(key)
            await settle(pilot.app, pilot)
    return run_before


def test_overview_snapshot(database_url, db, snap_compare):
    seed_system(db)
    assert snap_compare(console(database_url), terminal_size=SIZE, run_before=keys())


def test_running_snapshot(database_url, db, snap_compare):
    seed_system(db)
    assert snap_compare(console(database_url), terminal_size=SIZE, run_before=keys("2"))


def test_jobs_snapshot(database_url, db, snap_compare):
    seed_system(db)
    assert snap_compare(console(database_url), terminal_size=SIZE, run_before=keys("3"))


def test_job_detail_snapshot(database_url, db, snap_compare):
    seed_system(db)
    # the failed job: its errors, tags and timestamps
    assert snap_compare(console(database_url), terminal_size=SIZE,
                        run_before=keys("3", "slash", "f", "a", "i", "l", "e", "d", "enter",
                                        "enter"))


def test_dlq_snapshot(database_url, db, snap_compare):
    seed_system(db)
    assert snap_compare(console(database_url), terminal_size=SIZE, run_before=keys("4"))


def test_no_leader_banner_snapshot(database_url, db, snap_compare):
    seed_system(db)
    db.execute("UPDATE awa.runtime_instances SET leader = false")
    assert snap_compare(console(database_url), terminal_size=SIZE, run_before=keys())


# Every screen at the terminals on-call engineers really have (80x24 over SSH, 120x35).
SCREEN_KEYS = {
    "overview": (),
    "running": ("2",),
    "jobs": ("3",),
    "job_detail": ("3", "slash", "f", "a", "i", "l", "e", "d", "enter", "enter"),
    "dlq": ("4",),
    "dlq_causes": ("4", "g"),
    "diagnostics": ("5",),
    "check_detail": ("5", "enter"),
    "help": ("2", "question_mark"),
}


async def _fixed_findings(min_age_s: float = 0.0):
    return fixed_findings()


@pytest.mark.parametrize("size", [pytest.param(NARROW, id="80x24"),
                                  pytest.param(MEDIUM, id="120x35")])
@pytest.mark.parametrize("screen", list(SCREEN_KEYS))
def test_screen_snapshot(database_url, db, snap_compare, screen, size):
    seed_system(db)
    app = console(database_url)
    app.reader.diagnostics = _fixed_findings
    assert snap_compare(app, terminal_size=size, run_before=keys(*SCREEN_KEYS[screen]))
