"""One job: args, metadata, progress, every attempt's error and traceback, timestamps,
the callback it waits on, unique key and holder.  Only the actions that apply to the
job's state are offered (no cancel on a finished job, no retry on a running one)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rich.markup import escape
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from awa import config
from awa.job import Timestamp
from awa_ops.console import ConsoleReader, JobDetail
from awa_tui.screens.base import ConsoleScreen
from awa_tui.widgets import relative, stamp

HELP = """\
Everything recorded about one job, every attempt's error with its traceback.

  c        cancel it (asks first; only while it can still run)
  r        retry it (asks first; failed, cancelled or dead-lettered jobs)
  :        open another job by id
  esc      back
"""
TIMESTAMPS = ("created_at", "run_at", "attempted_at", "heartbeat_at", "deadline_at",
              "finalized_at", "callback_timeout_at")
# The states an operator action applies to (the admin functions' own rules).
CANCELLABLE = frozenset({"scheduled", "available", "running", "retryable", "waiting_external"})
RETRYABLE = frozenset({"failed", "cancelled"})
CALLBACK_FIELDS = (("callback_id", "id"), ("callback_timeout_at", "times out"),
                   ("callback_filter", "filter"), ("callback_on_complete", "on complete"),
                   ("callback_on_fail", "on fail"), ("callback_transform", "transform"))


def size_text(n: int) -> str:
    """``512 B``, ``64.0 KiB``, ``9.9 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover (the loop returns at MiB)


def literal(text: str) -> str:
    """``text`` shown as is in Textual's markup: every ``[`` escaped (rich's ``escape``
    leaves ``[{`` alone, which Textual then reads as an unclosed tag)."""
    return text.replace("[", "\\[")


def capped(text: str, cap: int, more_bytes: int = 0, save: str = "") -> str:
    """At most ``cap`` characters of ``text`` (escaped), then ``… 9.9 MiB more`` and how
    to get the whole value."""
    if len(text) > cap:
        more_bytes += len(text[cap:].encode())
        text = text[:cap]
    if not more_bytes:
        return literal(text)
    how = f" (the full value: [b]{literal(save)}[/b])" if save else ""
    return literal(text) + f"\n[b yellow]… {size_text(more_bytes)} more[/]{how}"


def _json(value: Any, cap: int = config.TUI_VALUE_CAP_BYTES, save: str = "") -> str:
    return capped(json.dumps(value, indent=2, sort_keys=True, default=str), cap, save=save)


def column_is_time(value: Any) -> bool:
    return isinstance(value, (datetime, Timestamp))


def _as_datetime(value: Any) -> Any:
    """A job's ``Timestamp`` (awa-pg's ISO string) as the datetime it carries."""
    return value.datetime if isinstance(value, Timestamp) else value


def describe_progress(progress: Any) -> str:
    """``42% page 5 of 12``, then the whole checkpoint as stored; or ``-``."""
    if not progress:
        return "-"
    head = []
    if isinstance(progress, dict):
        if progress.get("percent") is not None:
            head.append(f"{float(progress['percent']):.0f}%")
        if progress.get("message"):
            head.append(escape(str(progress["message"])))
    return ("  " + " ".join(head) + "\n" if head else "") + _json(progress)


