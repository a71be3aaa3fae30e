"""Diagnostics: the `awa-ops diagnose all` table; enter shows a check's findings in full."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import DataTable, Static

from awa import config
from awa_ops.console import ConsoleReader
from awa_ops.findings import CheckResult, Finding, Severity, plain
from awa_ops.render import evidence_lines
from awa_tui.screens.base import Column, ConsoleScreen, ResponsiveTable
from awa_tui.widgets import TextLine

SEVERITY_STYLE = {Severity.OK: "green", Severity.WARNING: "bold yellow",
                  Severity.CRITICAL: "bold white on red", Severity.ERROR: "bold magenta"}
EVIDENCE_ROWS = 20

HELP = f"""\
The checks of `awa-ops diagnose all`, worst status first. They rerun at most
every {config.TUI_DIAGNOSE_SECONDS:g}s (press R to rerun now).

  enter    open a check: each finding's evidence, why it matters, the next
           command to run, and its runbook
  R        rerun every check now
"""


def severity_text(severity: Severity) -> Text:
    return Text(severity.label.upper(), style=SEVERITY_STYLE[severity])


class DiagnosticsScreen(ConsoleScreen):
    TITLE = "Diagnostics"
    HELP = HELP
    BINDINGS = [Binding("R", "rerun", "Rerun")]

    def __init__(self) -> None:
        super().__init__()
        self.results: list[CheckResult] = []
        self.force = False

    def body(self) -> Iterable[Widget]:
        yield TextLine(id="summary")
        yield ResponsiveTable((Column("check", "Check", 0, min_width=14, max_width=24),
                               Column("status", "Status", 0, min_width=8),
                               Column("summary", "What was seen", 0, min_width=20, max_width=400)), id="checks")

    async def fetch(self, reader: ConsoleReader) -> list[CheckResult]:
        force, self.force = self.force, False
        return await self.console.refresh_diagnostics_if_due(reader, force=force)

    def show(self, data: list[CheckResult]) -> None:
        self.results = data
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        for result in sorted(data, key=lambda r: -int(r.severity)):
            table.put_row(result.check, severity_text(result.severity),
                          result.headline(), key=result.check)
        if table.row_count:
            table.move_cursor(row=min(keep, table.row_count - 1), animate=False)
        counts: dict[Severity, int] = {}
        for result in data:
            counts[result.severity] = counts.get(result.severity, 0) + 1
        line = "  ".join(f"{severity.label} [b]{n}[/b]"
                         for severity, n in sorted(counts.items(), reverse=True))
        status = self.console.diagnostic_status or "-"
        self.query_one("#summary", TextLine).set(f"worst: [b]{status}[/b]   {line}")
        self.sync_chrome()

    def relayout(self) -> None:
        self.show(self.results)

    def action_rerun(self) -> None:
        self.force = True
        self.console.say("rerunning every check…")
        self.console.request_refresh()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        result = next((r for r in self.results if r.check == event.row_key.value), None)
        if result is not None:
            self.app.push_screen(CheckDetailScreen(result))


def evidence_fits(rows: list[str], width: int) -> bool:
    return all(len(row) <= width for row in rows)


def describe_finding(finding: Finding, width: int = 10_000) -> str:
    """A finding in full; its evidence one JSON row per line while each fits the
    ``width``, else as ``key: value`` blocks (as `awa-ops diagnose` prints them)."""
    lines = [f"[{SEVERITY_STYLE[finding.severity]}]{finding.severity.label.upper()}[/] "
             f"{escape(finding.summary)}"]
    if finding.why:
        lines.append(f"  [b]why it matters[/b]: {escape(finding.why)}")
    if finding.next_step:
        lines.append(f"  [b]next[/b]: {escape(finding.next_step)}")
    if finding.runbook:
        lines.append(f"  [b]runbook[/b]: {escape(finding.runbook)}")
    if finding.evidence:
        lines.append(f"  [b]evidence[/b] ({len(finding.evidence)} rows):")
        rows = ["    " + json.dumps(plain(row), default=str)
                for row in finding.evidence[:EVIDENCE_ROWS]]
        if evidence_fits(rows, width):
            lines += [escape(row) for row in rows]
        else:
            for line in evidence_lines(finding.evidence[:EVIDENCE_ROWS], EVIDENCE_ROWS):
                lines.append(("    " + escape(line)) if line else "")
        if len(finding.evidence) > EVIDENCE_ROWS:
            lines.append(f"    … {len(finding.evidence) - EVIDENCE_ROWS} more")
    return "\n".join(lines)


class CheckDetailScreen(ConsoleScreen):
    """One check's findings; it shows what the last run found and does not query."""

    TITLE = "Check"
    HELP = ("One check's findings: evidence, why it matters, the next command, the runbook.\n\n"
            "  esc      back\n")
    BINDINGS = [Binding("escape", "back", "Back")]

    def __init__(self, result: CheckResult) -> None:
        super().__init__()
        self.result = result

    def body(self) -> Iterable[Widget]:
        with VerticalScroll(id="detail-scroll"):
            yield Static(self.describe(), id="detail")

    def text_width(self) -> int:
        return max(self.app.size.width - 4, 20)  # the scroll's padding and scrollbar

    def on_resize(self, event: Any) -> None:  # (the base class's handler runs too)
        self.query_one("#detail", Static).update(self.describe())

    def describe(self) -> str:
        width = self.text_width()
        r = self.result
        head = (f"[b]{escape(r.check)}[/b]  {severity_text(r.severity).markup}  "
                f"engine: {escape(r.engine or '-')}  ({r.duration_ms:.0f} ms)")
        if r.error:
            return head + f"\n\n[b]could not run[/b]: {escape(r.error)}"
        return head + "\n\n" + "\n\n".join(describe_finding(f, width) for f in r.findings)

    async def fetch(self, reader: ConsoleReader) -> Any:
        return None

    def show(self, data: Any) -> None:
        self.sync_chrome()

    def action_back(self) -> None:
        self.app.pop_screen()
