"""Overview: queues, runtimes (who leads), DLQ depth, the worst diagnostic status."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import DataTable, Static

from awa_ops.console import ConsoleReader, Overview
from awa_tui.screens.base import Column, ConsoleScreen, ResponsiveTable
from awa_tui.widgets import TextLine, duration, relative, spark
from awa_tui.widgets.chart import QueueChart

# Priority 0 survives an 80-column terminal; the rest give way, highest number first
# (Done/s stays at 80 columns: a drained queue's throughput is the point of its row).
QUEUE_COLUMNS = (Column("queue", "Queue", 0, min_width=10, max_width=28),
                 Column("available", "Avail", 0, min_width=5),
                 Column("scheduled", "Sched", 2, min_width=5),
                 Column("retryable", "Retry", 2, min_width=5),
                 Column("running", "Run", 0, min_width=5),
                 Column("waiting_external", "Wait", 2, min_width=5),
                 Column("failed", "Failed", 0, min_width=6), Column("dlq", "DLQ", 0, min_width=5),
                 Column("lag", "Lag", 0, min_width=6), Column("rate", "Done/s", 1, min_width=6),
                 Column("spark", "Throughput", 3, min_width=16, max_width=16),
                 Column("paused", "Paused", 0, min_width=8, max_width=40))
RUNTIME_COLUMNS = (Column("role", "Role", 0, min_width=8),
                   Column("host", "Host", 0, min_width=10, max_width=24),
                   Column("pid", "PID", 0, min_width=6),
                   Column("version", "Version", 2, min_width=8),
                   Column("seen", "Last seen", 0, min_width=11),
                   Column("health", "Health", 0, min_width=6, max_width=40),
                   Column("queues", "Queues", 1, min_width=10, max_width=400))
CHART_WINDOW_S = 600.0  # the charts show the last ten minutes
CHART_MIN_HEIGHT = 32  # below this the charts start hidden (g shows them)
DEPTH_COLUMNS = ("available", "scheduled", "retryable", "running", "waiting_external", "failed")

HELP = """\
The state of the whole system on one screen.

[b]Queues[/b]: depth by state (counts stop at a cap and show "+"), lag (age of the
oldest runnable job), completions per second and their recent history, paused.
[b]Runtimes[/b]: every worker process; [b]LEADER[/b] marks the one running maintenance;
Version shows its release and the layout its code speaks (L8: layout 8; S7: schema 7;
L?: a release from before runtimes recorded it).  A red banner appears when no
live runtime holds leadership; "mixed fleet" in the summary line means runtimes of more
than one release or layout are live (a rolling upgrade in progress).

[b]Charts[/b]: completions per second and lag per queue over the last ten minutes
(the busiest five queues), from what this console has seen since it started.

  g        show / hide the charts (hidden at first below 32 rows)
  p        pause / resume the queue under the cursor (asks first)
  enter    list the jobs of the queue under the cursor
  tab      move between the queue and runtime tables
