"""Overview: queues, runtimes (who leads), DLQ depth, the worst diagnostic status."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import DataTable, Static

from awa_ops.console import ConsoleReader, Overview
from awa_tui.screens.base import ConsoleScreen
from awa_tui.widgets import TextLine, duration, relative, spark

QUEUE_COLUMNS = (("queue", "Queue"), ("available", "Avail"), ("scheduled", "Sched"),
                 ("retryable", "Retry"), ("running", "Run"), ("waiting_external", "Wait"),
                 ("failed", "Failed"), ("dlq", "DLQ"), ("lag", "Lag"), ("rate", "Done/s"),
                 ("spark", "Throughput"), ("paused", "Paused"))
RUNTIME_COLUMNS = (("role", "Role"), ("host", "Host"), ("pid", "PID"), ("version", "Version"),
                   ("seen", "Last seen"), ("health", "Health"), ("queues", "Queues"))
DEPTH_COLUMNS = ("available", "scheduled", "retryable", "running", "waiting_external", "failed")

HELP = """\
The state of the whole system on one screen.

[b]Queues[/b]: depth by state (counts stop at a cap and show "+"), lag (age of the
oldest runnable job), completions per second and their recent history, paused.
[b]Runtimes[/b]: every worker process; [b]LEADER[/b] marks the one running maintenance.
A red banner appears when no live runtime holds leadership.

  p        pause / resume the queue under the cursor (asks first)
  enter    list the jobs of the queue under the cursor
  tab      move between the queue and runtime tables
"""


class OverviewScreen(ConsoleScreen):
    TITLE = "Overview"
    HELP = HELP
    BINDINGS = [Binding("p", "pause_resume", "Pause/resume")]

    def __init__(self) -> None:
        super().__init__()
        self.data: Overview | None = None

    def body(self) -> Iterable[Widget]:
        yield TextLine(id="summary")
        yield Static("Queues", classes="section")
        queues: DataTable[Any] = DataTable(id="queues", cursor_type="row", zebra_stripes=True)
        for key, label in QUEUE_COLUMNS:
            queues.add_column(label, key=key)
        yield queues
        yield Static("Runtimes", classes="section")
        runtimes: DataTable[Any] = DataTable(id="runtimes", cursor_type="row", zebra_stripes=True)
        for key, label in RUNTIME_COLUMNS:
            runtimes.add_column(label, key=key)
        yield runtimes

    async def fetch(self, reader: ConsoleReader) -> Overview:
        overview = await reader.overview(self.console.refresh_s)
        await self.console.refresh_diagnostics_if_due(reader)
        return overview

    def problem(self) -> str | None:
        if self.data is None:
            return None
        live = self.data.live_runtimes()
        if not live:
            return ("NO LIVE RUNTIME: no worker has reported recently, so nothing is being "
                    "processed or rescued. Start a worker (awa worker) and check its logs.")
        if self.data.leader() is None:
            return ("NO LEADER: no live runtime holds leadership, so maintenance (rescue, "
                    "promotion, cleanup) is not running. A new leader is elected within the "
                    "election interval; if none appears, check the workers' database connectivity.")
        return None

    def show(self, data: Overview) -> None:
        self.data = data
        now = data.now
        table = self.query_one("#queues", DataTable)
        keep = table.cursor_row
        table.clear()
        for q in data.queues:
            lag = q.lag_seconds(now)
            cells: list[Any] = [q.queue]
            cells += [q.count_text(state) for state in DEPTH_COLUMNS]
            cells.append(Text(str(q.dlq), style="bold red") if q.dlq else "0")
            cells.append(duration(lag) if lag is not None else "-")
            cells.append(f"{q.throughput[-1]:.1f}" if q.throughput else "-")
            cells.append(spark(q.throughput))
            cells.append(Text(f"PAUSED by {q.paused_by or '?'}", style="bold yellow")
                         if q.paused else "")
            table.add_row(*cells, key=q.queue)
        if table.row_count:
            table.move_cursor(row=min(keep, table.row_count - 1), animate=False)

        runtimes = self.query_one("#runtimes", DataTable)
        runtimes.clear()
        for r in data.runtimes:
            live = r.live(now)
            if r.leader and live:
                role = Text("★ LEADER", style="bold green")
            elif not live:
                role = Text("gone", style="dim")
            else:
                role = Text("worker")
            bad = r.bad_flags()
            health = (Text("ok", style="green") if not bad else
                      Text(" ".join(f"!{flag}" for flag in bad), style="bold red"))
            if r.shutting_down:
                health = Text("shutting down", style="yellow")
            runtimes.add_row(role, r.hostname or "?", str(r.pid or "?"), r.version or "?",
                             relative(r.last_seen_at, now), health, ",".join(r.queues),
                             key=r.instance_id)

        leader = data.leader()
        diag = self.console.diagnostic_status
        parts = [f"DLQ depth [b]{data.dlq_total}{'+' if data.dlq_capped else ''}[/b]",
                 f"live runtimes [b]{len(data.live_runtimes())}[/b]",
                 f"leader [b]{leader.label() if leader else 'NONE'}[/b]"]
        if diag:
            parts.append(f"diagnostics [b]{diag}[/b]")
        self.query_one("#summary", TextLine).set("   ".join(parts))
        self.sync_chrome()

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
