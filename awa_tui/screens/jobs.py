"""Jobs: the newest jobs matching a filter (state, kind, queue, tag); enter opens one."""

from __future__ import annotations

from rich.markup import escape
from textual.binding import Binding

from awa import config
from awa_ops.console import ConsoleReader, JobFilter, JobsPage
from awa_tui.screens.base import (
    Column,
    JobTableScreen,
    SortableScreen,
    TaggableTable,
    parse_filter,
    sorted_rows,
)
from awa_tui.widgets import TextLine, relative

COLUMNS = (Column("tag", " ", 0, width=1), Column("id", "Job", 0, min_width=7, clip=False),
           Column("kind", "Kind", 0, min_width=12, max_width=32),
           Column("queue", "Queue", 1, min_width=8, max_width=20),
           Column("state", "State", 0, min_width=9, max_width=16),
           Column("attempt", "Attempt", 2, min_width=7),
           Column("priority", "Pri", 4, min_width=3), Column("created", "Created", 1, min_width=10),
           Column("finished", "Finished", 3, min_width=10),
           Column("tags", "Tags", 5, min_width=8, max_width=30))
FILTER_KEYS = ("state", "kind", "queue", "tag")
SORT_FIELDS = {"id": "id", "kind": "kind", "queue": "queue", "state": "state",
               "attempt": "attempt", "priority": "priority", "created": "created_at",
               "finished": "finalized_at"}

HELP = """\
The newest jobs matching the filter, newest first.

  s / S    sort by the next column / reverse (or click a header); default newest first
  /        filter, e.g. [b]state=failed queue=email[/b] or just [b]failed[/b];
           keys: state= kind= queue= tag= ; other words are text the job's args
           contain, e.g. [b]failed alice@example.com[/b]; empty shows all jobs
  enter    open the job: args, metadata, progress, errors per attempt, unique key
  space    tag a row for bulk actions
  c        cancel the tagged jobs / the one under the cursor (asks first)
  r        retry them (failed, cancelled, retryable jobs run again; asks first)

State and queue filters use indexes and are exact; kind, tag and args text
look through the newest rows of each state and queue.
"""


class JobsScreen(JobTableScreen):
    TITLE = "Jobs"
    TABLE_ID = "jobs"
    COLUMNS = COLUMNS
    HELP = HELP
    FILTER_HINT = "state=... kind=... queue=... tag=... or args text   (empty: all jobs)"
    SORTABLE = tuple(SORT_FIELDS)
    BINDINGS = [Binding("slash", "filter", "Filter"), *SortableScreen.SORT_BINDINGS,
                Binding("c", "cancel_jobs", "Cancel"), Binding("r", "retry_jobs", "Retry")]

    def __init__(self) -> None:
        super().__init__("id", reverse=True)
        self.flt = JobFilter()
        self.data: JobsPage | None = None

    def set_filter(self, flt: JobFilter) -> None:
        self.flt = flt
        self.filter_text = flt.words()

    def apply_filter(self, text: str) -> str | None:
        # key=value words and bare state names filter by column; the other words are text
        # the args contain (joined with single spaces).
        words = text.split()
        keyed = [w for w in words if "=" in w or w in config.JOB_STATES]
        args = " ".join(w for w in words if w not in keyed) or None
        values, error = parse_filter(" ".join(keyed), FILTER_KEYS,
                                     {s: "state" for s in config.JOB_STATES})
        if error:
            return error
        if values["state"] and values["state"] not in config.JOB_STATES:
            return f"unknown state {values['state']!r}: one of {', '.join(config.JOB_STATES)}"
        self.filter_text = text
        self.flt = JobFilter(**values, args=args)
        return None

    async def fetch(self, reader: ConsoleReader) -> JobsPage:
        return await reader.jobs(self.flt)

    def redraw(self) -> None:
        data = self.data
        if data is None:
            return
        field = SORT_FIELDS[self.sort_key]
        rows = sorted_rows(data.rows, lambda r: r[field], self.reverse)
        self.query_one(TaggableTable).replace_rows([(str(r["id"]), [
            str(r["id"]), r["kind"], r["queue"], r["state"], f"{r['attempt']}/{r['max_attempts']}",
            str(r["priority"]), relative(r["created_at"], data.now),
            relative(r["finalized_at"], data.now), ",".join(r["tags"] or [])]) for r in rows])
        note = " (kind/tag/args filters search the newest rows per state and queue)" \
            if data.windowed else ""
        self.query_one("#summary", TextLine).set(
            f"[b]{len(rows)}[/b] jobs: {escape(self.flt.describe())}{note}   "
            f"{self.sort_label()}")

    def action_cancel_jobs(self) -> None:
        self.act_on_selection(self.console.confirm_cancel)

    def action_retry_jobs(self) -> None:
        self.act_on_selection(self.console.confirm_retry)
