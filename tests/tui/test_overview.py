"""Overview: queues, runtimes with the LEADER marker, the no-leader banner, DLQ depth and
diagnostics."""

from __future__ import annotations

import pytest

from tui.conftest import MEDIUM, NARROW, add_runtime, at, running_console, screen_text, seed_system


async def test_overview_shows_queues_leader_dlq_and_diagnostic_status(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        text = screen_text(app)
        queues = app.screen.query_one("#queues")
        rows = {queues.get_row_at(i)[0]: queues.get_row_at(i) for i in range(queues.row_count)}
        # Queue, Avail, Sched, Retry, Run, Wait, Failed, DLQ, Lag, ...
        assert rows["email"][1:7] == ["3", "0", "1", "2", "0", "1"]
        assert str(rows["email"][7]) == "1"  # DLQ
        assert rows["email"][8] == "40s"  # oldest available job was created at T0-40s
        assert rows["default"][2] == "1" and rows["default"][4] == "1"
        assert rows["images"][4] == "1"
        assert "★ LEADER" in text and "worker-a" in text
        assert "gone" in text and "worker-c" in text
        assert "DLQ depth 2" in text
        assert "leader worker-a:101" in text
        assert app.diagnostic_status in ("WARNING", "CRITICAL")
        assert f"diagnostics {app.diagnostic_status}" in text
        assert "NO LEADER" not in text


async def test_banner_when_no_live_runtime_holds_leadership(database_url, db):
    add_runtime(db, host="worker-a", pid=101, leader=False)
    add_runtime(db, host="old-leader", pid=9, leader=True, last_seen=None, snapshot_interval_ms=10)
    async with running_console(database_url) as (app, pilot):
        text = screen_text(app)
        assert "NO LEADER" in text
        assert "leader NONE" in text
        assert "★ LEADER" not in text  # the old leader's row is gone, not leading


async def test_banner_when_no_runtime_is_alive_on_an_empty_database(database_url):
    async with running_console(database_url) as (app, pilot):
        text = screen_text(app)
        assert "NO LIVE RUNTIME" in text
        assert "DLQ depth 0" in text
        assert app.problem is None


async def test_throughput_sparkline_grows_one_point_per_refresh(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        before = len(app.reader.throughput.of("default"))
        await app.refresh_now()
        await app.refresh_now()
        default = next(q for q in app.screen.data.queues if q.queue == "default")
        assert len(default.throughput) == before + 2
        # Completions at T0-1s..T0-4s; the first window is (T0-2s, T0]: one job in 2 s.
        assert default.throughput[0] == 0.5
        assert set(default.throughput[1:]) == {0.0}  # the clock stands still: nothing new


@pytest.mark.parametrize("size", [NARROW, MEDIUM])
async def test_runtimes_live_first_then_gone_greyed_with_last_seen_age(database_url, db, size):
    add_runtime(db, host="dead-old", pid=7, last_seen=at(-3 * 3600))
    add_runtime(db, host="live-b", pid=2)
    add_runtime(db, host="dead-new", pid=8, last_seen=at(-125))
    add_runtime(db, host="live-a", pid=1, leader=True)
    async with running_console(database_url, size=size) as (app, pilot):
        table = app.screen.query_one("#runtimes")
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        hosts = [str(r[1]) for r in rows]
        assert set(hosts[:2]) == {"live-a", "live-b"}  # live first
        assert hosts[2:] == ["dead-new", "dead-old"]  # then gone, most recently seen first
        for row in rows[2:]:
            assert str(row[0]) == "gone"
            assert all(cell.style == "dim" for cell in row[1:3])  # greyed
            assert "gone" in [str(c) for c in row]  # health reads gone, never "ok"
            assert "ok" not in [str(c) for c in row]
        seen = table.shown_keys().index("seen")
        assert str(rows[2][seen]) == "2m05s ago" and str(rows[3][seen]).startswith("3h")


async def test_no_banner_while_a_runtime_holds_the_leader_lock(database_url, db):
    """A new leader's flag reaches the registry only with its next snapshot; the lock is
    held already, so the console raises no false NO LEADER alarm, and the only live runtime
    (the only one that can hold it) reads LEADER, not worker."""
    import psycopg

    from awa import config

    def roles(app) -> dict[str, str]:
        table = app.screen.query_one("#runtimes")
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        return {str(r[1]): str(r[0]) for r in rows}

    add_runtime(db, host="worker-a", pid=101, leader=False)
    with psycopg.connect(database_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [config.ADVISORY_LOCK_LEADER])
        async with running_console(database_url) as (app, pilot):
            text = screen_text(app)
            assert "NO LEADER" not in text and app.problem is None
            assert "leader worker-a:101" in text
            assert roles(app) == {"worker-a": "★ LEADER"}
        # Two live runtimes, neither flagged yet, and a holder that does not name its
        # runtime (an older one's bare application_name): neither is named, and the summary
        # says so rather than guess.
        add_runtime(db, host="worker-b", pid=202, leader=False)
        pid = holder.info.backend_pid
        async with running_console(database_url) as (app, pilot):
            text = screen_text(app)
            assert "NO LEADER" not in text
            assert f"leader unknown (lock held by backend pid {pid}, which does not name its " \
                   "runtime)" in text, text
            assert roles(app) == {"worker-a": "worker", "worker-b": "worker"}
    db.execute("DELETE FROM awa.runtime_instances WHERE hostname = 'worker-b'")
    async with running_console(database_url) as (app, pilot):  # the lock released
        assert "NO LEADER" in screen_text(app)
        assert roles(app) == {"worker-a": "worker"}


async def test_the_lock_holder_that_names_its_runtime_is_the_leader(database_url, db):
    """Several live runtimes at start, none flagged yet: the lock connection names its
    runtime (``awa-leader <instance id>``, as our runtimes open it), so the console names
    that one LEADER; a holder naming a runtime not registered yet is said so."""
    import psycopg

    from awa import config
    from awa.runtime.leader import leader_application_name

    def roles(app) -> dict[str, str]:
        table = app.screen.query_one("#runtimes")
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        return {str(r[1]): str(r[0]) for r in rows}

    add_runtime(db, host="worker-a", pid=101)
    b = add_runtime(db, host="worker-b", pid=202)
    add_runtime(db, host="worker-c", pid=303)
    with psycopg.connect(database_url, autocommit=True,
                         application_name=leader_application_name(b)) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [config.ADVISORY_LOCK_LEADER])
        async with running_console(database_url) as (app, pilot):
            text = screen_text(app)
            assert "NO LEADER" not in text and "leader worker-b:202" in text, text
            assert roles(app) == {"worker-a": "worker", "worker-b": "★ LEADER",
                                  "worker-c": "worker"}
    unregistered = "0b7e1c2d-0000-4000-8000-000000000001"
    with psycopg.connect(database_url, autocommit=True,
                         application_name=leader_application_name(unregistered)) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [config.ADVISORY_LOCK_LEADER])
        async with running_console(database_url) as (app, pilot):
            text = screen_text(app)
            assert "NO LEADER" not in text
            assert "leader unknown (lock held by runtime 0b7e1c2d, not registered yet)" in text
            assert "★ LEADER" not in text


async def test_a_rolling_upgrade_reads_as_a_mixed_fleet(database_url, db):
    """Each runtime's release and layout in Version, and "mixed fleet" in the summary while
    more than one is live (diagnose runtime's rule); a gone runtime does not count."""
    add_runtime(db, host="old", pid=1, leader=True)  # a release before versions were recorded
    add_runtime(db, host="new", pid=2, schema_version=7, layout_version=8)
    add_runtime(db, host="gone", pid=3, last_seen=at(-3600), schema_version=6)
    async with running_console(database_url) as (app, pilot):
        table = app.screen.query_one("#runtimes")
        version = table.shown_keys().index("version")
        seen = {str(table.get_row_at(i)[1]): str(table.get_row_at(i)[version])
                for i in range(table.row_count)}
        assert seen == {"old": "0.1.0 L?", "new": "0.1.0 L8", "gone": "0.1.0 S6"}
        assert ("mixed fleet 1 on 0.1.0, layout 8, 1 on 0.1.0, layout not recorded"
                in screen_text(app))
        db.execute("UPDATE awa.runtime_instances SET last_seen_at = %s WHERE hostname = 'old'",
                   [at(-3600)])
        await app.refresh_now()
        assert "mixed fleet" not in screen_text(app)
