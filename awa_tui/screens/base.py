"""What every console screen shares: status line, banner, filter bar, notice, footer.

The app drives refreshes; a screen only says what to read (``fetch``, run on
the app's single database session) and how to show it (``show``), and may
tick its clocks every second between refreshes (``tick``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer

from awa_tui.widgets import Banner, FilterBar, Notice, StatusLine, TextLine

if TYPE_CHECKING:
    from awa_ops.console import ConsoleReader
    from awa_tui.screens.host import ConsoleHost

TAG_MARK = "●"
# Keys the footer always shows first, whatever the width: help and quit.
PINNED_KEYS = ("question_mark", "q")
# Actions that change the database: hidden from the footer (and refused in one
# line, without a confirmation) when the console runs with --read-only.
MUTATING_ACTIONS = {"cancel_jobs": "cancel", "cancel_job": "cancel", "retry_jobs": "retry",
                    "retry_job": "retry", "retry": "DLQ retry", "purge": "DLQ purge",
                    "move": "DLQ move", "pause_resume": "pause / resume",
                    "retry_matching": "retry by filter", "cancel_matching": "cancel by filter",
                    "batch_start": "batch operation", "batch_cancel": "cancel batch operation"}
SCROLLBAR = 2  # a table keeps room for its vertical scrollbar


@dataclass(frozen=True)
class Column:
    """A table column and how it gives way on a narrow terminal.

    ``priority`` 0 columns are the reason the screen exists and are dropped
    last; higher numbers go first.  A ``width`` column is fixed (its values
    tick every second, so it must never be re-measured); otherwise the column
    sizes to its content, which is cut with an ellipsis at ``min_width`` plus
    its share of the spare room (up to ``max_width``; without one it does not grow).
    """

    key: str
    label: str
    priority: int = 0
    width: int | None = None
    min_width: int = 6
    max_width: int | None = None
    clip: bool = True  # False for a row's key column (e.g. a job id): never cut

    @property
    def budget(self) -> int:
        return self.width if self.width is not None else max(self.min_width, len(self.label))


def fit_columns(columns: Sequence[Column], available: int, padding: int = 1,
                wanted: dict[str, int] | None = None) -> tuple[list[Column], dict[str, int]]:
    """The columns that fit in ``available`` cells (in their declared order),
    and the content width each auto-sized one may use: its budget, grown
    towards what its values need (``wanted``) while there is room."""
    chosen: set[str] = set()
    used = 0
    for column in sorted(columns, key=lambda c: c.priority):  # stable: declared order breaks ties
        cost = column.budget + 2 * padding
        if used + cost <= available or not chosen:
            chosen.add(column.key)
            used += cost
    shown = [c for c in columns if c.key in chosen]
    caps = {c.key: c.budget for c in shown if c.width is None}
    spare = max(available - used, 0)
    for column in sorted((c for c in shown if c.width is None), key=lambda c: c.priority):
        if spare <= 0:
            break
        if column.max_width is None:
            continue
        need = min(column.max_width, (wanted or {}).get(column.key, column.max_width))
        grant = min(max(need - caps[column.key], 0), spare)
        caps[column.key] += grant
        spare -= grant
    return shown, caps


def clip(value: Any, width: int) -> Any:
    """A cell cut to ``width`` cells with an ellipsis (rich Text keeps its style)."""
    if isinstance(value, Text):
        if value.cell_len <= width:
            return value
        cut = value.copy()
        cut.truncate(width, overflow="ellipsis")
        return cut
    text = "" if value is None else str(value)
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


class ResponsiveTable(DataTable[Any]):
    """A DataTable that shows the columns fitting the terminal, by priority.

    Rows are given with a cell for every declared column; the table keeps the
    ones on screen (cut to their width), and re-lays itself out on resize.
    """

    def __init__(self, columns: Sequence[Column] = (), **kwargs: Any) -> None:
        kwargs.setdefault("cursor_type", "row")
        kwargs.setdefault("zebra_stripes", True)
        super().__init__(**kwargs)
        self.all_columns: tuple[Column, ...] = tuple(columns)
        self.shown: list[Column] = []
        self.caps: dict[str, int] = {}
        self.wanted: dict[str, int] = {}  # the widest value seen per column, uncut
        self._index: list[int] = []
        self.fit(self.available_width())

    def available_width(self) -> int:
        try:
            width = self.app.size.width
        except Exception:  # not attached to an app yet (compose)
            return 10_000
        return max(width - SCROLLBAR, 20)

    def fit(self, available: int) -> bool:
        """Lay the columns out for this width; True when the set of columns changed
        (the table was emptied and the caller must put its rows back)."""
        shown, caps = fit_columns(self.all_columns, available, self.cell_padding, self.wanted)
        if [c.key for c in shown] == [c.key for c in self.shown] and caps == self.caps:
            return False
        self.shown, self.caps = shown, caps
        keys = [c.key for c in self.all_columns]
        self._index = [keys.index(c.key) for c in shown]
        self.clear(columns=True)
        for column in shown:
            self.add_column(column.label, key=column.key, width=column.width)
        return True

    def shown_keys(self) -> list[str]:
        return [c.key for c in self.shown]

    def project(self, cells: Sequence[Any]) -> list[Any]:
        """The cells of the columns on screen, each cut to its column."""
        out = []
        for column, index in zip(self.shown, self._index):
            value = cells[index] if index < len(cells) else ""
            natural = value.cell_len if isinstance(value, Text) else len(str(value or ""))
            if natural > self.wanted.get(column.key, 0):
                self.wanted[column.key] = natural
            limit = column.width if column.width is not None else self.caps.get(column.key)
            out.append(clip(value, limit) if limit and column.clip else value)
        return out

    def put_row(self, *cells: Any, key: str | None = None) -> None:
        self.add_row(*self.project(cells), key=key)

    def put_cell(self, row_key: str, column_key: str, cells: Sequence[Any]) -> None:
        index = [c.key for c in self.shown].index(column_key)
        self.update_cell(row_key, column_key, self.project(cells)[index])


class ConsoleFooter(Footer):
    """The footer with ``?`` and ``q`` first, so a narrow terminal never loses them,
    and without the keys a read-only console cannot use."""

    def compose(self) -> ComposeResult:
        read_only = bool(getattr(self.app, "read_only", False))
        screen = self.screen
        hidden = screen.hidden_actions() if isinstance(screen, ConsoleScreen) else set()
        keys = [w for w in super().compose()
                if not (read_only and getattr(w, "action", "") in MUTATING_ACTIONS)
                and getattr(w, "action", "") not in hidden]
        pinned = [w for w in keys if getattr(w, "key", None) in PINNED_KEYS]
        yield from pinned
        yield from (w for w in keys if w not in pinned)


class ConsoleScreen(Screen[Any]):
    TITLE = ""
    HELP = ""
    FILTER_HINT = "filter"

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""

    @property
    def console(self) -> ConsoleHost:
        """The console showing this screen (``awa_tui.app.AwaConsole``)."""
        return self.app  # type: ignore[return-value]  # Textual types it as App[Any]

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Banner(id="banner")
        yield from self.body()
        yield FilterBar(id="filter", placeholder=self.FILTER_HINT)
        yield Notice(id="notice")
        yield ConsoleFooter()

    def body(self) -> Iterable[Widget]:
        return ()

    def composed(self) -> bool:
        """Mounted with its widgets (not yet composed, or torn down at exit, is False)."""
        return self.is_mounted and bool(self.query(StatusLine))

    def on_mount(self) -> None:
        self.query_one(FilterBar).display = False
        self.sync_chrome()

    def on_resize(self, event: events.Resize) -> None:
        self.refit()

    def refit(self) -> None:
        """Lay the tables out again for the terminal's width and what their values need."""
        changed: list[tuple[ResponsiveTable, int]] = []
        for table in self.query(ResponsiveTable):
            row = table.cursor_row
            if table.fit(table.available_width()):
                changed.append((table, row))
        if changed:
            self.relayout()
            for table, row in changed:  # the rows come back in the same order
                if table.row_count:
                    table.move_cursor(row=min(row, table.row_count - 1), animate=False)

    def relayout(self) -> None:
        """The tables changed their columns (the terminal was resized): put the rows back."""

    def on_screen_resume(self) -> None:
        self.sync_chrome()
        self.console.request_refresh()

    def sync_chrome(self) -> None:
        self.query_one(StatusLine).set(self.console.status_text(self.TITLE))
        self.query_one(Banner).show(self.console.problem or self.problem())
        self.query_one(Notice).set(self.console.notice)

    def hidden_actions(self) -> set[str]:
        """Actions the footer leaves out here (they do not apply to what is shown)."""
        return set()

    def problem(self) -> str | None:
        """A screen-specific banner (e.g. no leader); the app's own problems come first."""
        return None

    # -- data -------------------------------------------------------------------
    async def fetch(self, reader: ConsoleReader) -> Any:
        raise NotImplementedError

    def show(self, data: Any) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        """Called every second between refreshes (not when frozen)."""

    # -- filter -------------------------------------------------------------------
    # Focus moves at once (``set_focus``), not after the app's next message (``focus()``):
    # the next key typed is read by what has focus then.
    def action_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.value = self.filter_text
        bar.display = True
        self.set_focus(bar)

    def filter_submitted(self, value: str) -> None:
        """Enter in the filter bar (called at once, see FilterBar.action_submit)."""
        self.query_one(FilterBar).display = False
        error = self.apply_filter(value.strip())
        if error:
            self.console.say(error)
        self.focus_main()
        self.console.request_refresh()

    def apply_filter(self, text: str) -> str | None:
        """Take a new filter; returns a one-line error for bad input."""
        self.filter_text = text
        return None

    def focus_main(self) -> None:
        tables = self.query(DataTable)
        if tables:
            self.set_focus(tables.first())


