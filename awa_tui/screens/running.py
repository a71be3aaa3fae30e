"""Running: every running attempt, with ages that tick between refreshes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.text import Text
from textual.binding import Binding

from awa_ops.console import (
    ConsoleReader,
    RunningAttempt,
    RunningSnapshot,
)
from awa_ops.runtimes import ALIVE, ORPHANED, OVERDUE, STALE
from awa_tui.screens.base import Column, JobTableScreen, SortableScreen, TaggableTable
from awa_tui.widgets import TextLine, duration

STATUS_STYLE = {OVERDUE: "bold white on red", STALE: "bold red", ORPHANED: "bold magenta",
                ALIVE: "green"}
STATUS_RANK = {OVERDUE: 0, ORPHANED: 1, STALE: 2, ALIVE: 3}
# Columns that change every tick get fixed widths, so a tick never re-measures the table.
# Priority 0 is what an on-call engineer opens the screen for; the rest give way at 80 columns.
COLUMNS = (Column("tag", " ", 0, width=1), Column("status", "Status", 0, width=8),
           Column("id", "Job", 0, min_width=7, clip=False),
           Column("kind", "Kind", 0, min_width=10, max_width=32),
           Column("queue", "Queue", 1, min_width=8, max_width=20),
           Column("attempt", "Attempt", 3, width=7),
           Column("runtime", "Runtime", 2, width=24),
           Column("running", "Running", 0, width=7),
           Column("heartbeat", "Heartbeat age", 0, width=13),
           Column("deadline", "Deadline in", 0, width=11))
_LAST = float("inf")


SORT_KEYS: dict[str, Callable[[RunningAttempt, datetime], Any]] = {
    "status": lambda a, now: STATUS_RANK[a.status(now)],
    "id": lambda a, now: a.id,
    "kind": lambda a, now: a.kind,
    "queue": lambda a, now: a.queue,
    "attempt": lambda a, now: a.attempt,
    "runtime": lambda a, now: a.runtime(now),
    "running": lambda a, now: -(a.running_for(now) or 0),
    "heartbeat": lambda a, now: -(a.heartbeat_age(now) or _LAST),
    "deadline": lambda a, now: a.deadline_remaining(now) if a.deadline_at else _LAST,
}


SORTABLE = tuple(c.key for c in COLUMNS if c.key != "tag")

HELP = """\
Every running attempt, oldest heartbeat first. Ages tick every second between
refreshes. Status, worst first:
  [bold white on red]overdue[/]   past deadline + one heartbeat interval: deadline rescue takes it
  [bold magenta]orphaned[/]  its runtime is gone (or none serves the queue): heartbeat rescue
            moves it back to retryable once its heartbeat is stale
  [bold red]stale[/]     heartbeat past its runtime's cutoff (or --stale-after), the runtime
            alive: rescue is due at the next scan
  [green]alive[/]     heartbeating normally
Same classes as `awa-ops diagnose stuck-running`. Runtime: who claimed it.

  s / S    sort by the next column / reverse the order (or click a header)
  /        filter: rows containing the text (id, kind, queue, runtime, status)
  space    tag a row for bulk actions
  c        cancel the tagged jobs, or the one under the cursor (asks first)
  enter    open the job
"""


class RunningScreen(JobTableScreen):
    TITLE = "Running"
    TABLE_ID = "running"
    COLUMNS = COLUMNS
    HELP = HELP
    FILTER_HINT = "text to match (id, kind, queue, runtime, status); empty clears"
    SORTABLE = SORTABLE
    BINDINGS = [Binding("slash", "filter", "Filter"), *SortableScreen.SORT_BINDINGS,
                Binding("c", "cancel_jobs", "Cancel")]

    def __init__(self) -> None:
        super().__init__("heartbeat")
        self.data: RunningSnapshot | None = None

    async def fetch(self, reader: ConsoleReader) -> RunningSnapshot:
        return await reader.running(self.console.min_age_s)

    def visible_attempts(self, now: datetime) -> list[RunningAttempt]:
        assert self.data is not None
        needle = self.filter_text.lower()
        rows = [a for a in self.data.attempts
                if not needle or needle in " ".join(
                    (str(a.id), a.kind, a.queue, a.runtime(now),
                     a.status(now))).lower()]
        rows.sort(key=lambda a: SORT_KEYS[self.sort_key](a, now),
                  reverse=self.reverse)
        return rows

    def cells(self, a: RunningAttempt, now: datetime) -> list[Any]:
        status = a.status(now)
        remaining = a.deadline_remaining(now)
        return [Text(status, style=STATUS_STYLE[status]), str(a.id), a.kind, a.queue,
                f"{a.attempt}/{a.max_attempts}" if a.max_attempts else str(a.attempt),
                a.runtime(now), duration(a.running_for(now)),
                duration(a.heartbeat_age(now)),
                Text(duration(remaining), style="bold red") if remaining is not None
                and remaining < 0 else duration(remaining)]

    def redraw(self) -> None:
        """Rebuild the rows: filtered, sorted, every cell current."""
        if self.data is None:
            return
        now = self.console.display_now()
        rows = self.visible_attempts(now)
        self.query_one(TaggableTable).replace_rows(
            [(str(a.id), self.cells(a, now)) for a in rows], lazy=True)
        self.summarize(now, len(rows))

    def tick(self) -> None:
        """Advance the clocks of the rows on screen; off-screen rows catch up when scrolled to.

        The order is left alone until the next refresh, so rows do not jump under the cursor.
        """
        if self.data is None:
            return
        now = self.console.display_now()
        table = self.query_one(TaggableTable)
        by_id = {str(a.id): a for a in self.data.attempts}
        table.update_visible(lambda key: self.cells(by_id[key], now) if key in by_id else None)
        self.summarize(now, table.row_count)

    def summarize(self, now: datetime, shown_rows: int) -> None:
        assert self.data is not None
        counts = {OVERDUE: 0, ORPHANED: 0, STALE: 0, ALIVE: 0}
        for a in self.visible_attempts(now):
            counts[a.status(now)] += 1
        shown = ", ".join(f"{n} {status}" for status, n in counts.items() if n) or "none"
        more = f" (oldest {len(self.data.attempts)} only)" if self.data.truncated else ""
        filt = f"   filter: {self.filter_text!r}" if self.filter_text else ""
        min_age = (f"   min age {duration(self.console.min_age_s)}"
                   if self.console.min_age_s else "")
        self.query_one("#summary", TextLine).set(
            f"[b]{shown_rows}[/b] running{more}: {shown}   {self.sort_label()}{filt}{min_age}")

    def on_taggable_table_scrolled(self, event: TaggableTable.Scrolled) -> None:
        self.tick()

    def action_cancel_jobs(self) -> None:
        self.act_on_selection(self.console.confirm_cancel)
