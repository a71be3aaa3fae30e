"""Never crash: unmigrated, unreachable, a lost connection, a huge queue; read-only refuses."""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import awa
from awa import schema
from tui.conftest import press, running_console, screen_text, seed_system


async def test_unmigrated_database_says_how_to_migrate_then_recovers(empty_database_url):
    async with running_console(empty_database_url) as (app, pilot):
        text = screen_text(app)
        assert "run `awa migrate`" in text
        assert "no awa schema" in text
        await press(app, pilot, "2")
        assert "run `awa migrate`" in screen_text(app)
        with psycopg.connect(empty_database_url, autocommit=True) as conn:
            schema.migrate_sync(conn)
        await app.refresh_now()
        await press(app, pilot, "1")
        assert app.problem is None
        assert "awa migrate" not in screen_text(app)


async def test_unreachable_database_is_a_banner_not_a_crash(admin_url):
    url = make_conninfo(admin_url, port="1", dbname="nowhere")
    async with running_console(url) as (app, pilot):
        text = screen_text(app)
        assert "cannot connect to" in text and "retrying every 2s" in text
        await press(app, pilot, "3", "4", "5", "2")
        assert "cannot connect to" in screen_text(app)


async def test_lost_connection_shows_a_banner_and_reconnects(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        assert app.problem is None
        killed = db.execute(
            "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
            "WHERE application_name = 'awa-tui' AND datname = current_database()").fetchall()
        assert killed == [{"ok": True}]
        await app.refresh_now()
        await press(app, pilot)
        assert "lost the database connection" in screen_text(app)
        assert "reconnecting every 2s" in screen_text(app)
        await app.refresh_now()
        await press(app, pilot)
        assert app.problem is None
        assert "worker-a" in screen_text(app)
        assert db.execute("SELECT count(*) AS n FROM pg_stat_activity "
                          "WHERE application_name = 'awa-tui' "
                          "AND datname = current_database()").fetchone()["n"] == 1


async def test_a_huge_queue_is_counted_up_to_a_cap(database_url):
    async with awa.AsyncClient(database_url) as client:  # through the engine: any layout
        await client.insert_many([{} for _ in range(60)], kind="bulk", queue="big")
    async with running_console(database_url) as (app, pilot):
        app.reader.count_cap = 25
        await app.refresh_now()
        await press(app, pilot)
        row = app.screen.query_one("#queues").get_row_at(0)
        assert row[0] == "big" and row[1] == "25+"


# Acts on (or diagnoses) rows seed_system / add_* arrange in the canonical tables at
# fixed-clock ages; the engines' own behaviour is checked in tests/storage.
@pytest.mark.engine("canonical")
async def test_read_only_session_refuses_every_action_in_postgresql(database_url, db):
    """--read-only: a mutating key says so in one line without asking (issue 17 item 6);
    underneath, the session itself is read-only, so PostgreSQL still refuses any write."""
    ids = seed_system(db)
    async with running_console(database_url, read_only=True) as (app, pilot):
        assert "READ-ONLY" in screen_text(app)
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        table.move_cursor(row=[str(c) for c in table.get_column("id")].index(str(ids["alive"])))
        await press(app, pilot, "c")
        text = screen_text(app)
        assert "cancel: not available: the console is read-only (--read-only)" in text
        assert "Cancel job(s)" not in text  # no confirmation was asked
        assert db.execute("SELECT state::text FROM awa.jobs WHERE id = %s",
                          [ids["alive"]]).fetchone()["state"] == "running"
        await press(app, pilot, "1", "p")
        shown = screen_text(app)
        assert "read-only (--read-only)" in shown and "Pause queue" not in shown
        await press(app, pilot, "4", "x")
        assert "DLQ purge: not available" in screen_text(app)
        await press(app, pilot, "m")
        assert "DLQ move: not available" in screen_text(app)
        # the database enforces it too: the actions themselves are refused by the server
        await app.perform("cancel", lambda a: a.cancel_jobs([ids["alive"]]))
        # canonical rewrites the row (UPDATE); queue storage appends a closure (INSERT)
        assert re.search(r"cancel refused by the read-only session: cannot execute "
                         r"(UPDATE|INSERT|SELECT) in a read-only transaction", screen_text(app))
        assert db.execute("SELECT state::text FROM awa.jobs WHERE id = %s",
                          [ids["alive"]]).fetchone()["state"] == "running"
        await app.perform("pause email", lambda a: a.pause("email"))
        assert "cannot execute INSERT in a read-only transaction" in screen_text(app)
        assert db.execute("SELECT count(*) AS n FROM awa.queue_meta").fetchone()["n"] == 0
        await app.perform("DLQ purge", lambda a: a.dlq_purge([9001]))
        # the purge is a DELETE inside a counting CTE, so the server names the outer SELECT
        assert ("DLQ purge refused by the read-only session: cannot execute SELECT in a "
                "read-only transaction") in screen_text(app)
        assert db.execute("SELECT count(*) AS n FROM awa.dlq_entries").fetchone()["n"] == 2
        # the refusal came from the server: the session itself is read-only
        assert db.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'awa-tui' "
            "AND datname = current_database()").fetchone()["n"] == 1
        assert app.session is not None
        async with app.session.conn.cursor() as cur:
            await cur.execute("SHOW default_transaction_read_only")
            assert (await cur.fetchone())["default_transaction_read_only"] == "on"


# The row a cancel of a running attempt must lock, per engine.
ATTEMPT_ROW = {"canonical": "SELECT 1 FROM awa.jobs_hot WHERE id = %s FOR UPDATE",
               "queue_storage": "SELECT 1 FROM awa.leases WHERE job_id = %s FOR UPDATE"}


async def test_an_action_blocked_by_a_lock_times_out_without_losing_the_session(database_url, db,
                                                                                test_engine):
    ids = seed_system(db)
    with psycopg.connect(database_url) as locker:  # a long transaction holding the job's row
        locker.execute(ATTEMPT_ROW[test_engine], [ids["alive"]])
        async with running_console(database_url) as (app, pilot):
            await press(app, pilot, "2")
            table = app.screen.query_one("#running")
            table.move_cursor(row=[str(c) for c in table.get_column("id")].index(str(ids["alive"])))
            await press(app, pilot, "c", "y")
            assert "cancel failed, nothing changed: canceling statement due to lock timeout" \
                in screen_text(app)
            assert app.problem is None and app.session is not None  # still connected
        locker.rollback()
    assert db.execute("SELECT state::text FROM awa.jobs WHERE id = %s",
                      [ids["alive"]]).fetchone()["state"] == "running"
