"""One attempt's outcome waiting to be written (``Finished``), as the executor hands it to
the completion batcher; the outcomes themselves are ``awa.outcome``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa.outcome import Outcome

if TYPE_CHECKING:  # pragma: no cover
    from awa.runtime.context import JobContext


class Finished:
    """One attempt's outcome waiting to be written."""

    __slots__ = ("ctx", "outcome", "delay_s", "error", "reason", "callback_id", "result")

    def __init__(self, ctx: JobContext, outcome: Outcome, *, delay_s: float = 0.0,
                 error: dict[str, Any] | None = None, reason: str | None = None,
                 callback_id: str | None = None, result: Any = None) -> None:
        self.ctx = ctx
        self.outcome = outcome
        self.delay_s = delay_s
        self.error = error
        self.reason = reason
        self.callback_id = callback_id
        self.result = result
