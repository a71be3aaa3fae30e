"""Console input you can trust (issue 46 part 5): keys typed at typing speed, or pasted,
act on the screen that is showing when each is read; a filter or a prompt never turns
into Quit; number keys leave any detail view; the Jobs list at the top follows the newest
rows; "updated" is the time of the last successful read.

Keys go in as a terminal sends them: each at its own moment, whether or not the console
has finished with the one before (``type_keys``); gap 0 is a paste, every key at once.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC

import psycopg
import pytest
from textual import events

import awa
from awa_tui.screens.detail import JobDetailScreen
from awa_tui.screens.dlq import DlqScreen
from awa_tui.screens.jobs import JobsScreen
from awa_tui.screens.overview import OverviewScreen
from awa_tui.screens.running import RunningScreen
from awa_tui.widgets import FilterBar
from tui.conftest import press, running_console, screen_text, settle

# A paste (every key at once) and a quick typist (a key every 30 ms).
GAPS = [pytest.param(0.0, id="pasted"), pytest.param(0.03, id="typed")]
KEY_NAMES = {"/": "slash", "=": "equals_sign", ":": "colon", "\r": "enter", " ": "space"}


async def type_keys(app, text: str, gap_s: float) -> None:
    """``text`` as a terminal delivers it: one key event per character, ``gap_s`` apart
    (``\\r`` is enter), without waiting for the console to finish with each."""
    for char in text:
        app.post_message(events.Key(KEY_NAMES.get(char, char), char))
        if gap_s:
            await asyncio.sleep(gap_s)


async def caught_up(app, pilot) -> None:
    """Let the console finish with what was typed (and the reads it started): the keys
    still waiting are read by workers, which ``settle`` waits for; twice, for the reads
    the last keys started."""
    for _ in range(2):
        await settle(app, pilot)


async def insert(database_url: str, queue: str, n: int, kind: str = "typed") -> list[int]:
    """``n`` jobs through the engine (any storage layout); their ids, oldest first."""
    async with awa.AsyncClient(database_url) as client:
        jobs = await client.insert_many([{"n": i} for i in range(n)], kind=kind, queue=queue)
    return sorted(job.id for job in jobs)


def shown_ids(app) -> list[int]:
    return [int(str(cell)) for cell in app.screen.query_one("#jobs").get_column("id")]


@pytest.mark.parametrize("gap", GAPS)
async def test_a_screen_key_then_its_filter_never_quits(database_url, gap):
    """``3/queue=long`` + enter: the ``/`` opens the Jobs filter (not a key for the
    Overview), ``queue=long`` is typed into it, and its ``q`` never quits."""
    long = await insert(database_url, "long", 3)
    await insert(database_url, "email", 4)
    async with running_console(database_url) as (app, pilot):
        await type_keys(app, "3/queue=long\r", gap)
        await caught_up(app, pilot)
        assert app.return_code is None, "the console quit"
        assert isinstance(app.screen, JobsScreen)
        assert app.screen.flt.queue == "long"
        assert sorted(shown_ids(app)) == long
        assert not app.screen.query_one(FilterBar).display
        assert "queue=long" in screen_text(app)


@pytest.mark.parametrize("gap", GAPS)
async def test_slash_opens_the_filter_of_the_screen_showing(database_url, gap):
    """Right after a screen key, ``/`` and the text go to that screen's filter; from a
    screen without one (the Overview), ``/`` opens the Jobs filter: typed text never
    becomes screen keys (``q`` quits, ``p`` pauses, ``c`` cancels)."""
    await insert(database_url, "email", 2)
    async with running_console(database_url) as (app, pilot):
        for key, screen in (("2", RunningScreen), ("4", DlqScreen), ("3", JobsScreen),
                            ("1", JobsScreen)):
            await type_keys(app, f"{key}/quick cpq", gap)
            await caught_up(app, pilot)
            assert app.return_code is None, "the console quit"
            assert isinstance(app.screen, screen), f"after {key}/: {app.screen}"
            bar = app.screen.query_one(FilterBar)
            assert bar.display and app.focused is bar
            assert bar.value.endswith("quick cpq"), bar.value
            await press(app, pilot, "escape")
        assert "Pause queue" not in screen_text(app) and "Cancel job" not in screen_text(app)


@pytest.mark.parametrize("gap", GAPS)
async def test_number_keys_leave_a_job_detail(database_url, gap):
    """``:`` id enter opens the job over the Overview; ``1`` then shows the Overview
    (not the job under a footer saying Overview), ``3`` the Jobs list, from any detail."""
    job = (await insert(database_url, "email", 2))[-1]
    async with running_console(database_url) as (app, pilot):
        await type_keys(app, f":{job}\r", gap)
        await caught_up(app, pilot)
        assert isinstance(app.screen, JobDetailScreen) and app.screen.job_id == job
        await type_keys(app, "1", gap)
        await caught_up(app, pilot)
        assert isinstance(app.screen, OverviewScreen), app.screen
        assert f"job {job} " not in screen_text(app)
        # the whole round at once: open it, leave it for the Jobs list, open it from there
        await type_keys(app, f":{job}\r3", gap)
        await caught_up(app, pilot)
        assert isinstance(app.screen, JobsScreen), app.screen
        await press(app, pilot, "enter")  # the cursor's job: the newest
        assert isinstance(app.screen, JobDetailScreen) and app.screen.job_id == job
        await type_keys(app, "3", gap)
        await caught_up(app, pilot)
        assert isinstance(app.screen, JobsScreen), app.screen
        await type_keys(app, "1", gap)
        await caught_up(app, pilot)
        assert isinstance(app.screen, OverviewScreen), app.screen
        assert len(app.screen_stack) == 1
        # the DLQ's causes view is a detail too: 2 leaves it, 4 then shows the DLQ list
        await type_keys(app, "4g", gap)
        await caught_up(app, pilot)
        assert app.screen.TITLE == "DLQ causes"
        await type_keys(app, "2", gap)
        await caught_up(app, pilot)
        assert isinstance(app.screen, RunningScreen), app.screen
        await type_keys(app, "4", gap)
        await caught_up(app, pilot)
        assert type(app.screen) is DlqScreen and len(app.screen_stack) == 1


async def test_jobs_list_at_the_top_follows_the_newest_rows(database_url):
    """Filtered by queue, with the cursor on the top row, each read shows the newest jobs
    at the top, however many arrived; read lower down, the cursor stays on its job, and
    Home goes back to the newest rows (read again, not the page from the last read)."""
    await insert(database_url, "email", 30)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3", "slash")  # one key at a time: this test is not about typing
        app.screen.query_one(FilterBar).value = "queue=email"
        await press(app, pilot, "enter")
        table = app.screen.query_one("#jobs")
        assert table.cursor_row == 0
        newer = await insert(database_url, "email", 80)
        await insert(database_url, "other", 5)
        await app.refresh_now()
        await settle(app, pilot)
        assert shown_ids(app)[0] == newer[-1]
        assert table.cursor_row == 0 and table.scroll_y == 0
        assert str(newer[-1]) in screen_text(app)

        await press(app, pilot, "down", "down", "down")
        reading = shown_ids(app)[3]
        await insert(database_url, "email", 5)
        await app.refresh_now()
        await settle(app, pilot)
        assert shown_ids(app)[table.cursor_row] == reading  # where the operator is reading

        newest = (await insert(database_url, "email", 60))[-1]
        await press(app, pilot, "home")
        await caught_up(app, pilot)
        assert table.cursor_row == 0 and table.scroll_y == 0
        assert shown_ids(app)[0] == newest
        assert str(newest) in screen_text(app)


def updated_at(app) -> str:
    found = re.search(r"updated (\d\d:\d\d:\d\d) UTC([^│]*)", screen_text(app))
    assert found, screen_text(app)
    return found.group(1) + found.group(2).rstrip()


async def test_updated_is_the_last_successful_read_and_a_failed_read_shows_its_age(
        database_url, db):
    """The header's "updated" is when the last read succeeded (the database's clock),
    not the local clock ticking on; once a read fails, it says how old the data is."""
    await insert(database_url, "email", 2)
    async with running_console(database_url, clock=None) as (app, pilot):
        await app.refresh_now()
        await settle(app, pilot)
        read_at = app.anchor
        assert read_at is not None
        stamp = read_at.astimezone(UTC).strftime("%H:%M:%S")
        assert updated_at(app) == stamp
        await asyncio.sleep(1.2)
        app.tick()
        app.sync_screen()
        await settle(app, pilot)
        assert updated_at(app) == stamp  # no new read: the same time

        killed = db.execute(
            "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
            "WHERE application_name = 'awa-tui' AND datname = current_database()").fetchall()
        assert killed == [{"ok": True}]
        started = time.monotonic()
        await app.refresh_now()  # fails: the connection is gone
        await settle(app, pilot)
        assert app.problem is not None and "lost the database connection" in app.problem
        shown = updated_at(app)
        assert shown.startswith(stamp + ", "), shown
        age = float(re.search(r", (\d+)s old", shown).group(1))
        assert 1 <= age <= 1.2 + (time.monotonic() - started) + 5
        await asyncio.sleep(1.1)
        app.tick()
        await settle(app, pilot)
        later = float(re.search(r", (\d+)s old", updated_at(app)).group(1))
        assert later >= age + 1  # the age ticks while reads fail

        await app.refresh_now()  # reconnects
        await settle(app, pilot)
        assert app.problem is None
        assert updated_at(app) == app.anchor.astimezone(UTC).strftime("%H:%M:%S")
        assert app.anchor > read_at
        with psycopg.connect(database_url) as conn:  # the database's clock, not ours
            db_now = conn.execute("SELECT now()").fetchone()[0]
        assert abs((db_now - app.anchor).total_seconds()) < 5
