"""Lifecycle hooks: ``client.on_event(callback, kind=None)``.

Called when a handler starts and after a guarded finalization commits
(completed, retried, snoozed, cancelled, failed, dead_lettered, waiting) --
never for a stale write.  A hook that raises is logged; it never changes
the job's outcome.  Async hooks run as tasks so they cannot slow the
completion path.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from awa.job import Job

log = logging.getLogger("awa.runtime.events")

EVENT_NAMES = ("started", "completed", "retried", "snoozed", "cancelled", "failed",
               "dead_lettered", "waiting")


@dataclass(frozen=True)
class JobEvent:
    """What happened (``event``), to which job, and the handler's result or error."""

    event: str
    job: Job[Any]
    outcome: Any = None

    @property
    def kind(self) -> str:
        return self.job.kind


class EventHooks:
    def __init__(self) -> None:
        self.hooks: list[tuple[Callable[[JobEvent], Any], str | None, frozenset[str] | None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    def add(self, callback: Callable[[JobEvent], Any], kind: str | None = None,
            events: frozenset[str] | None = None) -> None:
        self.hooks.append((callback, kind, events))

    def emit(self, event: str, job: Job[Any], outcome: Any) -> None:
        if not self.hooks:
            return
        payload = None
        for callback, kind, events in self.hooks:
            if (kind is not None and kind != job.kind) or (events is not None
                                                             and event not in events):
                continue
            payload = payload or JobEvent(event, job, outcome)
            try:
                result = callback(payload)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._tasks.add(task)
                    task.add_done_callback(self._finished)
            except Exception:
                log.exception("lifecycle hook %r raised on %s of job %s; ignored",
                              callback, event, job.id)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("async lifecycle hook raised; ignored", exc_info=task.exception())

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
