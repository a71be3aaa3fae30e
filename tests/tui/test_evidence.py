"""Evidence at 80 columns: `key: value` blocks when the table would not fit, in
`awa-ops diagnose` (awa_ops.render) and in the console's check detail."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from awa_ops.findings import CheckResult, Finding, Severity
from awa_ops.render import evidence_lines, render_result
from tui.conftest import (
    MEDIUM,
    NARROW,
    fixed_findings,
    press,
    running_console,
    screen_text,
    seed_system,
)

ROWS = [{"pid": 4242 + i, "application_name": "awa-worker-with-a-long-name",
         "state": "idle in transaction", "xact_age_s": 3600.5 + i,
         "query": "SELECT * FROM awa.jobs_hot WHERE queue = 'email' FOR UPDATE"} for i in range(3)]


def rendered(width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    render_result(console, CheckResult("mvcc-horizon", [Finding(
        Severity.WARNING, "a transaction pins the xmin horizon", evidence=ROWS)]))
    return out.getvalue()


def test_narrow_terminal_gets_key_value_blocks():
    text = rendered(80)
    assert "application_name: awa-worker-with-a-long-name" in text
    assert "pid:              4242" in text  # keys aligned
    assert "applica" not in text.replace("application_name", "")  # no column folded apart


def test_wide_terminal_keeps_the_table():
    text = rendered(220)
    header = next(line for line in text.splitlines() if "application_name" in line)
    assert "pid" in header and "xact_age_s" in header and ":" not in header


def test_blocks_say_how_many_rows_were_left_out():
    lines = evidence_lines(ROWS * 5, limit=2)
    assert lines[-1] == "... 13 more rows (--json for all)"
    assert lines.count("") == 2  # a blank line between blocks, and before the note


@pytest.mark.parametrize("size", [pytest.param(NARROW, id="80x24"), pytest.param(MEDIUM, id="120x35"),
                                  pytest.param((160, 45), id="160x45")])
async def test_check_detail_evidence_reads_at_every_width(database_url, db, size):
    seed_system(db)
    async with running_console(database_url, size=size) as (app, pilot):
        async def fixed(min_age_s: float = 0.0):
            return fixed_findings()
        app.reader.diagnostics = fixed  # type: ignore[method-assign]
        app.findings = None  # the overview ran the real checks already
        await press(app, pilot, "5", "enter")
        detail = str(app.screen.query_one("#detail").render())
        text = screen_text(app)
        if size == (160, 45):  # each row fits on one line: one JSON object per row
            assert '{"job_id": 9001, "kind": "send_email"' in detail
            return
        # a JSON row would be ~140 columns: blocks at 80 and 120
        assert "application_name: awa-worker" in detail
        assert "runtime:          worker-c:303 (gone)" in detail
        assert '"application_name"' not in detail
        assert all(len(line) <= size[0] for line in text.splitlines())
