"""The lines every screen shares: status, problem banner, one-line notice, filter bar."""

from __future__ import annotations

from typing import Protocol, cast

from textual.widgets import Input, Static


class _FocusesMain(Protocol):
    """What awa_tui.screens.base.ConsoleScreen offers (not imported: it imports this module)."""

    def focus_main(self) -> None: ...

    def filter_submitted(self, value: str) -> None: ...


class TextLine(Static):
    """Text that repaints only when it changes: screens re-set it every tick."""

    _text: str | None = None

    def set(self, text: str) -> None:
        if text != self._text:
            self._text = text
            self.update(text)


class StatusLine(TextLine):
    """Where we are connected, how often we refresh, frozen / read-only."""


class Banner(TextLine):
    """A problem that needs the operator's eye (lost connection, unmigrated, no leader)."""

    def show(self, text: str | None) -> None:
        self.set(text or "")
        if self.display != bool(text):
            self.display = bool(text)


class Notice(TextLine):
    """The outcome of the last action, or why it was refused; one line."""


class FilterBar(Input):
    """Appears on ``/``; enter applies, escape hides it."""

    BINDINGS = [("escape", "dismiss", "Close filter")]

    def action_dismiss(self) -> None:
        self.display = False
        cast(_FocusesMain, self.screen).focus_main()

    async def action_submit(self) -> None:
        """Enter applies the filter now, not after a Submitted message travels to the
        screen: a key typed right after it goes to the table again, not into the bar."""
        cast(_FocusesMain, self.screen).filter_submitted(self.value)
