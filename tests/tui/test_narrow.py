"""Narrow terminals: at 80x24 and 120x35 every screen keeps the columns it exists for,
the footer keeps ``?`` and ``q``, and help scrolls instead of being cut off."""

from __future__ import annotations

import pytest

from awa_tui.screens.base import Column, fit_columns
from tui.conftest import (
    MEDIUM,
    NARROW,
    fixed_findings,
    press,
    running_console,
    screen_text,
    seed_system,
)

SIZES = [pytest.param(NARROW, id="80x24"), pytest.param(MEDIUM, id="120x35")]

# What each screen is opened for: these survive an 80-column terminal.
KEY_COLUMNS = {
    "2": ("#running", {"id", "kind", "status", "heartbeat", "deadline", "running"}),
    "1": ("#queues", {"queue", "available", "running", "failed", "dlq", "lag", "paused"}),
    "3": ("#jobs", {"id", "kind", "state"}),
    "4": ("#dlq", {"id", "kind", "error"}),
    "5": ("#checks", {"check", "status", "summary"}),
}


def test_columns_give_way_by_priority_and_fill_the_room_they_need():
    columns = [Column("a", "A", 0, width=10), Column("b", "B", 2, width=10),
               Column("c", "C", 1, min_width=5, max_width=30)]
    shown, caps = fit_columns(columns, 30, wanted={"c": 12})
    assert [c.key for c in shown] == ["a", "c"]  # b (priority 2) went first
    assert caps == {"c": 12}  # grown to what its values need, not to all the room
    shown, caps = fit_columns(columns, 200, wanted={"c": 100})
    assert [c.key for c in shown] == ["a", "b", "c"] and caps == {"c": 30}


@pytest.mark.parametrize("size", SIZES)
async def test_every_screen_keeps_its_key_columns_and_the_footer_keeps_help_and_quit(
        database_url, db, size):
    seed_system(db)
    async with running_console(database_url, size=size) as (app, pilot):
        app.reader.diagnostics = _fixed  # type: ignore[method-assign]
        for key, (table_id, wanted) in KEY_COLUMNS.items():
            await press(app, pilot, key)
            table = app.screen.query_one(table_id)
            shown = set(table.shown_keys())
            assert wanted <= shown, f"screen {key} at {size} lost {wanted - shown}"
            # nothing runs off the right edge: the table fits the terminal
            assert sum(c.get_render_width(table) for c in table.ordered_columns) <= size[0]
            lines = screen_text(app).splitlines()
            footer = lines[size[1] - 1]
            assert "? Help" in footer and "q Quit" in footer, footer
        if size == NARROW:
            await press(app, pilot, "2")
            header = screen_text(app).splitlines()[2]
            for label in ("Status", "Job", "Kind", "Running", "Heartbeat age", "Deadline in"):
                assert label in header
            assert "Runtime" not in header  # gave way


async def _fixed(min_age_s: float = 0.0):
    return fixed_findings()


@pytest.mark.parametrize("size", SIZES)
async def test_running_rows_show_heartbeat_and_deadline_at_every_size(database_url, db, size):
    ids = seed_system(db)
    async with running_console(database_url, size=size) as (app, pilot):
        await press(app, pilot, "2")
        text = screen_text(app)
        row = next(line for line in text.splitlines() if f" {ids['overdue']} " in line)
        assert "-15s" in row and "6m40s" in row and "3s" in row


async def test_a_resize_drops_and_restores_columns(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        assert "runtime" in table.shown_keys() and table.row_count == 4
        await pilot.resize_terminal(*NARROW)
        await press(app, pilot)
        assert "runtime" not in table.shown_keys() and table.row_count == 4
        assert {"heartbeat", "deadline", "running"} <= set(table.shown_keys())
        await pilot.resize_terminal(160, 45)
        await press(app, pilot)
        assert "runtime" in table.shown_keys() and table.row_count == 4


@pytest.mark.parametrize("size", SIZES)
async def test_help_fits_and_scrolls(database_url, db, size):
    seed_system(db)
    async with running_console(database_url, size=size) as (app, pilot):
        await press(app, pilot, "2", "question_mark")
        text = screen_text(app)
        assert "Running: keys" in text
        help_box = app.screen.query_one("#help")
        assert help_box.region.right <= size[0]
        if size == NARROW:
            assert help_box.max_scroll_y > 0  # longer than the box: it scrolls
            await press(app, pilot, "end")
            assert help_box.scroll_y == help_box.max_scroll_y
        assert "runs with --read-only" in screen_text(app)  # the last line can be read
        await press(app, pilot, "escape")
        assert "Running: keys" not in screen_text(app)


@pytest.mark.parametrize("size", SIZES)
async def test_read_only_hides_mutating_keys_and_lists_them_in_help(database_url, db, size):
    seed_system(db)
    async with running_console(database_url, size=size, read_only=True) as (app, pilot):
        for key, hidden in (("1", "Pause"), ("2", "Cancel"), ("3", "Retry"), ("4", "Purge")):
            await press(app, pilot, key)
            footer = screen_text(app).splitlines()[size[1] - 1]
            assert hidden not in footer and "? Help" in footer and "q Quit" in footer
        await press(app, pilot, "4", "question_mark")
        help_text = str(app.screen.query_one("#help-text").render())
        assert "Unavailable (read-only session)" in help_text
        for line in ("r        retry", "x        purge", "m        move failed→dlq"):
            assert line in help_text
        await press(app, pilot, "escape", "r")
        line = next(l for l in screen_text(app).splitlines() if "DLQ retry" in l)
        assert line.strip() == "DLQ retry: not available: the console is read-only (--read-only)"


@pytest.mark.parametrize("size", SIZES)
async def test_overview_shows_five_queues_and_paused_with_many_runtimes(database_url, db, size):
    from tui.conftest import add_job, add_runtime, at
    for n, queue in enumerate(("email", "reports", "payments", "imports", "crawler")):
        add_job(db, kind="k", queue=queue)
        add_runtime(db, host=f"live-{n}", pid=n + 1, leader=n == 0, queues=[queue])
    for n in range(12):  # the demo's SIGKILLed workers pile up
        add_runtime(db, host=f"dead-{n}", pid=100 + n, last_seen=at(-600 - n))
    db.execute("INSERT INTO awa.queue_meta (queue, paused, paused_by) "
               "VALUES ('crawler', true, 'alice')")
    async with running_console(database_url, size=size) as (app, pilot):
        text = screen_text(app)
        for queue in ("email", "reports", "payments", "imports", "crawler"):
            assert queue in text, text
        assert "PAUSED" in next(line for line in text.splitlines() if "crawler" in line)
        runtimes = app.screen.query_one("#runtimes")
        assert [str(runtimes.get_row_at(i)[0]) for i in range(5)].count("gone") == 0  # live first