class SortableScreen(ConsoleScreen):
    """``s`` sorts by the next column, ``S`` reverses, a header click sorts by that column."""

    SORTABLE: tuple[str, ...] = ()
    SORT_BINDINGS = [Binding("s", "sort", "Sort"), Binding("S", "reverse", "Reverse", show=False)]

    def __init__(self, sort_key: str, reverse: bool = False) -> None:
        super().__init__()
        self.sort_key = sort_key
        self.reverse = reverse

    def redraw(self) -> None:
        raise NotImplementedError

    def sort_label(self) -> str:
        return f"sort: {self.sort_key} {'desc' if self.reverse else 'asc'}"

    def action_sort(self) -> None:
        self.sort_key = self.SORTABLE[(self.SORTABLE.index(self.sort_key) + 1) % len(self.SORTABLE)]
        self.redraw()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self.redraw()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key in self.SORTABLE:
            self.reverse = not self.reverse if key == self.sort_key else False
            self.sort_key = key
            self.redraw()



class JobTableScreen(SortableScreen):
    """A summary line over a taggable table keyed by job id: enter opens the job,
    bulk actions act on the tagged rows (else the row under the cursor)."""

    TABLE_ID = ""
    COLUMNS: tuple[Column, ...] = ()
    NOTHING_SELECTED = "no job selected"

    def __init__(self, sort_key: str, reverse: bool = False) -> None:
        super().__init__(sort_key, reverse)
        self.data: Any = None

    def body(self) -> Iterable[Widget]:
        yield TextLine(id="summary")
        yield TaggableTable(self.COLUMNS, id=self.TABLE_ID)

    def relayout(self) -> None:
        self.redraw()

    def show(self, data: Any) -> None:
        self.data = data
        self.redraw()
        self.sync_chrome()

    def selected_ids(self) -> list[int]:
        return [int(k) for k in self.query_one(TaggableTable).selection()]

    def act_on_selection(self, action: Callable[[list[int]], None]) -> None:
        ids = self.selected_ids()
        if ids:
            action(ids)
        else:
            self.console.say(self.NOTHING_SELECTED)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.console.open_job(int(event.row_key.value))


