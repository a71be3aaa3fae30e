"""What every console screen shares: status line, banner, filter bar, notice, footer.

The app drives refreshes; a screen only says what to read (``fetch``, run on
the app's single database session) and how to show it (``show``), and may
tick its clocks every second between refreshes (``tick``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

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
    from awa_tui.app import AwaConsole

TAG_MARK = "●"


class ConsoleScreen(Screen):
    TITLE = ""
    HELP = ""
    FILTER_HINT = "filter"

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""

    @property
    def console(self) -> AwaConsole:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Banner(id="banner")
        yield from self.body()
        yield FilterBar(id="filter", placeholder=self.FILTER_HINT)
        yield Notice(id="notice")
        yield Footer()

    def body(self) -> Iterable[Widget]:
        return ()

    def composed(self) -> bool:
        """Mounted with its widgets (not yet composed, or torn down at exit, is False)."""
        return self.is_mounted and bool(self.query(StatusLine))

    def on_mount(self) -> None:
        self.query_one(FilterBar).display = False
        self.sync_chrome()

    def on_screen_resume(self) -> None:
        self.sync_chrome()
        self.console.request_refresh()

    def sync_chrome(self) -> None:
        self.query_one(StatusLine).set(self.console.status_text(self.TITLE))
        self.query_one(Banner).show(self.console.problem or self.problem())
        self.query_one(Notice).set(self.console.notice)

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
    def action_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.value = self.filter_text
        bar.display = True
        bar.focus()

    def on_input_submitted(self, event: FilterBar.Submitted) -> None:
        event.stop()
        self.query_one(FilterBar).display = False
        error = self.apply_filter(event.value.strip())
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
            tables.first().focus()


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
    COLUMNS: tuple[tuple[str, str], ...] = ()
    FIXED_WIDTHS: dict[str, int] = {}
    NOTHING_SELECTED = "no job selected"

    def __init__(self, sort_key: str, reverse: bool = False) -> None:
        super().__init__(sort_key, reverse)
        self.data: Any = None

    def body(self) -> Iterable[Widget]:
        yield TextLine(id="summary")
        table = TaggableTable(id=self.TABLE_ID)
        for key, label in self.COLUMNS:
            table.add_column(label, key=key, width=self.FIXED_WIDTHS.get(key))
        yield table

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


class TaggableTable(DataTable):
    """A row-cursor table whose first column marks rows tagged with space."""

    BINDINGS = [Binding("space", "toggle_tag", "Tag", show=True)]

    class Scrolled(Message):
        """Other rows came into view (their ticking cells may be behind)."""

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if int(old) != int(new):
            self.post_message(self.Scrolled())

    def update_visible(self, cells_of: Callable[[str], list[Any] | None]) -> None:
        """Refresh the cells of the rows on screen only: cheap enough for every second."""
        columns = [column.key for column in self.ordered_columns][1:]
        top = int(self.scroll_y)
        for index in range(top, min(top + self.size.height, self.row_count)):
            key = self.coordinate_to_cell_key(Coordinate(index, 0)).row_key.value
            if key is None:
                continue
            cells = cells_of(key)
            if cells is None:
                continue
            for column, old, value in zip(columns, self.get_row_at(index)[1:], cells):
                if old != value:
                    self.update_cell(key, column, value)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
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
                     lazy: bool = False) -> None:
        """Show exactly these rows in this order, touching only what changed.

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
        if len(gone) + len(new) > max(len(rows), 1) // 2:
            self.clear()
            for key, cells in rows:
                self.add_row(TAG_MARK if key in self.tagged else " ", *cells, key=key)
        else:
            for key in gone:
                self.remove_row(key)
            for key in new:
                self.add_row(TAG_MARK if key in self.tagged else " ", *wanted[key], key=key)
            order = {key: i for i, (key, _) in enumerate(rows)}
            self.sort(key_column, key=lambda value: order[str(value)])
            if lazy:
                self.update_visible(wanted.get)
            else:
                columns = [column.key for column in self.ordered_columns][1:]
                for key, cells in rows:
                    if key not in new:
                        for column, old, value in zip(columns, self.get_row(key)[1:], cells):
                            if old != value:
                                self.update_cell(key, column, value)
        if keep is not None and keep in wanted:
            self.move_cursor(row=self.get_row_index(keep), animate=False)
