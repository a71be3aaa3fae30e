"""The execution context of one attempt: what ``job.is_cancelled()``,
``set_progress``, ``update_metadata`` and the callback methods talk to.

Progress and metadata are buffered here and written by the next heartbeat
(or with the attempt's outcome), so reporting progress costs no round trip.
Handlers in the sync thread pool call these too; they only swap attribute
values, which the GIL keeps consistent.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any, Protocol

from awa.job import CallbackToken, Job


class AttemptIO(Protocol):
    """Where a running attempt's own writes go, outside its outcome and its heartbeat:
    ``job.flush_progress()`` and the callback calls (``awa.runtime.attempts.AttemptWrites``)."""

    async def flush_progress(self, ctx: JobContext) -> None: ...

    async def register_callback(self, ctx: JobContext, timeout_seconds: float,
                                filter: str | None, on_complete: str | None,
                                on_fail: str | None, transform: str | None
                                ) -> CallbackToken: ...

    async def wait_for_callback(self, ctx: JobContext, callback_id: str) -> Any: ...


class JobContext:
    __slots__ = ("job", "io", "permits", "cancelled", "cancel_reason", "task",
                 "started", "deadline_monotonic", "dropped", "waiting", "_progress_seq",
                 "_written_seq", "_metadata_patch", "is_async", "loop", "__weakref__")

    def __init__(self, job: Job[Any], io: AttemptIO, permits: Any,
                 deadline_monotonic: float) -> None:
        self.job = job
        self.io = io
        self.permits = permits
        self.cancelled = False
        self.cancel_reason: str | None = None
        self.task: asyncio.Task[None] | None = None
        self.started = time.monotonic()
        self.deadline_monotonic = deadline_monotonic
        self.dropped = False
        self.waiting = False  # parked in wait_for_callback: the deadline does not run
        self.is_async = True
        # The runtime's loop: Job.flush_progress_sync() from a handler thread runs on it.
        self.loop: asyncio.AbstractEventLoop | None = None
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        # set_progress may run on a handler thread while the loop writes a
        # heartbeat: a sequence number (not a flag) cannot lose an update.
        self._progress_seq = 0
        self._written_seq = 0
        self._metadata_patch: dict[str, Any] | None = None
        job._ctx = self

    @property
    def key(self) -> tuple[int, int]:
        return (self.job.id, self.job.run_lease)

    # -- ExecutionContext ------------------------------------------------
    def is_cancelled(self) -> bool:
        return self.cancelled

    def cancel(self, reason: str = "cancelled") -> None:
        """Flip the cooperative cancel flag (admin cancel, rescue, shutdown)."""
        if not self.cancelled:
            self.cancelled = True
            self.cancel_reason = reason

    def set_progress(self, percent: float | None, message: str | None = None) -> None:
        progress: dict[str, Any] = dict(self.job.progress or {})
        if percent is not None:
            progress["percent"] = max(0.0, min(100.0, float(percent)))
        if message is not None:
            progress["message"] = str(message)
        progress["updated_at"] = datetime.now(UTC).isoformat()
        self.job.progress = progress
        self._progress_seq += 1

    def update_metadata(self, updates: dict[str, Any]) -> None:
        if not isinstance(updates, dict):
            from awa.job import ValidationError
            raise ValidationError("update_metadata() takes a dict of keys to merge")
        patch = dict(self._metadata_patch or {})
        patch.update(updates)
        self._metadata_patch = patch
        self.job.metadata = {**self.job.metadata, **updates}
        # awa-pg 0.6.9 kept handler metadata in progress["metadata"] (shallow merge); it is
        # mirrored there so code reading it from the progress object finds it too.
        progress: dict[str, Any] = dict(self.job.progress or {})
        progress["metadata"] = {**(progress.get("metadata") or {}), **updates}
        self.job.progress = progress
        self._progress_seq += 1

    def take_buffered(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The progress and metadata patch not yet written (and forget them)."""
        seq = self._progress_seq
        progress = self.job.progress if seq != self._written_seq else None
        self._written_seq = seq
        patch = self._metadata_patch
        self._metadata_patch = None
        return progress, patch

    def restore_buffered(self, progress: dict[str, Any] | None,
                         patch: dict[str, Any] | None) -> None:
        """A write failed: keep the buffered values for the next one."""
        if progress is not None:
            self._written_seq = -1
        if patch:
            self._metadata_patch = {**patch, **(self._metadata_patch or {})}

    @property
    def has_buffered(self) -> bool:
        return self._progress_seq != self._written_seq or self._metadata_patch is not None

    async def flush_progress(self) -> None:
        await self.io.flush_progress(self)

    async def register_callback(self, timeout_seconds: float, filter: str | None,
                                on_complete: str | None, on_fail: str | None,
                                transform: str | None) -> CallbackToken:
        token = await self.io.register_callback(self, timeout_seconds, filter, on_complete,
                                                on_fail, transform)
        self.job.callback_id = token.id
        return token

    async def wait_for_callback(self, token: CallbackToken | str) -> Any:
        callback_id = token.id if isinstance(token, CallbackToken) else str(token)
        self.waiting = True
        try:
            return await self.io.wait_for_callback(self, callback_id)
        finally:
            self.waiting = False
