"""Human rendering of check results with rich: one panel per check, evidence as a
table -- or, when the terminal is narrower than that table, as ``key: value`` blocks
(a wrapped table is unreadable at 80 columns: "applica / tion_na / me")."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
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


def evidence_lines(rows: list[dict[str, Any]], limit: int = 10) -> list[str]:
    """Each row as a block of ``key: value`` lines (keys aligned), blocks apart by a blank line."""
    lines: list[str] = []
    for n, row in enumerate(rows[:limit]):
        if n:
            lines.append("")
        width = max((len(str(k)) for k in row), default=0) + 1
        lines += [f"{str(k) + ':':<{width}} {_cell(v)}" for k, v in row.items()]
    if len(rows) > limit:
        lines += ["", f"... {len(rows) - limit} more rows (--json for all)"]
    return lines


class CompactEvidence:
    """Evidence as one line per row: columns are dropped from the right (the least
    important last) until the table fits the width, never wrapped into blocks."""

    def __init__(self, rows: list[dict[str, Any]], limit: int = 5) -> None:
        self.rows = rows
        self.limit = limit

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        columns = list(self.rows[0])[:MAX_COLUMNS]
        while True:
            table = Table(show_header=True, header_style="dim", box=None, pad_edge=False)
            for c in columns:
                table.add_column(c, no_wrap=True, overflow="ellipsis", max_width=MAX_CELL)
            for row in self.rows[:self.limit]:
                table.add_row(*[_cell(row.get(c)) for c in columns])
            natural = Measurement.get(console, options.update_width(10_000), table).maximum
            if natural <= options.max_width - 4 or len(columns) == 1:
                break
            columns = columns[:-1]
        notes = []
        if len(self.rows) > self.limit:
            notes.append(f"{len(self.rows) - self.limit} more rows")
        hidden = len(self.rows[0]) - len(columns)
        if hidden > 0:
            notes.append(f"{hidden} more columns")
        yield Padding(table, (0, 0, 0, 4))
        if notes:
            yield Text(f"    ({', '.join(notes)}: --json for all)", style="dim")


class Evidence:
    """A finding's evidence: a table when it fits the width it is given, else blocks."""

    def __init__(self, rows: list[dict[str, Any]], limit: int = 10) -> None:
        self.rows = rows
        self.limit = limit

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = evidence_table(self.rows, self.limit)
        natural = Measurement.get(console, options.update_width(10_000), table).maximum
        if natural <= options.max_width:
            yield table
        else:
            yield Text("\n".join(evidence_lines(self.rows, self.limit)))


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
            parts.append(Evidence(f.evidence))
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


def render_all(console: Console, results: list[CheckResult], verbose: bool = False) -> None:
    """``diagnose all``: one line per check, then each problem once, compactly (its
    evidence one row per item; evidence another check already showed is not repeated)."""
    worst = max((r.severity for r in results), default=Severity.OK)
    total_ms = sum(r.duration_ms for r in results)
    console.print(Text.assemble(("awa-ops diagnose all", "bold"), " — ", severity_text(worst),
                                f" ({len(results)} checks, {total_ms:.0f} ms)"))
    width = max(len(r.check) for r in results) if results else 0
    for r in results:
        line = Text.assemble("  ", _padded(severity_text(r.severity), 9),
                             (f"{r.check:<{width}}", "bold"), "  ", r.headline())
        line.no_wrap = True
        line.overflow = "ellipsis"
        console.print(line, no_wrap=True, overflow="ellipsis")
    shown: dict[str, str] = {}
    for r in results:
        problems = [f for f in r.findings if f.severity > Severity.OK or verbose]
        if r.error is None and not problems:
            continue
        console.print()
        console.print(Text.assemble(("▸ ", STYLE[r.severity]), (r.check, "bold"), " — ",
                                    severity_text(r.severity),
                                    (f"  [{r.engine}]" if r.engine else "", "dim")))
        if r.error is not None:
            console.print(Text(f"  {r.error}"))
        for f in problems:
            console.print(Text.assemble("  ", severity_text(f.severity), " ", f.summary))
            if f.why:
                console.print(Text(f"    why: {f.why}", style="dim"))
            if f.next_step:
                console.print(Text.assemble(("    next: ", "bold"), f.next_step))
            if f.evidence:
                key = json.dumps(f.evidence, default=str, sort_keys=True)
                if key in shown:
                    console.print(Text(f"    evidence: as shown under {shown[key]}",
                                       style="dim"))
                else:
                    shown[key] = r.check
                    console.print(CompactEvidence(f.evidence))
            if f.runbook and f.severity > Severity.OK:
                console.print(Text(f"    runbook: {f.runbook}", style="dim"))


def _padded(text: Text, width: int) -> Text:
    text = text.copy()
    text.pad_right(max(0, width - len(text.plain)))
    return text
