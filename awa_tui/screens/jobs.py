"""Jobs: the newest jobs matching a filter (state, kind, queue, tag); enter opens one.

Tagged rows are cancelled or retried with c / r; every job the filter matches with C / R
(previewed, confirmed, then exactly the previewed ids); b starts a durable batch operation
(set_priority / move_queue, awa.batch_operations) over the filter, B shows them, x cancels one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from textual.binding import Binding

from awa import config
from awa_ops.console import (
    CANCELLABLE_STATES,
    RETRYABLE_STATES,
    ConsoleActions,
    ConsoleReader,
    JobFilter,
    JobsPage,
)
from awa_tui.screens.base import (
    Column,
    JobTableScreen,
    SortableScreen,
    TaggableTable,
    parse_filter,
    sorted_rows,
)
from awa_tui.screens.modals import PromptScreen
from awa_tui.widgets import TextLine, relative

if TYPE_CHECKING:
    from awa_tui.screens.host import Action

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
  C / R    cancel / retry EVERY job the filter (state, kind, queue, tag) matches:
           shows how many and which, asks, then acts on exactly those
  b        batch operation over the filter's available and scheduled jobs: [b]priority N[/b],
           or [b]queue NAME[/b] optionally followed by [b]priority N[/b]; previews, asks, submits
  B        batch operations and their progress;  x  cancel one (by id)

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
                Binding("c", "cancel_jobs", "Cancel"), Binding("r", "retry_jobs", "Retry"),
                Binding("C", "cancel_matching", "Cancel all matching", show=False),
                Binding("R", "retry_matching", "Retry all matching", show=False),
                Binding("b", "batch_start", "Batch operation", show=False),
                Binding("B", "batch_show", "Batch operations", show=False),
                Binding("x", "batch_cancel", "Cancel batch operation", show=False)]

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
            relative(r["finalized_at"], data.now), ",".join(r["tags"] or [])]) for r in rows],
            follow_top=True)
        note = " (kind/tag/args filters search the newest rows per state and queue)" \
            if data.windowed else ""
        self.query_one("#summary", TextLine).set(
            f"[b]{len(rows)}[/b] jobs: {escape(self.flt.describe())}{note}   "
            f"{self.sort_label()}")

    def action_cancel_jobs(self) -> None:
        self.act_on_selection(self.console.confirm_cancel)

    def action_retry_jobs(self) -> None:
        self.act_on_selection(self.console.confirm_retry)

    # -- filter-wide actions and batch operations ---------------------------------------
    def _filter_for_bulk(self, what: str) -> JobFilter | None:
        """The filter a filter-wide action uses; None (and why, in one line) when it
        cannot: args text is not a column filter, and an empty filter is every job."""
        if self.flt.args:
            self.console.say(f"{what}: filter by state, kind, queue or tag only (args text "
                             "is not an exact filter)")
            return None
        if not (self.flt.state or self.flt.kind or self.flt.queue or self.flt.tag):
            self.console.say(f"{what}: set a filter first (/): state, kind, queue or tag")
            return None
        return self.flt

    def _matching(self, verb: str, states: tuple[str, ...],
                  act: Callable[[ConsoleActions, list[int]], Awaitable[str]]) -> None:
        flt = self._filter_for_bulk(f"{verb} by filter")
        if flt is None:
            return
        if flt.state and flt.state not in states:
            self.console.say(f"{verb} by filter applies to {', '.join(states)} jobs, "
                             f"not {flt.state}")
            return

        async def preview(a: ConsoleActions) -> tuple[str, Action | None]:
            found = await a.matching_ids(states, flt)
            if not found.ids:
                return f"{verb} by filter: no job matches {flt.describe()}", None
            ids = found.ids
            more = " (the first of more: run it again for the rest)" if found.truncated else ""
            shown = ", ".join(str(i) for i in ids[:10]) + (" ..." if len(ids) > 10 else "")
            return (f"{verb.capitalize()} {len(ids)} job(s) matching {flt.describe()}{more}? "
                    f"{shown}", lambda b: act(b, ids))

        self.console.preview_then_confirm(f"{verb} by filter", preview)

    def action_cancel_matching(self) -> None:
        self._matching("cancel", CANCELLABLE_STATES, lambda a, ids: a.cancel_jobs(ids))

    def action_retry_matching(self) -> None:
        self._matching("retry", RETRYABLE_STATES, lambda a, ids: a.retry_jobs(ids))

    def action_batch_start(self) -> None:
        if self.console.refused_read_only("batch operation"):
            return
        flt = self._filter_for_bulk("batch operation")
        if flt is None:
            return

        def answered(text: str | None) -> None:
            if not text:
                return
            parsed = parse_batch_spec(text)
            if isinstance(parsed, str):
                self.console.say(parsed)
                return
            op_kind, spec = parsed

            async def preview(a: ConsoleActions) -> tuple[str, Action | None]:
                count, sample = await a.batch_preview(op_kind, flt, spec)
                if not count:
                    return f"batch operation: no available or scheduled job matches " \
                           f"{flt.describe()}", None
                shown = ", ".join(str(i) for i in sample)
                return (f"{text}: {count} available/scheduled job(s) match "
                        f"{flt.describe()} now (e.g. {shown}). Submit the batch operation?",
                        lambda b: b.batch_submit(op_kind, flt, spec))

            self.console.preview_then_confirm("batch operation", preview)

        self.app.push_screen(PromptScreen(
            f"Batch operation over {escape(self.flt.describe())}: priority N, or queue NAME "
            "optionally followed by priority N"), answered)

    def action_batch_show(self) -> None:
        self.console.show_batch_operations()

    def action_batch_cancel(self) -> None:
        if self.console.refused_read_only("cancel batch operation"):
            return

        def answered(text: str | None) -> None:
            if text:
                self.console.confirm_then(
                    f"Cancel batch operation {text}? What it changed stays changed.",
                    "cancel batch operation", lambda a: a.batch_cancel(text))

        self.app.push_screen(PromptScreen("Cancel which batch operation (id, or its first "
                                          "characters as B shows them)?"), answered)


def parse_batch_spec(text: str) -> tuple[str, dict[str, Any]] | str:
    """``priority N`` -> set_priority; ``queue NAME [priority N]`` -> move_queue; else the
    one-line reason it is not understood."""
    words = text.split()
    usage = (f"not understood: {text!r}; write priority N (1-4), or queue NAME optionally "
             "followed by priority N")
    fields: dict[str, str] = {}
    while len(words) >= 2 and words[0] in ("priority", "queue") and words[0] not in fields:
        fields[words[0]] = words[1]
        words = words[2:]
    if words or not fields:
        return usage
    priority: int | None = None
    if "priority" in fields:
        if not fields["priority"].isdigit() or not 1 <= int(fields["priority"]) <= 4:
            return usage
        priority = int(fields["priority"])
    if "queue" in fields:
        return "move_queue", {"queue": fields["queue"], "priority": priority}
    return "set_priority", {"priority": priority}
