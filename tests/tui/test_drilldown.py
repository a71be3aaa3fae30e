"""Drill-down: job detail shows every attempt's error with its traceback, progress,
metadata and the callback it waits on; only the actions that apply to the job's state
are offered; ``:`` opens a job by id from any screen; ``awa job dump`` shows tracebacks."""

from __future__ import annotations

import pytest

from awa.admin import render_dump
from tui.conftest import (
    MEDIUM,
    NARROW,
    add_job,
    at,
    press,
    running_console,
    screen_text,
    seed_system,
)

SIZES = [pytest.param(NARROW, id="80x24"), pytest.param(MEDIUM, id="120x35")]
TRACEBACK = ('Traceback (most recent call last):\n'
             '  File "/srv/app/imports.py", line 42, in parse_upload\n'
             '    raise ValueError(f"{name}: unexpected byte")\n'
             'ValueError: upload-15.csv: unexpected byte 0xff at offset 1337')


def failed_with_traceback(db) -> int:
    return add_job(db, state="failed", kind="parse_upload", queue="imports", attempt=2,
                   max_attempts=2, finalized=at(-10), metadata={"tenant": "acme"},
                   progress={"percent": 40, "message": "row 400 of 1000", "cursor": 400},
                   errors=[{"error": "upload-15.csv: unexpected byte", "attempt": 1,
                            "at": at(-60).isoformat(), "traceback": TRACEBACK},
                           {"error": "upload-15.csv: unexpected byte", "attempt": 2,
                            "at": at(-10).isoformat(), "terminal": True,
                            "traceback": TRACEBACK}])


def detail_text(app) -> str:
    return str(app.screen.query_one("#detail").render())


def footer(app, size) -> str:
    return screen_text(app).splitlines()[size[1] - 1]


async def open_job(app, pilot, job_id: int) -> None:
    await press(app, pilot, "colon", *str(job_id), "enter")


@pytest.mark.parametrize("size", SIZES)
async def test_job_detail_shows_tracebacks_progress_metadata_and_callback(database_url, db, size):
    job = failed_with_traceback(db)
    waiting = add_job(db, state="waiting_external", kind="await_payment", queue="payments",
                      attempt=1)
    db.execute("""UPDATE awa.jobs SET callback_id = '6f1c1b9e-0000-4000-8000-000000000001',
                      callback_timeout_at = %s, callback_filter = 'payload.status != ""',
                      callback_on_complete = 'payload.status == "paid"',
                      callback_on_fail = 'payload.status == "declined"',
                      callback_transform = '{"paid": payload.amount}' WHERE id = %s""",
               [at(300), waiting])
    async with running_console(database_url, size=size) as (app, pilot):
        await open_job(app, pilot, job)
        text = detail_text(app)
        assert text.count("traceback:") == 2
        assert 'File "/srv/app/imports.py", line 42, in parse_upload' in text
        assert "ValueError: upload-15.csv: unexpected byte 0xff at offset 1337" in text
        assert "attempt 2 at" in text and "(terminal)" in text
        assert "40% row 400 of 1000" in text and '"cursor": 400' in text
        assert '"tenant": "acme"' in text
        await press(app, pilot, "escape")
        await open_job(app, pilot, waiting)
        text = detail_text(app)
        for line in ("id           6f1c1b9e-0000-4000-8000-000000000001",
                     'filter       payload.status != ""',
                     'on complete  payload.status == "paid"',
                     'on fail      payload.status == "declined"',
                     'transform    {"paid": payload.amount}',
                     "times out    2026-01-15 12:05:00 UTC"):
            assert line in text


@pytest.mark.parametrize("size", SIZES)
async def test_only_the_actions_that_apply_to_the_state_are_offered(database_url, db, size):
    ids = seed_system(db)
    completed = add_job(db, state="completed", kind="report", attempt=1, finalized=at(-5))
    async with running_console(database_url, size=size) as (app, pilot):
        await open_job(app, pilot, completed)
        assert "Cancel" not in footer(app, size) and "Retry" not in footer(app, size)
        assert "none apply to this job's state" in detail_text(app)
        await press(app, pilot, "c")
        text = screen_text(app)
        assert f"cancel: not offered for job {completed}: it is completed already" in text
        assert "Cancel job(s)" not in text  # nothing was asked
        await press(app, pilot, "escape")
        await open_job(app, pilot, ids["alive"])  # running: cancel, never retry
        assert "c Cancel" in footer(app, size) and "Retry" not in footer(app, size)
        await press(app, pilot, "r")
        assert "retry: not offered" in screen_text(app) and "it is running" in screen_text(app)
        await press(app, pilot, "escape")
        await open_job(app, pilot, ids["failed"])  # failed: retry, no cancel
        assert "r Retry" in footer(app, size) and "Cancel" not in footer(app, size)
        await press(app, pilot, "r")
        assert f"Retry job(s) {ids['failed']} from scratch?" in screen_text(app)
        await press(app, pilot, "n", "escape")
        await open_job(app, pilot, ids["dlq"])  # in the DLQ: retry from the DLQ only
        assert "r Retry" in footer(app, size) and "Cancel" not in footer(app, size)
        await press(app, pilot, "r")
        assert f"Retry DLQ job(s) {ids['dlq']}?" in screen_text(app)


async def test_colon_jumps_to_a_job_from_any_screen(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url, size=NARROW) as (app, pilot):
        for key in ("1", "2", "3", "4", "5"):
            await press(app, pilot, key)
            await open_job(app, pilot, ids["stale"])
            assert f"job {ids['stale']}  kind report" in detail_text(app)
            await press(app, pilot, "escape")
        await press(app, pilot, "colon", "x", "y", "enter")
        assert "'xy' is not a job id" in screen_text(app)
        await open_job(app, pilot, 987654)
        assert "job 987654 does not exist" in detail_text(app)


def test_job_dump_shows_every_traceback_and_the_callback():
    row = {"id": 7, "kind": "parse_upload", "queue": "imports", "state": "failed", "attempt": 2,
           "max_attempts": 2, "priority": 2, "run_lease": 2, "args": {}, "tags": [],
           "metadata": {}, "unique_key": None, "progress": None,
           "callback_id": "6f1c1b9e-0000-4000-8000-000000000001", "callback_timeout_at": at(60),
           "callback_filter": None, "callback_on_complete": 'payload.ok', "callback_on_fail": None,
           "callback_transform": None,
           "errors": [{"error": "boom", "attempt": 1, "at": "t1", "traceback": TRACEBACK},
                      {"error": "boom", "attempt": 2, "at": "t2", "terminal": True}]}
    text = render_dump(row)
    assert ("  attempt 1 at t1: boom\n    traceback:\n"
            "      Traceback (most recent call last):") in text
    assert '      File "/srv/app/imports.py", line 42, in parse_upload' in text
    assert "  attempt 2 at t2 [terminal]: boom" in text and text.count("traceback:") == 1
    assert "  on_complete: payload.ok" in text
