"""The small ones of issue 33, each with its test."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from awa.cli import main as awa_cli
from awa_ops.console import JobFilter
from tui.conftest import NARROW, add_dlq, add_job, press, running_console, screen_text, seed_system


async def test_the_80x24_header_keeps_read_only_and_the_data_age(database_url, db):
    seed_system(db)
    async with running_console(database_url, size=NARROW, read_only=True) as (app, pilot):
        header = screen_text(app).splitlines()[0]
        assert "READ-ONLY" in header and "updated 12:00:00 UTC" in header, header


async def test_a_read_only_notice_does_not_survive_a_screen_change(database_url, db):
    seed_system(db)
    async with running_console(database_url, read_only=True) as (app, pilot):
        await press(app, pilot, "1", "p")
        assert "not available: the console is read-only" in screen_text(app)
        await press(app, pilot, "3")
        assert "not available" not in screen_text(app)


async def test_the_jobs_text_search_matches_the_kind(database_url, db):
    blob = add_job(db, kind="blob", args={"n": 1})
    other = add_job(db, kind="send_email", args={"to": "a@example.com"})
    async with running_console(database_url) as (app, pilot):
        page = await app.reader.jobs(JobFilter(args="blob"))
        assert [r["id"] for r in page.rows] == [blob]
        page = await app.reader.jobs(JobFilter(args="EXAMPLE"))
        assert [r["id"] for r in page.rows] == [other]


async def test_stopped_runtimes_read_stopped_not_gone(database_url, db):
    from tui.conftest import add_runtime, at
    add_runtime(db, host="leader", pid=1, leader=True)
    add_runtime(db, host="clean", pid=2, last_seen=at(-600), shutting_down=True)
    add_runtime(db, host="killed", pid=3, last_seen=at(-600))
    async with running_console(database_url) as (app, pilot):
        table = app.screen.query_one("#runtimes")
        roles = {str(table.get_row_at(i)[1]): str(table.get_row_at(i)[0])
                 for i in range(table.row_count)}
        assert roles["clean"] == "stopped" and roles["killed"] == "gone"


def test_version_and_help_flags_and_one_line_tui_usage_errors():
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", args[0], *args[1:]], capture_output=True,
                              text=True, timeout=60)

    ops_help = run("from awa_ops.cli import main; main()", "-h")
    assert ops_help.returncode == 0 and "Usage: " in ops_help.stdout
    for module, prog in (("awa.cli", "awa"), ("awa_tui.app", "awa-tui")):
        out = run(f"import sys; sys.argv[0] = {prog!r}; from {module} import main; main()",
                  "--version")
        assert out.returncode == 0 and out.stdout.startswith(f"{prog}, version "), out
    bad = run("import sys; sys.argv[0] = 'awa-tui'; from awa_tui.app import main; main()",
              "--refresh", "0.1")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: Invalid value for --refresh: must be between 0.5 and 60 seconds "
        "(see `awa-tui --help`)"]
    # Piped, the live screen would be control codes in a file: one line saying what to use.
    piped = run("import sys; sys.argv[0] = 'awa-tui'; from awa_tui.app import main; main()",
                "--database-url", "postgresql://nobody@127.0.0.1:1/none")
    assert piped.returncode == 2 and piped.stdout == ""
    assert piped.stderr.strip().splitlines() == [
        "error: standard output is not a terminal (piped or redirected): awa-tui draws a live "
        "screen; for text use `awa queue stats` or `awa-ops diagnose all --watch 5` "
        "(see `awa-tui --help`)"]


def test_job_list_failed_points_at_the_dlq(database_url, db):
    add_job(db, state="failed", kind="k", queue="imports", attempt=25)
    add_dlq(db, 9100, kind="k", queue="imports")
    out = CliRunner().invoke(awa_cli, ["job", "list", "--state", "failed", "--queue", "imports",
                                       "--json", "--database-url", database_url])
    assert out.exit_code == 0
    assert "note: 1 more failed job(s) are in the DLQ: awa dlq list --queue imports" in \
        out.stderr


def test_diagnose_json_has_one_shape_for_one_check_and_for_all(database_url, tmp_path):
    import os
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}

    def diagnose(check: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", check,
                              "--database-url", database_url, "--json"], capture_output=True,
                             text=True, timeout=120, env=env)
        return json.loads(out.stdout)

    one, every = diagnose("dlq"), diagnose("all")
    for data in (one, every):
        assert {"status", "exit_code", "checks", "findings"} <= set(data)
        assert all("check" in c and "findings" in c for c in data["checks"])
    assert [c["check"] for c in one["checks"]] == ["dlq"]
    assert any(f["check"] == "dlq" for f in every["findings"])
