"""DLQ: dead-lettered jobs by queue, reason and kind; retry, purge and move, each confirmed.

``g`` shows the same entries grouped by cause (``awa.fingerprint``: one poison bug
is one group whatever file, id or value its errors name): count, first and last seen,
kinds and queues.  Enter on a group lists its members; ``r`` / ``x`` retry or purge
every member of the tagged groups (or the one under the cursor).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from textual.binding import Binding
from textual.widgets import DataTable

from awa import lifecycle
from awa.fingerprint import ErrorGroup
from awa_ops.console import ConsoleActions, ConsoleReader, DlqFilter, DlqPage
from awa_tui.screens.base import (
    TAG_MARK,
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
           Column("kind", "Kind", 0, min_width=12, max_width=28),
           Column("queue", "Queue", 2, min_width=8, max_width=20),
           Column("reason", "Reason", 1, min_width=12, max_width=24),
           Column("attempt", "Attempt", 3, min_width=7), Column("dlq_at", "In DLQ", 1, min_width=9),
           Column("error", "Last error", 0, min_width=20, max_width=400))
FILTER_KEYS = ("queue", "kind", "reason", "group")
SORT_FIELDS = {"id": "job_id", "kind": "kind", "queue": "queue", "reason": "dlq_reason",
               "attempt": "attempt", "dlq_at": "dlq_at", "error": "last_error"}

HELP = """\
Jobs in the dead letter queue, newest first. They are never claimed until
an operator retries them.

  s / S    sort by the next column / reverse (or click a header); default newest first
  /        filter, e.g. [b]queue=email reason=terminal_error kind=send_email[/b]
           ([b]group=<fingerprint>[/b]: the members of one cause)
  g        group the entries by cause (one poison bug, one row)
  enter    open the entry: args, every attempt's error
  space    tag rows for bulk actions
  r        retry the tagged entries / the one under the cursor (asks first)
  x        purge them: delete for good (asks first)
  R / X    retry / purge every entry the filter matches (with a filter set):
           previewed, confirmed, then exactly the previewed entries
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
                Binding("g", "groups", "Groups"),
                Binding("r", "retry", "Retry"), Binding("x", "purge", "Purge"),
                Binding("R", "retry_matching", "Retry all matching", show=False),
                Binding("X", "purge_matching", "Purge all matching", show=False),
                Binding("m", "move", "Move failed→DLQ")]

    def __init__(self) -> None:
        super().__init__("dlq_at", reverse=True)
        self.flt = DlqFilter()
        self.data: DlqPage | None = None

    def set_filter(self, flt: DlqFilter) -> None:
        self.flt = flt
        self.filter_text = flt.words()

    def action_groups(self) -> None:
        """The entries grouped by cause, under the same queue/kind/reason filter."""
        base = DlqFilter(queue=self.flt.queue, kind=self.flt.kind, reason=self.flt.reason)

        def drilled(group: str | None) -> None:
            if group:
                self.set_filter(DlqFilter(queue=base.queue, kind=base.kind, reason=base.reason,
                                          group=group))
                self.console.request_refresh()

        self.app.push_screen(DlqGroupsScreen(base), drilled)

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
        cause = ""
        if self.flt.group:
            group = data.group(self.flt.group)
            cause = (f"   cause: {escape(group.pattern[:60])}" if group is not None
                     else "   cause: no longer in the DLQ")
        elif data.groups:
            cause = f"   [b]{len(data.groups)}[/b] cause(s) (g)"
        self.query_one("#summary", TextLine).set(
            f"[b]{len(rows)}[/b] entries: {escape(self.flt.describe())}{cause}"
            + (f"   by reason: {reasons}" if reasons else "") + f"   {self.sort_label()}")

    def action_retry(self) -> None:
        self.act_on_selection(self.console.confirm_dlq_retry)

    def action_purge(self) -> None:
        self.act_on_selection(self.console.confirm_dlq_purge)

    def _matching(self, verb: str, act: Callable[[ConsoleActions, list[int]],
                                                 Awaitable[str]]) -> None:
        """Preview what the filter selects (awa.bulk_selection's rule, as ``awa dlq
        retry-bulk|purge``), ask with the count and ids, then act on exactly those entries."""
        flt = self.flt
        if not flt.words():
            self.console.say(f"DLQ {verb} by filter: set a filter first (/): queue, kind, "
                             "reason or group")
            return

        async def preview(a: ConsoleActions) -> tuple[str, Action | None]:
            ids, more = await a.dlq_matching(flt)
            if not ids:
                return f"DLQ {verb} by filter: no entry matches {flt.describe()}", None
            shown = ", ".join(str(i) for i in ids[:10]) + (" ..." if len(ids) > 10 else "")
            rest = " (the first of more: run it again for the rest)" if more else ""
            return (f"{verb.capitalize()} {len(ids)} DLQ entr{'y' if len(ids) == 1 else 'ies'} "
                    f"matching {flt.describe()}{rest}? {shown}", lambda b: act(b, ids))

        self.console.preview_then_confirm(f"DLQ {verb} by filter", preview)

    def action_retry_matching(self) -> None:
        self._matching("retry", lambda a, ids: a.dlq_retry(ids))

    def action_purge_matching(self) -> None:
        self._matching("purge", lambda a, ids: a.dlq_purge(ids))

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