def sorted_rows(rows: list[Any], key: Callable[[Any], Any], reverse: bool) -> list[Any]:
    """Sorted by ``key``; rows whose key is None (no value) always go last."""
    known = [r for r in rows if key(r) is not None]
    return sorted(known, key=key, reverse=reverse) + [r for r in rows if key(r) is None]


def parse_filter(text: str, keys: tuple[str, ...], bare: dict[str, str] | None = None
                 ) -> tuple[dict[str, str | None], str | None]:
    """``key=value`` words into a dict; a bare word matching ``bare`` maps to its key."""
    values: dict[str, str | None] = {k: None for k in keys}
    for word in text.split():
        if "=" in word:
            key, _, value = word.partition("=")
            if key not in keys:
                return values, (f"unknown filter {key!r}: use {', '.join(k + '=' for k in keys)}")
            values[key] = value or None
        elif bare and word in bare:
            values[bare[word]] = word
        else:
            return values, (f"cannot read {word!r}: write filters as "
                            f"{' '.join(k + '=...' for k in keys)}")
    return values, None


TAG_COLUMN = Column("tag", " ", 0, width=1)


class TaggableTable(ResponsiveTable):
    """A row-cursor table whose first column marks rows tagged with space.

    Its rows are given without the tag cell: a cell for every declared column
    after it."""

    BINDINGS = [Binding("space", "toggle_tag", "Tag", show=True),
                Binding("home,ctrl+home", "top", "Top", show=False)]

    class Scrolled(Message):
        """Other rows came into view (their ticking cells may be behind)."""

    def action_top(self) -> None:
        """Home: the first row, read again now (the newest, on a newest-first list), not
        the page of the last read.  (A row table's own Home only scrolls to the left.)"""
        self.action_scroll_top()
        self.scroll_to(y=0, animate=False)
        screen = self.screen
        if isinstance(screen, ConsoleScreen):
            screen.console.request_refresh()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if int(old) != int(new):
            self.post_message(self.Scrolled())

    def update_visible(self, cells_of: Callable[[str], list[Any] | None]) -> None:
        """Refresh the cells of the rows on screen only: cheap enough for every second."""
        columns = self.shown_keys()[1:]
        top = int(self.scroll_y)
        for index in range(top, min(top + self.size.height, self.row_count)):
            key = self.coordinate_to_cell_key(Coordinate(index, 0)).row_key.value
            if key is None:
                continue
            cells = cells_of(key)
            if cells is None:
                continue
            for column, old, value in zip(columns, self.get_row_at(index)[1:],
                                          self.project([" ", *cells])[1:]):
                if old != value:
                    self.update_cell(key, column, value)

    def __init__(self, columns: Sequence[Column] = (), **kwargs: Any) -> None:
        super().__init__((TAG_COLUMN, *(c for c in columns if c.key != "tag")), **kwargs)
        self.tagged: set[str] = set()

    def action_toggle_tag(self) -> None:
        key = self.current_key()
        if key is None:
            return
        if key in self.tagged:
            self.tagged.discard(key)
        else:
            self.tagged.add(key)
        self.update_cell(key, "tag", TAG_MARK if key in self.tagged else " ")
        if self.cursor_row < self.row_count - 1:
            self.move_cursor(row=self.cursor_row + 1)

    def current_key(self) -> str | None:
        if self.row_count == 0:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def selection(self) -> list[str]:
        """The tagged rows (still present), else the row under the cursor."""
        # Every row is added with its key, so no key is None.
        present = {row.key.value for row in self.ordered_rows if row.key.value is not None}
        tagged = [k for k in self.tagged if k in present]
        if tagged:
            return sorted(tagged, key=lambda k: int(k) if k.isdigit() else k)
        key = self.current_key()
        return [key] if key is not None else []

    def replace_rows(self, rows: list[tuple[str, list[Any]]], key_column: str = "id",
                     lazy: bool = False, follow_top: bool = False) -> None:
        """Show exactly these rows in this order, touching only what changed.

        The cursor stays on its row's key, wherever that row moves; with ``follow_top``,
        a cursor on the first row stays on the first row (and the view at the top), so a
        newest-first list keeps showing the newest rows as they arrive.

        Adding a row makes the table measure it, which is what costs CPU; so
        rows still present are updated cell by cell, and the order is set by
        sorting on ``key_column`` (the column holding each row's key).  With
        ``lazy`` only the rows on screen are brought up to date (the rest catch
        up when scrolled into view): for tables whose every row changes every
        second.  Columns whose values keep changing should have fixed widths.
        """
        # Every row is added with its key, so no key is None.
        present = {row.key.value for row in self.ordered_rows if row.key.value is not None}
        wanted = dict(rows)
        gone, new = present - wanted.keys(), wanted.keys() - present
        self.tagged &= wanted.keys()
        keep = self.current_key()
        at_top = follow_top and self.cursor_row == 0
        if len(gone) + len(new) > max(len(rows), 1) // 2:
            self.clear()
            for key, cells in rows:
                self.put_row(TAG_MARK if key in self.tagged else " ", *cells, key=key)
        else:
            for key in gone:
                self.remove_row(key)
            for key in new:
                self.put_row(TAG_MARK if key in self.tagged else " ", *wanted[key], key=key)
            order = {key: i for i, (key, _) in enumerate(rows)}
            self.sort(key_column, key=lambda value: order[str(value)])
            if lazy:
                self.update_visible(wanted.get)
            else:
                columns = self.shown_keys()[1:]
                for key, cells in rows:
                    if key not in new:
                        for column, old, value in zip(columns, self.get_row(key)[1:],
                                                      self.project([" ", *cells])[1:]):
                            if old != value:
                                self.update_cell(key, column, value)
        if at_top and self.row_count:
            self.move_cursor(row=0, animate=False)
            self.scroll_to(y=0, animate=False)
        elif keep is not None and keep in wanted:
            self.move_cursor(row=self.get_row_index(keep), animate=False)
