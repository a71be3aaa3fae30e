"""Jobs (filters, drill-down, retry), DLQ (retry, purge, move), diagnostics, keys everywhere."""

from __future__ import annotations

import blake3
import pytest

from tui.conftest import (
    MEDIUM,
    NARROW,
    add_dlq,
    add_job,
    at,
    press,
    running_console,
    screen_text,
    seed_system,
)


def ids_of(table) -> list[int]:
    return [int(str(cell)) for cell in table.get_column("id")]


async def filter_with(app, pilot, text: str) -> None:
    """``/``, the text (set at once: typing it key by key only slows the test), enter."""
    await press(app, pilot, "slash")
    app.screen.query_one("#filter").value = text
    await press(app, pilot, "enter")


async def test_jobs_filters_by_state_kind_queue_and_tag(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3")
        table = app.screen.query_one("#jobs")
        # 3 available, scheduled, retryable, 4 completed, failed, 4 running
        assert table.row_count == 14
        assert ids_of(table) == sorted(ids_of(table), reverse=True)
        await filter_with(app, pilot, "failed")
        assert ids_of(table) == [ids["failed"]]
        await filter_with(app, pilot, "state=running queue=email")
        assert sorted(ids_of(table)) == sorted([ids["alive"], ids["overdue"]])
        await filter_with(app, pilot, "kind=report")
        assert len(ids_of(table)) == 6  # scheduled, 4 completed, 1 running
        await filter_with(app, pilot, "tag=billing")
        assert ids_of(table) == [ids["failed"]]
        await filter_with(app, pilot, "state=scheduled")
        assert [str(c) for c in table.get_column("state")] == ["scheduled"]
        await filter_with(app, pilot, "colour=red")
        assert "unknown filter 'colour'" in screen_text(app)
        await filter_with(app, pilot, "state=exploded")
        assert "unknown state 'exploded'" in screen_text(app)


async def test_enter_opens_a_job_with_everything_recorded(database_url, db):
    key = blake3.blake3(b"k").digest()[:16]
    # Corruption on purpose: a claim whose holder no longer exists (the screen must show it).
    db.execute("INSERT INTO awa.job_unique_claims (unique_key, job_id) VALUES (%s, %s)",
               [key, 4242])
    job = add_job(db, state="retryable", kind="sync", args={"account": 7}, attempt=2,
                  metadata={"traceparent": "00-abc-def-01"}, progress={"percent": 40},
                  errors=[{"error": "boom 1", "attempt": 1, "at": at(-50).isoformat()},
                          {"error": "boom 2", "attempt": 2, "at": at(-20).isoformat()}],
                  run_at=at(30))
    # A mask without retryable: this job does not take the claim itself.
    db.execute("UPDATE awa.jobs SET unique_key = %s, unique_states = '11110000' "
               "WHERE id = %s", [key, job])
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3")
        table = app.screen.query_one("#jobs")
        table.move_cursor(row=ids_of(table).index(job))
        await press(app, pilot, "enter")
        text = screen_text(app)
        assert f"job {job}" in text and "state retryable" in text
        assert '"account": 7' in text
        assert "traceparent" in text and '"percent": 40' in text
        assert "attempt 1 at" in text and "boom 1" in text and "boom 2" in text
        assert f"key {key.hex()}" in text
        assert "held by job 4242, which no longer exists" in text
        assert "run_at" in text and "(in 30s)" in text
        await press(app, pilot, "escape")
        assert app.screen.TITLE == "Jobs"


# Acts on (or diagnoses) rows seed_system / add_* arrange in the canonical tables at
# fixed-clock ages; the engines' own behaviour is checked in tests/storage.
@pytest.mark.engine("canonical")
async def test_retry_a_failed_job_from_the_jobs_screen(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3")
        await filter_with(app, pilot, "failed")
        await press(app, pilot, "r")
        assert "Retry job(s)" in screen_text(app)
        await press(app, pilot, "y")
        row = db.execute("SELECT state::text, attempt FROM awa.jobs WHERE id = %s",
                         [ids["failed"]]).fetchone()
        assert row == {"state": "available", "attempt": 0}
        assert f"retried 1 job(s): {ids['failed']}" in screen_text(app)


async def test_dlq_lists_by_queue_and_reason_and_retries(database_url, db):
    ids = seed_system(db)
    add_dlq(db, 9003, queue="email", reason="terminal_error", kind="send_sms", dlq_at=at(-5))
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "4")
        table = app.screen.query_one("#dlq")
        assert ids_of(table) == [9003, 9002, 9001]
        assert "by reason: max_attempts_exhausted 1  terminal_error 2" in screen_text(app)
        await filter_with(app, pilot, "queue=email reason=terminal_error")
        assert ids_of(table) == [9003]
        await filter_with(app, pilot, "kind=send_email")
        assert ids_of(table) == [9002, 9001]
        await filter_with(app, pilot, "")
        table.move_cursor(row=ids_of(table).index(ids["dlq"]))
        await press(app, pilot, "r")
        assert "Retry DLQ job(s) 9001" in screen_text(app)
        await press(app, pilot, "y")
        assert db.execute("SELECT state::text FROM awa.jobs WHERE id = 9001").fetchone() == {
            "state": "available"}
        assert not db.execute("SELECT 1 FROM awa.dlq_entries WHERE job_id = 9001").fetchall()
        assert ids_of(table) == [9003, 9002]


async def test_dlq_purge_of_tagged_entries_asks_first(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "4")
        table = app.screen.query_one("#dlq")
        table.move_cursor(row=0)
        await press(app, pilot, "space", "space", "x")
        assert "Purge DLQ job(s) 9001, 9002?" in screen_text(app)
        await press(app, pilot, "escape")
        assert db.execute("SELECT count(*) AS n FROM awa.dlq_entries").fetchone()["n"] == 2
        await press(app, pilot, "x", "y")
        assert db.execute("SELECT count(*) AS n FROM awa.dlq_entries").fetchone()["n"] == 0
        assert "purged from the DLQ 2 job(s): 9001, 9002" in screen_text(app)


# Acts on (or diagnoses) rows seed_system / add_* arrange in the canonical tables at
# fixed-clock ages; the engines' own behaviour is checked in tests/storage.
@pytest.mark.engine("canonical")
async def test_dlq_move_failed_jobs_of_a_queue_with_a_reason(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "4", "m")
        await pilot.press("ctrl+u", *"email")
        await press(app, pilot, "enter")
        await pilot.press("ctrl+u", *"backfill")
        await press(app, pilot, "enter")
        text = screen_text(app)
        assert "Move every failed job of queue 'email'" in text and "'backfill'?" in text
        await press(app, pilot, "y")
        row = db.execute("SELECT dlq_reason FROM awa.dlq_entries WHERE job_id = %s",
                         [ids["failed"]]).fetchone()
        assert row == {"dlq_reason": "backfill"}
        assert "moved 1 failed job(s) of queue email into the DLQ (backfill)" in screen_text(app)


async def test_pause_and_resume_a_queue_from_the_overview(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        table = app.screen.query_one("#queues")
        queues = [str(c) for c in table.get_column("queue")]
        table.move_cursor(row=queues.index("email"))
        await press(app, pilot, "p", "y")
        meta = db.execute("SELECT paused, paused_by FROM awa.queue_meta WHERE queue = 'email'"
                          ).fetchone()
        assert meta["paused"] is True and meta["paused_by"].startswith("awa-tui ")
        assert "PAUSED by awa-tui" in screen_text(app)
        await press(app, pilot, "p")
        assert "Resume queue 'email'?" in screen_text(app)
        await press(app, pilot, "y")
        assert db.execute("SELECT paused FROM awa.queue_meta WHERE queue = 'email'"
                          ).fetchone()["paused"] is False


async def test_enter_on_a_queue_lists_its_jobs(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        table = app.screen.query_one("#queues")
        table.move_cursor(row=[str(c) for c in table.get_column("queue")].index("images"))
        await press(app, pilot, "enter")
        assert app.screen.TITLE == "Jobs"
        assert "1 jobs: queue=images" in screen_text(app)


# Acts on (or diagnoses) rows seed_system / add_* arrange in the canonical tables at
# fixed-clock ages; the engines' own behaviour is checked in tests/storage.
@pytest.mark.engine("canonical")
async def test_diagnostics_table_and_a_findings_evidence(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "5")
        table = app.screen.query_one("#checks")
        checks = [str(c) for c in table.get_column("check")]
        assert {"schema", "runtime", "stuck-running", "mvcc-horizon", "dlq"} <= set(checks)
        statuses = dict(zip(checks, (str(c) for c in table.get_column("status"))))
        assert statuses["stuck-running"] in ("WARNING", "CRITICAL")
        assert statuses["schema"] == "OK"
        table.move_cursor(row=checks.index("stuck-running"))
        await press(app, pilot, "enter")
        text = screen_text(app)
        assert "why it matters" in text and "next:" in text
        assert "runbook: runbooks/stuck-running.md" in text
        assert "evidence" in text and "job_id" in text  # a JSON row or a key: value block
        await press(app, pilot, "escape")
        assert app.screen.TITLE == "Diagnostics"


async def test_help_refresh_rate_and_freeze_keys(database_url, db):
    seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "2", "question_mark")
        text = screen_text(app)
        assert "Running: keys" in text and "cancel the tagged jobs" in text
        await press(app, pilot, "escape", "3", "question_mark")
        assert "Jobs: keys" in screen_text(app)
        await press(app, pilot, "escape", "plus")
        assert app.refresh_s == 1.0 and "every 1s" in screen_text(app)
        await press(app, pilot, "minus", "minus")
        assert app.refresh_s == 5.0
        await press(app, pilot, "f")
        assert app.frozen and "FROZEN" in screen_text(app)
        before = app.refreshes
        app.scheduled_refresh()
        app.tick()
        await press(app, pilot)
        assert app.refreshes == before
        await press(app, pilot, "f")
        assert not app.frozen and app.refreshes == before + 1


async def test_jobs_and_dlq_sort_by_column(database_url, db):
    ids = seed_system(db)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3")
        table = app.screen.query_one("#jobs")
        assert ids_of(table) == sorted(ids_of(table), reverse=True)  # newest first
        await press(app, pilot, "s")  # id -> kind, still descending
        kinds = [str(c) for c in table.get_column("kind")]
        assert kinds == sorted(kinds, reverse=True)
        await press(app, pilot, "S")
        assert [str(c) for c in table.get_column("kind")] == sorted(kinds)
        assert "sort: kind asc" in screen_text(app)
        await press(app, pilot, "4")
        table = app.screen.query_one("#dlq")
        await press(app, pilot, "s")  # dlq_at -> error
        assert [str(c) for c in table.get_column("error")] == ["smtp timeout", "invalid address"]
        table.move_cursor(row=ids_of(table).index(ids["dlq"]))
        await press(app, pilot, "enter")
        text = screen_text(app)
        assert "job 9001" in text and "in the DLQ" in text
        assert "DLQ reason terminal_error" in text and "invalid address" in text


@pytest.mark.parametrize("size", [NARROW, MEDIUM])
async def test_ten_dlq_entries_of_one_poison_bug_are_one_group_of_ten(database_url, db, size):
    for n in range(10):
        add_dlq(db, 500 + n, kind="parse_upload", queue="imports",
                error=f"upload-{n * 15}.csv: unexpected byte 0xff at offset {1337 + n}",
                dlq_at=at(-300 + n))
    add_dlq(db, 777, kind="send_email", queue="email", error="mailbox 'bob' does not exist",
            dlq_at=at(-10))
    async with running_console(database_url, size=size) as (app, pilot):
        await press(app, pilot, "4")
        assert "2 cause(s) (g)" in screen_text(app)
        await press(app, pilot, "g")
        groups = app.screen.query_one("#dlq-groups")
        assert groups.row_count == 2
        top = [str(c) for c in groups.get_row_at(0)]
        assert top[1] == "10"
        assert top[2].startswith("<file>: unexpected byte <hex>")  # the normalized error
        assert top[3].startswith("parse_up")  # kinds (cut to fit at 80 columns)
        assert "2 cause(s) of 11 entries" in screen_text(app)
        if size == MEDIUM:  # first and last seen fit
            assert top[5:7] == ["5m00s ago", "4m51s ago"]

        # Drill into the members: the DLQ screen, filtered to the group.
        await press(app, pilot, "enter")
        assert app.screen.TITLE == "DLQ"
        table = app.screen.query_one("#dlq")
        assert sorted(ids_of(table)) == list(range(500, 510))
        assert "cause: <file>: unexpected byte" in screen_text(app)

        # Retry the whole group at once.
        await press(app, pilot, "g")
        await press(app, pilot, "r")
        assert "Retry all 10 DLQ job(s) of cause" in screen_text(app)
        await press(app, pilot, "y")
        assert "retried from the DLQ 10 job(s)" in screen_text(app)
        left = [r["job_id"] for r in db.execute("SELECT job_id FROM awa.dlq_entries")]
        assert left == [777]
        assert app.screen.query_one("#dlq-groups").row_count == 1


async def test_purge_a_dlq_group_asks_first(database_url, db):
    for n in range(3):
        add_dlq(db, 600 + n, error=f"KeyError: 'user_{n}'")
    async with running_console(database_url, size=MEDIUM) as (app, pilot):
        await press(app, pilot, "4", "g", "x")
        assert "Purge all 3 DLQ job(s) of cause \"KeyError: '?'\"?" in screen_text(app)
        await press(app, pilot, "escape")
        assert db.execute("SELECT count(*) AS n FROM awa.dlq_entries").fetchone()["n"] == 3
        await press(app, pilot, "x", "y")
        assert db.execute("SELECT count(*) AS n FROM awa.dlq_entries").fetchone()["n"] == 0


@pytest.mark.parametrize("size", [NARROW, MEDIUM])
async def test_jobs_slash_filter_matches_args_text(database_url, size):
    import awa
    with awa.Client(database_url) as client:
        alice = client.insert({"to": "alice@example.com"}, kind="send_email", queue="email").id
        client.insert({"to": "bob@example.com"}, kind="send_email", queue="email")
        report = client.insert({"owner": "Alice"}, kind="report", queue="reports").id
    async with running_console(database_url, size=size) as (app, pilot):
        await press(app, pilot, "3")
        table = app.screen.query_one("#jobs")
        assert table.row_count == 3
        await filter_with(app, pilot, "alice")
        assert ids_of(table) == [report, alice]
        assert "args contain 'alice'" in screen_text(app)
        await filter_with(app, pilot, "queue=email alice@example")
        assert ids_of(table) == [alice]
        await filter_with(app, pilot, "available ALICE")
        assert ids_of(table) == [report, alice]
        await filter_with(app, pilot, "nobody-has-this")
        assert table.row_count == 0
        await filter_with(app, pilot, "")
        assert table.row_count == 3
