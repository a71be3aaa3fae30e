"""How a handler's attempt ended: the outcome the completion batcher writes and the metrics
count.  Below the runtime, so that recording (which the runtime calls) can name outcomes
without importing the runtime."""

from __future__ import annotations

import enum

from awa.job import JobState


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
