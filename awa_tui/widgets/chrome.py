"""The lines every screen shares: status, problem banner, one-line notice, filter bar."""

from __future__ import annotations

from textual.widgets import Input, Static


class StatusLine(Static):
    """Where we are connected, how often we refresh, frozen / read-only."""


class Banner(Static):
    """A problem that needs the operator's eye (lost connection, unmigrated, no leader)."""

    def show(self, text: str | None) -> None:
        self.update(text or "")
        self.display = bool(text)


class Notice(Static):
    """The outcome of the last action, or why it was refused; one line."""


class FilterBar(Input):
    """Appears on ``/``; enter applies, escape hides it."""

    BINDINGS = [("escape", "dismiss", "Close filter")]

    def action_dismiss(self) -> None:
        self.display = False
        self.screen.focus_main()
