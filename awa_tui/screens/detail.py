"""One job: args, metadata, progress, every attempt's error, timestamps, unique key and holder."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.markup import escape
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from awa_ops.console import ConsoleReader, JobDetail
from awa_tui.screens.base import ConsoleScreen
from awa_tui.widgets import relative, stamp

HELP = """\
Everything recorded about one job.

  c        cancel it (asks first)
  r        retry it (asks first)
  esc      back
"""
TIMESTAMPS = ("created_at", "run_at", "attempted_at", "heartbeat_at", "deadline_at",
              "finalized_at", "callback_timeout_at")


def _json(value: Any) -> str:
    return escape(json.dumps(value, indent=2, sort_keys=True, default=str))


class JobDetailScreen(ConsoleScreen):
    TITLE = "Job"
    HELP = HELP
    BINDINGS = [Binding("escape", "back", "Back"), Binding("c", "cancel_job", "Cancel"),
                Binding("r", "retry_job", "Retry")]

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.detail: JobDetail | None = None

    def body(self) -> Iterable[Widget]:
        with VerticalScroll(id="detail-scroll"):
            yield Static(f"loading job {self.job_id}…", id="detail")

    async def fetch(self, reader: ConsoleReader) -> JobDetail | None:
        return await reader.job(self.job_id)

    def show(self, data: JobDetail | None) -> None:
        self.detail = data
        self.query_one("#detail", Static).update(self.describe(data))
        self.sync_chrome()

    def describe(self, data: JobDetail | None) -> str:
        if data is None:
            return f"job {self.job_id} does not exist (deleted by retention, or never created)"
        job, now = data.job, data.now
        where = "  [b red]in the DLQ[/]" if data.in_dlq else ""
        lines = [
            f"[b]job {job['id']}[/b]  kind [b]{escape(job['kind'])}[/b]  "
            f"queue [b]{escape(job['queue'])}[/b]  state [b]{job['state']}[/b]{where}",
            f"attempt {job['attempt']}/{job['max_attempts']}  priority {job['priority']}  "
            f"run_lease {job['run_lease']}  tags {escape(', '.join(job['tags'] or [])) or '-'}",
        ]
        if data.in_dlq:
            lines.append(f"DLQ reason [b]{escape(job['dlq_reason'])}[/b] at {stamp(job['dlq_at'])}")
        lines.append("\n[b]Timestamps[/b]")
        for column in TIMESTAMPS:
            if job.get(column) is not None:
                lines.append(f"  {column:<20} {stamp(job[column])}  ({relative(job[column], now)})")
        lines.append("\n[b]Args[/b]\n" + _json(job["args"]))
        lines.append("\n[b]Metadata[/b]\n" + _json(job["metadata"]))
        lines.append("\n[b]Progress[/b]\n" + (_json(job["progress"]) if job.get("progress")
                                              else "-"))
        lines.append("\n[b]Errors[/b]")
        errors = job.get("errors") or []
        if not errors:
            lines.append("  none")
        for err in errors:
            terminal = " [red](terminal)[/]" if err.get("terminal") else ""
            lines.append(f"  attempt {err.get('attempt', '?')} at {escape(str(err.get('at', '?')))}"
                         f"{terminal}\n    {escape(str(err.get('error', err)))}")
        lines.append("\n[b]Uniqueness[/b]")
        key = job.get("unique_key")
        if key is None:
            lines.append("  not a unique job")
        else:
            lines.append(f"  key {bytes(key).hex()}  states {job.get('unique_states') or '-'}")
            holder = data.unique_holder
            own_id = job["id"]
            if holder is None:
                lines.append("  claim: nobody holds this key")
            elif holder["job_id"] == own_id:
                lines.append("  claim: held by this job")
            elif holder["state"] is None:
                lines.append(f"  claim: held by job {holder['job_id']}, which no longer exists")
            else:
                lines.append(f"  claim: held by job {holder['job_id']} ({holder['state']})")
        if job.get("callback_id"):
            lines.append(f"\n[b]Callback[/b]\n  id {job['callback_id']}")
        return "\n".join(lines)

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_cancel_job(self) -> None:
        self.console.confirm_cancel([self.job_id])

    def action_retry_job(self) -> None:
        if self.detail is not None and self.detail.in_dlq:
            self.console.confirm_dlq_retry([self.job_id])
        else:
            self.console.confirm_retry([self.job_id])