"""


class OverviewScreen(ConsoleScreen):
    TITLE = "Overview"
    HELP = HELP
    BINDINGS = [Binding("p", "pause_resume", "Pause/resume"), Binding("g", "charts", "Charts")]

    def __init__(self) -> None:
        super().__init__()
        self.data: Overview | None = None
        # (when, completions/s per queue, lag seconds per queue), one point per refresh
        self.history: deque[tuple[datetime, dict[str, float], dict[str, float]]] = deque(
            maxlen=2000)
        self.charts_on: bool | None = None  # None: decided by the terminal's height

    def body(self) -> Iterable[Widget]:
        yield TextLine(id="summary")
        yield Static("Queues", classes="section")
        yield ResponsiveTable(QUEUE_COLUMNS, id="queues")
        with Horizontal(id="charts"):
            yield QueueChart("Completed per second", "jobs/s", id="throughput-chart")
            yield QueueChart("Lag (oldest runnable job)", "seconds", id="lag-chart")
        yield Static("Runtimes", classes="section")
        yield ResponsiveTable(RUNTIME_COLUMNS, id="runtimes")

    async def fetch(self, reader: ConsoleReader) -> Overview:
        overview = await reader.overview(self.console.refresh_s)
        await self.console.refresh_diagnostics_if_due(reader)
        return overview

    def problem(self) -> str | None:
        return None if self.data is None else self.data.problem()

    def show(self, data: Overview) -> None:
        if data is not self.data:
            self.record(data)
        self.data = data
        if self.charts_shown():
            self.draw_charts()
        now = data.now
        table = self.query_one("#queues", ResponsiveTable)
        keep = table.cursor_row
        table.clear()
        unserved = set(data.unserved())
        for q in data.queues:
            lag = q.lag_seconds(now)
            cells: list[Any] = [q.queue]
            cells += [q.count_text(state) for state in DEPTH_COLUMNS]
            cells.append(Text(str(q.dlq), style="bold red") if q.dlq else "0")
            cells.append(duration(lag) if lag is not None else "-")
            cells.append(f"{q.throughput[-1]:.1f}" if q.throughput else "-")
            cells.append(spark(q.throughput))
            cells.append(Text(f"PAUSED by {q.paused_by or '?'}", style="bold yellow")
                         if q.paused else
                         Text("UNSERVED: no live runtime", style="bold red")
                         if q.queue in unserved else "")
            table.put_row(*cells, key=q.queue)
        if table.row_count:
            table.move_cursor(row=min(keep, table.row_count - 1), animate=False)

        runtimes = self.query_one("#runtimes", ResponsiveTable)
        runtimes.clear()
        # Live runtimes first; the gone ones after them, greyed, with how long ago they reported.
        leader = data.leader()
        for r in sorted(data.runtimes, key=lambda r: not r.live(now)):
            live = r.live(now)
            dim = "" if live else "dim"
            if r is leader:
                role = Text("★ LEADER", style="bold green")
            elif not live:  # stopped cleanly (its last snapshot said so), or vanished
                role = Text("stopped" if r.shutting_down else "gone", style="dim")
            else:
                role = Text("worker")
            bad = r.bad_flags()
            health = (Text("ok", style="green") if not bad else
                      Text(" ".join(f"!{flag}" for flag in bad), style="bold red"))
            if r.shutting_down:
                health = Text("shutting down", style="yellow")
            if not live:
                health = Text("stopped" if r.shutting_down else "gone", style="dim")
            runtimes.put_row(role, Text(r.hostname or "?", style=dim),
                             Text(str(r.pid or "?"), style=dim),
                             Text(r.speaks(short=True), style=dim),
                             Text(relative(r.last_seen_at, now), style=dim), health,
                             Text(",".join(r.queues), style=dim), key=r.instance_id)
        diag = self.console.diagnostic_status
        parts = [f"DLQ depth [b]{data.dlq_total}{'+' if data.dlq_capped else ''}[/b]",
                 f"live runtimes [b]{len(data.live_runtimes())}[/b]",
                 f"leader [b]{leader.label() if leader else 'NONE'}[/b]" if leader
                 or not data.leader_lock_held else
                 f"leader [b]unknown[/b] ({data.leader_unknown()})"]
        mixed = data.mixed_fleet()
        if mixed:
            parts.append("[b]mixed fleet[/b] " + ", ".join(
                f"{n} on {what.removeprefix('awa-py ')}" for what, n in mixed.items()))
        if diag:
            parts.append(f"diagnostics [b]{diag}[/b]")
        self.query_one("#summary", TextLine).set("   ".join(parts))
        self.sync_chrome()

    def relayout(self) -> None:
        if self.data is not None:
            self.show(self.data)

    def on_mount(self) -> None:
        self.sync_charts()

    def on_resize(self, event: Any) -> None:  # (the base class's handler runs too)
        self.sync_charts()

    def charts_shown(self) -> bool:
        if self.charts_on is not None:
            return self.charts_on
        return self.app.size.height >= CHART_MIN_HEIGHT

    def sync_charts(self) -> None:
        self.query_one("#charts").display = self.charts_shown()

    def action_charts(self) -> None:
        self.charts_on = not self.charts_shown()
        self.sync_charts()
        if self.charts_on:
            self.draw_charts()

    def record(self, data: Overview) -> None:
        rates = {q.queue: q.throughput[-1] for q in data.queues if q.throughput}
        lags = {q.queue: q.lag_seconds(data.now) or 0.0 for q in data.queues}
        if self.history and self.history[-1][0] == data.now:
            self.history.pop()  # the same instant read twice: keep the newest
        self.history.append((data.now, rates, lags))
        while self.history and (data.now - self.history[0][0]).total_seconds() > CHART_WINDOW_S:
            self.history.popleft()

    def chart_series(self, which: int) -> dict[str, list[tuple[float, float]]]:
        """queue -> [(minutes before the newest point, value)], the busiest queues first."""
        if not self.history:
            return {}
        newest = self.history[-1][0]
        series: dict[str, list[tuple[float, float]]] = {}
        for when, *values in self.history:
            x = -(newest - when).total_seconds() / 60
            for queue, value in values[which].items():
                series.setdefault(queue, []).append((x, value))
        ranked = sorted(series, key=lambda q: (-max(v for _, v in series[q]), q))
        return {q: series[q] for q in ranked}

    def draw_charts(self) -> None:
        window = CHART_WINDOW_S / 60
        self.query_one("#throughput-chart", QueueChart).show_series(self.chart_series(0), window)
        self.query_one("#lag-chart", QueueChart).show_series(self.chart_series(1), window)

    def selected_queue(self) -> str | None:
        table = self.query_one("#queues", DataTable)
        if table.row_count == 0:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def action_pause_resume(self) -> None:
        queue = self.selected_queue()
        if queue is None or self.data is None:
            self.console.say("no queue selected")
            return
        paused = next((q.paused for q in self.data.queues if q.queue == queue), False)
        if paused:
            self.console.confirm_then(
                f"Resume queue {queue!r}?", f"resume {queue}",
                lambda actions: actions.resume(queue))
        else:
            self.console.confirm_then(
                f"Pause queue {queue!r}? Workers stop claiming its jobs.", f"pause {queue}",
                lambda actions: actions.pause(queue))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "queues" and event.row_key.value:
            self.console.open_jobs(queue=event.row_key.value)