def describe_error(err: Any) -> str:
    """One attempt's error: when, whether terminal, the message, and its traceback."""
    if not isinstance(err, dict):
        return "  " + escape(str(err))
    terminal = " [red](terminal)[/]" if err.get("terminal") else ""
    lines = [f"  attempt {err.get('attempt', '?')} at {escape(str(err.get('at', '?')))}{terminal}"]
    lines += [f"    {escape(line)}" for line in str(err.get("error", "")).splitlines() or [""]]
    extra = {k: v for k, v in err.items()
             if k not in ("attempt", "at", "terminal", "error", "traceback")}
    for key, value in extra.items():
        lines.append(f"    [dim]{escape(str(key))}: {escape(str(value))}[/]")
    if err.get("traceback"):
        lines.append("    [dim]traceback:[/]")
        lines += [f"      [dim]{escape(line)}[/]" for line in str(err["traceback"]).splitlines()]
    text = "\n".join(lines)
    # One attempt's error never floods the screen (its markup is ours: cut at a line).
    if len(text) > config.TUI_VALUE_CAP_BYTES:
        cut = text.rfind("\n", 0, config.TUI_VALUE_CAP_BYTES)
        more = len(text[cut:].encode())
        text = text[:cut] + f"\n    [b yellow]… {size_text(more)} more[/]"
    return text


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
        before = self.hidden_actions()
        self.detail = data
        self.query_one("#detail", Static).update(self.describe(data))
        self.sync_chrome()
        if self.hidden_actions() != before:
            self.refresh_bindings()  # the footer offers what applies now

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
        lines.append("actions: " + self.actions_line(data))
        if data.runtime is not None:
            verb = "runs on" if job["state"] == "running" else "last claimed by"
            gone = "" if data.runtime.live else "[b red]"
            lines.append(f"{verb} {gone}{escape(data.runtime.describe(now))}"
                         + ("[/]" if gone else ""))
        if data.in_dlq:
            lines.append(f"DLQ reason [b]{escape(job['dlq_reason'])}[/b] at {stamp(job['dlq_at'])}")
        lines.append("\n[b]Timestamps[/b]")
        for column in TIMESTAMPS:
            if job.get(column) is not None:
                when = _as_datetime(job[column])
                lines.append(f"  {column:<20} {stamp(when)}  ({relative(when, now)})")
        save = f"awa job dump {job['id']} --json > job-{job['id']}.json"
        big = data.oversized

        def whole_or_head(name: str, shown: str) -> str:
            if name in big:  # not fetched whole: its head as stored, and what is left
                return capped(big[name].head, config.TUI_VALUE_CAP_BYTES,
                              big[name].more_bytes, save)
            return shown

        lines.append("\n[b]Args[/b]\n" + whole_or_head("args", _json(job["args"], save=save)))
        lines.append("\n[b]Metadata[/b]\n" + whole_or_head(
            "metadata", _json(job["metadata"], save=save) if job.get("metadata") else "-"))
        lines.append("\n[b]Progress[/b]\n" + whole_or_head("progress",
                                                   describe_progress(job.get("progress"))))
        if "errors" in big:
            lines.append("\n[b]Errors[/b] (too big to show whole, oldest first)\n"
                         + whole_or_head("errors", ""))
        errors = [] if "errors" in big else job.get("errors") or []
        lines.append(f"\n[b]Errors[/b] ({len(errors)}, oldest first)" if errors
                     else "\n[b]Errors[/b]")
        if not errors and "errors" not in big:
            lines.append("  none")
        for err in errors:
            lines.append(describe_error(err))
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
        callback = [(label, job.get(column)) for column, label in CALLBACK_FIELDS
                    if job.get(column) is not None]
        if callback:
            lines.append("\n[b]Callback[/b]")
            for label, value in callback:
                value = _as_datetime(value)
                shown = (f"{stamp(value)}  ({relative(value, now)})" if column_is_time(value)
                         else escape(str(value)))
                lines.append(f"  {label:<12} {shown}")
        return "\n".join(lines)

    # -- which actions apply -------------------------------------------------------
    def why_not(self, action: str) -> str | None:
        """None when ``action`` applies to this job's state, else why it does not."""
        data = self.detail
        if data is None:
            return f"job {self.job_id} is not loaded"
        state = data.job["state"]
        if action == "cancel_job":
            if data.in_dlq:
                return "it is in the DLQ (retry or purge it from the DLQ screen)"
            if state not in CANCELLABLE:
                return f"it is {state} already"
        if action == "retry_job" and not data.in_dlq and state not in RETRYABLE:
            return f"it is {state}: only failed, cancelled or dead-lettered jobs are retried"
        return None

    def hidden_actions(self) -> set[str]:
        return {a for a in ("cancel_job", "retry_job") if self.why_not(a) is not None}

    def actions_line(self, data: JobDetail) -> str:
        offered = [f"[b]{key}[/b] {name}" for key, action, name in
                   (("c", "cancel_job", "cancel"), ("r", "retry_job", "retry"))
                   if self.why_not(action) is None]
        return "  ".join(offered) or "none apply to this job's state"

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_cancel_job(self) -> None:
        why = self.why_not("cancel_job")
        if why:
            self.console.say(f"cancel: not offered for job {self.job_id}: {why}")
            return
        self.console.confirm_cancel([self.job_id])

    def action_retry_job(self) -> None:
        why = self.why_not("retry_job")
        if why:
            self.console.say(f"retry: not offered for job {self.job_id}: {why}")
            return
        if self.detail is not None and self.detail.in_dlq:
            self.console.confirm_dlq_retry([self.job_id])
        else:
            self.console.confirm_retry([self.job_id])
