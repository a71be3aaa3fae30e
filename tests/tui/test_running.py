"""Running: classes and colours, ages ticking between refreshes, sort, filter, --min-age, cancel."""

from __future__ import annotations

import pytest

from tui.conftest import add_running, add_runtime, press, running_console, screen_text, seed_system


def column(table, key: str) -> list[str]:
    return [str(cell) for cell in table.get_column(key)]


async def test_every_running_attempt_is_classified(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        status = dict(zip(column(table, "id"), column(table, "status")))
        assert status == {str(ids["alive"]): "alive", str(ids["stale"]): "stale",
                          str(ids["overdue"]): "overdue", str(ids["orphaned"]): "orphaned"}
        runtime = dict(zip(column(table, "id"), column(table, "runtime")))
        assert runtime[str(ids["alive"])] == "worker-a:101 +1"
        assert runtime[str(ids["orphaned"])] == "none"  # nobody serves queue "images"
        text = screen_text(app)
        assert "4 running: 1 overdue, 1 orphaned, 1 stale, 1 alive" in text
        deadline = dict(zip(column(table, "id"), column(table, "deadline")))
        assert deadline[str(ids["overdue"])] == "-15s"
        assert deadline[str(ids["alive"])] == "4m00s"


async def test_ages_tick_between_refreshes_and_an_attempt_turns_stale(database_url, db):
    ids = seed_system(db)
    # Without a dead runtime that served its queue, a silent attempt is "stale", not "orphaned".
    db.execute("DELETE FROM awa.runtime_instances WHERE hostname = 'worker-c'")
    async with running_console(database_url, stale_after_s=90) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        statements = app.reader.statements
        app.clock.advance(89)  # heartbeat 2 s old -> 91 s old, without reading the database
        app.tick()
        await pilot.pause()
        heartbeat = dict(zip(column(table, "id"), column(table, "heartbeat")))
        status = dict(zip(column(table, "id"), column(table, "status")))
        assert heartbeat[str(ids["alive"])] == "1m31s"
        assert status[str(ids["alive"])] == "stale"
        assert app.reader.statements == statements


async def test_a_worker_gone_makes_its_attempt_orphaned(database_url, db):
    ids = seed_system(db)
    db.execute("UPDATE awa.runtime_instances SET last_seen_at = last_seen_at - interval '1 hour'"
               " WHERE hostname IN ('worker-a', 'worker-b')")
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        status = dict(zip(column(table, "id"), column(table, "status")))
        runtime = dict(zip(column(table, "id"), column(table, "runtime")))
        assert status[str(ids["alive"])] == "orphaned"
        assert runtime[str(ids["alive"])].endswith("(gone)")


async def test_sort_by_any_column_and_reverse(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        # default: oldest heartbeat first
        assert column(table, "id")[0] == str(ids["stale"])
        await press(app, pilot, "s")  # heartbeat -> deadline
        assert app.screen.sort_key == "deadline"
        assert column(table, "id")[0] == str(ids["overdue"])
        await press(app, pilot, "s")  # deadline -> status (wraps)
        assert app.screen.sort_key == "status"
        assert column(table, "status") == ["overdue", "orphaned", "stale", "alive"]
        await press(app, pilot, "S")
        assert column(table, "status") == ["alive", "stale", "orphaned", "overdue"]
        await press(app, pilot, "s")  # status -> id, still reversed
        assert column(table, "id") == sorted(column(table, "id"), key=int, reverse=True)
        assert "sort: id desc" in screen_text(app)


async def test_slash_filters_rows(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2", "slash")
        await pilot.press(*"report")
        await press(app, pilot, "enter")
        table = app.screen.query_one("#running")
        assert column(table, "id") == [str(ids["stale"])]
        assert "filter: 'report'" in screen_text(app)
        await press(app, pilot, "slash", "ctrl+u", "enter")  # clear it
        assert table.row_count == 4


async def test_min_age_hides_young_attempts(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url, min_age_s=300) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        assert sorted(column(table, "id"), key=int) == [str(ids["stale"]), str(ids["overdue"])]
        assert "min age 5m00s" in screen_text(app)


# Acts on (or diagnoses) rows seed_system / add_* arrange in the canonical tables at
# fixed-clock ages; the engines' own behaviour is checked in tests/storage.
@pytest.mark.engine("canonical")
async def test_cancel_asks_first_and_then_cancels(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        table.move_cursor(row=column(table, "id").index(str(ids["alive"])))
        await press(app, pilot, "c")
        assert "Cancel job(s)" in screen_text(app)
        await press(app, pilot, "n")
        assert db.execute("SELECT state FROM awa.jobs WHERE id = %s",
                          [ids["alive"]]).fetchone()["state"] == "running"
        assert "cancel: not done" in screen_text(app)
        await press(app, pilot, "c", "y")
        assert db.execute("SELECT state FROM awa.jobs WHERE id = %s",
                          [ids["alive"]]).fetchone()["state"] == "cancelled"
        assert f"cancelled 1 job(s): {ids['alive']}" in screen_text(app)
        assert str(ids["alive"]) not in column(table, "id")


# Acts on (or diagnoses) rows seed_system / add_* arrange in the canonical tables at
# fixed-clock ages; the engines' own behaviour is checked in tests/storage.
@pytest.mark.engine("canonical")
async def test_space_tags_rows_for_a_bulk_cancel(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        table.move_cursor(row=0)
        await press(app, pilot, "space", "space")  # tags rows 0 and 1, cursor moves down
        tagged = column(table, "id")[:2]
        assert column(table, "tag")[:2] == ["●", "●"]
        await press(app, pilot, "c", "y")
        states = {r["id"]: r["state"] for r in db.execute(
            "SELECT id, state::text FROM awa.jobs WHERE state IN ('running', 'cancelled')")}
        assert {states[int(i)] for i in tagged} == {"cancelled"}
        assert sum(1 for s in states.values() if s == "running") == 2


async def test_each_attempt_is_judged_by_its_runtimes_own_timing(database_url, db):
    """Staleness and the overdue grace (one heartbeat interval) are the published values of
    the runtimes serving the attempt's queue, not one console-wide cutoff; --stale-after
    overrides the staleness."""
    add_runtime(db, host="fast-w", pid=1, queues=["fast"], snapshot_interval_ms=60_000,
                timing={"heartbeat_interval_ms": 1_000, "heartbeat_staleness_ms": 6_000})
    add_runtime(db, host="slow-w", pid=2, queues=["slow"], snapshot_interval_ms=60_000,
                timing={"heartbeat_interval_ms": 30_000, "heartbeat_staleness_ms": 90_000})
    ids = {"fast_silent": add_running(db, queue="fast", heartbeat_age=10),
           "slow_silent": add_running(db, queue="slow", heartbeat_age=10),
           "fast_late": add_running(db, queue="fast", heartbeat_age=0.5, deadline_in=-3),
           "slow_late": add_running(db, queue="slow", heartbeat_age=0.5, deadline_in=-3)}
    expected = {"fast_silent": "stale", "slow_silent": "alive",
                "fast_late": "overdue", "slow_late": "alive"}
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2")
        status = dict(zip(column(app.screen.query_one("#running"), "id"),
                          column(app.screen.query_one("#running"), "status")))
        assert {name: status[str(i)] for name, i in ids.items()} == expected
        app.clock.advance(25)  # past the slow runtime's grace: its late job is overdue now
        app.tick()
        await pilot.pause()
        status = dict(zip(column(app.screen.query_one("#running"), "id"),
                          column(app.screen.query_one("#running"), "status")))
        assert status[str(ids["slow_late"])] == "alive"  # 28 s past: within 30 s
        app.clock.advance(5)
        app.tick()
        await pilot.pause()
        status = dict(zip(column(app.screen.query_one("#running"), "id"),
                          column(app.screen.query_one("#running"), "status")))
        assert status[str(ids["slow_late"])] == "overdue"
    async with running_console(database_url, stale_after_s=120) as (app, pilot):
        await press(app, pilot, "2")
        status = dict(zip(column(app.screen.query_one("#running"), "id"),
                          column(app.screen.query_one("#running"), "status")))
        assert status[str(ids["fast_silent"])] == "alive"  # the flag overrides
        assert status[str(ids["fast_late"])] == "overdue"  # the grace stays its own
