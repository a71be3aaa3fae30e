"""How a handler's attempt ended, as the completion batcher writes it and the metrics count
it.  Its own module: the batcher records metrics, and the metrics name the outcomes."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from awa.job import JobState

if TYPE_CHECKING:  # pragma: no cover
    from awa.runtime.context import JobContext


class Outcome(enum.Enum):
    # value: (event name for hooks, state the job ends in)
    COMPLETED = ("completed", JobState.Completed)
    RETRY = ("retried", JobState.Retryable)
    SNOOZE = ("snoozed", JobState.Scheduled)
    CANCEL = ("cancelled", JobState.Cancelled)
    FAIL = ("failed", JobState.Failed)
    DLQ = ("dead_lettered", JobState.Failed)
    WAIT = ("waiting", JobState.WaitingExternal)

    @property
    def event(self) -> str:
        return self.value[0]

    @property
    def state(self) -> JobState:
        return self.value[1]


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