GROUP_COLUMNS = (Column("tag", " ", 0, width=1), Column("count", "Count", 0, min_width=5),
                 Column("error", "Error (normalized)", 0, min_width=24, max_width=400),
                 Column("kinds", "Kinds", 1, min_width=10, max_width=32),
                 Column("queues", "Queues", 2, min_width=8, max_width=24),
                 Column("first", "First seen", 3, min_width=10),
                 Column("last", "Last seen", 1, min_width=10),
                 Column("fingerprint", "Fingerprint", 4, width=12))
GROUP_SORT_FIELDS = {"count": lambda g: g.count, "error": lambda g: g.pattern,
                     "kinds": lambda g: ",".join(sorted(g.kinds)),
                     "queues": lambda g: ",".join(sorted(g.queues)),
                     "first": lambda g: g.first_seen, "last": lambda g: g.last_seen,
                     "fingerprint": lambda g: g.fingerprint}
GROUP_KEY = "cause-"  # row keys: never all digits, so never taken for a job id

GROUPS_HELP = """\
The DLQ entries grouped by cause: errors that differ only in numbers, ids,
paths, file names, hex or quoted values are one cause (one poison bug, one row).
Counted over the newest entries the DLQ screen reads.

  s / S    sort by the next column / reverse; default biggest first
  enter    list the members of the group under the cursor
  space    tag groups
  r        retry every member of the tagged (or current) groups; asks first
  x        purge every member of them: delete for good; asks first
  esc      back to the entries
"""


class DlqGroupsScreen(JobTableScreen):
    """One row per cause; dismissed with a fingerprint to drill into its members."""

    TITLE = "DLQ causes"
    TABLE_ID = "dlq-groups"
    COLUMNS = GROUP_COLUMNS
    NOTHING_SELECTED = "no group selected"
    HELP = GROUPS_HELP
    SORTABLE = tuple(GROUP_SORT_FIELDS)
    BINDINGS = [Binding("escape", "back", "Back"), *SortableScreen.SORT_BINDINGS,
                Binding("r", "retry", "Retry group"), Binding("x", "purge", "Purge group")]

    def __init__(self, flt: DlqFilter) -> None:
        super().__init__("count", reverse=True)
        self.flt = flt
        self.data: DlqPage | None = None

    async def fetch(self, reader: ConsoleReader) -> DlqPage:
        return await reader.dlq(self.flt)

    def cells(self, g: ErrorGroup, now: datetime) -> list[Any]:
        return [str(g.count), " ".join(g.pattern.split()) or "(no error text)",
                ",".join(sorted(g.kinds)), ",".join(sorted(g.queues)),
                relative(g.first_seen, now), relative(g.last_seen, now), g.fingerprint]

    def redraw(self) -> None:
        data = self.data
        if data is None:
            return
        key = GROUP_SORT_FIELDS[self.sort_key]
        groups = sorted_rows(sorted(data.groups, key=lambda g: g.pattern), key, self.reverse)
        # A few rows: laid out afresh each refresh (tags and the cursor's row kept).
        table = self.query_one(TaggableTable)
        keep = table.current_key()
        rows = [(GROUP_KEY + g.fingerprint, self.cells(g, data.now)) for g in groups]
        table.tagged &= {key for key, _ in rows}
        table.clear()
        for key, cells in rows:
            table.put_row(TAG_MARK if key in table.tagged else " ", *cells, key=key)
        keys = [key for key, _ in rows]
        if keep in keys:
            table.move_cursor(row=keys.index(keep), animate=False)
        more = (f" (of the newest {data.scanned} entries)" if data.truncated else "")
        self.query_one("#summary", TextLine).set(
            f"[b]{len(groups)}[/b] cause(s) of [b]{data.scanned}[/b] entries{more}: "
            f"{escape(self.flt.describe())}   {self.sort_label()}")

    def selected_groups(self) -> list[ErrorGroup]:
        if self.data is None:
            return []
        chosen = {k.removeprefix(GROUP_KEY) for k in self.query_one(TaggableTable).selection()}
        return [g for g in self.data.groups if g.fingerprint in chosen]

    def selected_ids(self) -> list[int]:
        return sorted({i for g in self.selected_groups() for i in g.job_ids})

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.prevent_default()  # a group is not a job: the base class's handler stays out
        key = event.row_key.value
        if key:
            self.dismiss(key.removeprefix(GROUP_KEY))

    def action_back(self) -> None:
        self.dismiss(None)

    def _confirm(self, verb: str, description: str, purge: bool) -> None:
        groups = self.selected_groups()
        if not groups:
            self.console.say(self.NOTHING_SELECTED)
            return
        ids = self.selected_ids()
        what = (f"cause {groups[0].pattern[:60]!r}" if len(groups) == 1
                else f"{len(groups)} causes")
        then = "They are deleted for good." if purge else "They become available again."
        self.console.confirm_then(
            f"{verb} all {len(ids)} DLQ job(s) of {what}? {then}", description,
            (lambda a: a.dlq_purge(ids)) if purge else (lambda a: a.dlq_retry(ids)))

    def action_retry(self) -> None:
        self._confirm("Retry", "DLQ retry", purge=False)

    def action_purge(self) -> None:
        self._confirm("Purge", "DLQ purge", purge=True)
