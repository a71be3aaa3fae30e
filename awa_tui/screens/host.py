"""What a screen asks of the console that shows it.

``awa_tui.app.AwaConsole`` is that console; the screens see it through ``ConsoleHost`` so
that they import nothing from the application that imports them (the app assembles the
screens, never the other way).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from awa_ops.console import ConsoleActions, ConsoleReader

Action = Callable[[ConsoleActions], Awaitable[str]]
# A filter-wide action's preview: (question, action), or (notice, None) when nothing to do.
Preview = Callable[[ConsoleActions], Awaitable[tuple[str, Action | None]]]


class ConsoleHost(Protocol):
    """The console's members the screens use: its settings and state, its notices, and the
    confirmations every change to the database goes through."""

    refresh_s: float
    min_age_s: float
    problem: str | None
    notice: str

    @property
    def diagnostic_status(self) -> str | None: ...

    def display_now(self) -> datetime: ...

    def status_text(self, title: str) -> str: ...

    def say(self, text: str) -> None: ...

    def request_refresh(self) -> None: ...

    async def refresh_diagnostics_if_due(self, reader: ConsoleReader,
                                         force: bool = False) -> list[Any]: ...

    def open_job(self, job_id: int) -> None: ...

    def open_jobs(self, **filters: str) -> None: ...

    def show_batch_operations(self) -> None: ...

    def refused_read_only(self, description: str) -> bool: ...

    def confirm_then(self, question: str, description: str, action: Action) -> None: ...

    def preview_then_confirm(self, description: str, preview: Preview) -> None: ...

    def confirm_cancel(self, ids: list[int]) -> None: ...

    def confirm_retry(self, ids: list[int]) -> None: ...

    def confirm_dlq_retry(self, ids: list[int]) -> None: ...

    def confirm_dlq_purge(self, ids: list[int]) -> None: ...

    def confirm_dlq_move(self, queue: str, reason: str) -> None: ...
