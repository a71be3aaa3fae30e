"""Human rendering of check results with rich: one panel per check, evidence as tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from awa_ops.findings import CheckResult, Finding, Severity, plain

STYLE = {Severity.OK: "green", Severity.WARNING: "yellow", Severity.CRITICAL: "bold red",
         Severity.ERROR: "magenta"}
MAX_COLUMNS = 9
MAX_CELL = 60


def severity_text(sev: Severity) -> Text:
    return Text(sev.label.upper(), style=STYLE[sev])


def evidence_table(rows: list[dict[str, Any]], limit: int = 10) -> Table:
    columns = list(rows[0])[:MAX_COLUMNS]
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for c in columns:
        table.add_column(c, overflow="fold", max_width=MAX_CELL)
    for row in rows[:limit]:
        table.add_row(*[_cell(row.get(c)) for c in columns])
    if len(rows) > limit:
        table.caption = f"... {len(rows) - limit} more rows (--json for all)"
    return table


def _cell(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    text = "" if value is None else str(plain(value))
    return text if len(text) <= MAX_CELL * 2 else text[:MAX_CELL * 2] + "..."


def finding_block(f: Finding, verbose: bool) -> Group:
    parts: list[Any] = [Text.assemble(severity_text(f.severity), " ", f.summary)]
    if f.severity > Severity.OK or verbose:
        if f.why:
            parts.append(Text(f"  why: {f.why}", style="dim"))
        if f.next_step:
            parts.append(Text.assemble(("  next: ", "bold"), f.next_step))
        if f.evidence:
            parts.append(evidence_table(f.evidence))
        if f.runbook and f.severity > Severity.OK:
            parts.append(Text(f"  runbook: {f.runbook}", style="dim"))
    return Group(*parts)


def render_result(console: Console, result: CheckResult, verbose: bool = False) -> None:
    title = Text.assemble((result.check, "bold"), " — ", severity_text(result.severity),
                          (f"  [{result.engine}]" if result.engine else "", "dim"))
    if result.error is not None:
        body: Any = Text(result.error)
    else:
        body = Group(*[finding_block(f, verbose) for f in result.findings])
    console.print(Panel(body, title=title, title_align="left", border_style=STYLE[result.severity]))


def render_summary(console: Console, results: list[CheckResult]) -> None:
    table = Table(title="awa-ops diagnose all", show_lines=False)
    table.add_column("check", style="bold")
    table.add_column("status")
    table.add_column("what was seen", overflow="fold")
    table.add_column("ms", justify="right")
    for r in results:
        table.add_row(r.check, severity_text(r.severity), r.headline(), f"{r.duration_ms:.0f}")
    console.print(table)
