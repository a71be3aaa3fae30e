"""DLQ: dead-lettered jobs by queue, reason and kind; retry, purge and move, each confirmed."""

from __future__ import annotations

from rich.markup import escape
from textual.binding import Binding

from awa import lifecycle
from awa_ops.console import ConsoleReader, DlqFilter, DlqPage
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

COLUMNS = (Column("tag", " ", 0, width=1), Column("id", "Job", 0, min_width=7, clip=False),
           Column("kind", "Kind", 0, min_width=12, max_width=28),
           Column("queue", "Queue", 2, min_width=8, max_width=20),
           Column("reason", "Reason", 1, min_width=12, max_width=24),
           Column("attempt", "Attempt", 3, min_width=7), Column("dlq_at", "In DLQ", 1, min_width=9),
           Column("error", "Last error", 0, min_width=20, max_width=400))
FILTER_KEYS = ("queue", "kind", "reason")
SORT_FIELDS = {"id": "job_id", "kind": "kind", "queue": "queue", "reason": "dlq_reason",
               "attempt": "attempt", "dlq_at": "dlq_at", "error": "last_error"}

HELP = """\
Jobs in the dead letter queue, newest first. They are never claimed until
an operator retries them.

  s / S    sort by the next column / reverse (or click a header); default newest first
  /        filter, e.g. [b]queue=email reason=terminal_error kind=send_email[/b]
  enter    open the entry: args, every attempt's error
  space    tag rows for bulk actions
  r        retry the tagged entries / the one under the cursor (asks first)
  x        purge them: delete for good (asks first)
  m        move the failed jobs of a queue into the DLQ with a reason (asks first)
"""


class DlqScreen(JobTableScreen):
    TITLE = "DLQ"
    TABLE_ID = "dlq"
    COLUMNS = COLUMNS
    NOTHING_SELECTED = "no DLQ entry selected"
    HELP = HELP
    FILTER_HINT = "queue=... kind=... reason=...   (empty: everything)"
    SORTABLE = tuple(SORT_FIELDS)
    BINDINGS = [Binding("slash", "filter", "Filter"), *SortableScreen.SORT_BINDINGS,
                Binding("r", "retry", "Retry"), Binding("x", "purge", "Purge"),
                Binding("m", "move", "Move failed→DLQ")]

    def __init__(self) -> None:
        super().__init__("dlq_at", reverse=True)
        self.flt = DlqFilter()
        self.data: DlqPage | None = None

    def apply_filter(self, text: str) -> str | None:
        values, error = parse_filter(text, FILTER_KEYS)
        if error:
            return error
        self.filter_text = text
        self.flt = DlqFilter(**values)
        return None

    async def fetch(self, reader: ConsoleReader) -> DlqPage:
        return await reader.dlq(self.flt)

    def redraw(self) -> None:
        data = self.data
        if data is None:
            return
        field = SORT_FIELDS[self.sort_key]
        # Newest first by default; equal times fall back to the newest id.
        rows = sorted_rows(sorted(data.rows, key=lambda r: r["job_id"], reverse=self.reverse),
                           lambda r: r[field], self.reverse)
        self.query_one(TaggableTable).replace_rows([(str(r["job_id"]), [
            str(r["job_id"]), r["kind"], r["queue"], r["dlq_reason"],
            f"{r['attempt']}/{r['max_attempts']}", relative(r["dlq_at"], data.now),
            " ".join((r["last_error"] or "").split())]) for r in rows])
        reasons = "  ".join(f"{escape(reason)} [b]{n}[/b]"
                            for reason, n in sorted(data.by_reason.items()))
        self.query_one("#summary", TextLine).set(
            f"[b]{len(rows)}[/b] entries: {self.flt.describe()}"
            + (f"   by reason: {reasons}" if reasons else "") + f"   {self.sort_label()}")

    def action_retry(self) -> None:
        self.act_on_selection(self.console.confirm_dlq_retry)

    def action_purge(self) -> None:
        self.act_on_selection(self.console.confirm_dlq_purge)

    def action_move(self) -> None:
        if self.console.refused_read_only("DLQ move"):
            return
        table = self.query_one(TaggableTable)
        default = self.flt.queue or ""
        key = table.current_key()
        if not default and key is not None:
            default = str(table.get_cell(key, "queue"))

        def with_queue(queue: str | None) -> None:
            if not queue:
                return

            def with_reason(reason: str | None) -> None:
                if reason:
                    self.console.confirm_dlq_move(queue, reason)

            self.app.push_screen(PromptScreen(
                f"Reason recorded on the moved entries (queue {queue!r}):",
                lifecycle.DLQ_MANUAL), with_reason)

        self.app.push_screen(PromptScreen(
            "Move every failed job of which queue into the DLQ?", default), with_queue)
