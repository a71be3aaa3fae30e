"""The callbacks group: register, resolve, complete / fail / retry / resume / heartbeat."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from awa.job import Job

CALLBACK_RESULT_KEY = "_awa_callback_result"
"""Where resume and complete store ``{callback_id, action, payload, at}`` in the job's metadata."""

CALLBACK_RESUME_CHANNEL = "awa:callback_resolved"
"""A resume notifies here (payload: the job id), waking the handler in ``wait_for_callback``."""


@dataclass(frozen=True)
class CallbackSpec:
    """What a running attempt registers: a fresh id, its timeout and its CEL rules."""

    callback_id: uuid.UUID
    timeout_s: float
    filter: str | None = None
    on_complete: str | None = None
    on_fail: str | None = None
    transform: str | None = None


@dataclass(frozen=True)
class CallbackWait:
    """One poll of a handler waiting in ``wait_for_callback``: the row's current owner."""

    state: str
    run_lease: int
    callback_id: uuid.UUID | None
    result: Any
    """The payload stored under ``CALLBACK_RESULT_KEY`` (bare, as awa-pg 0.6.9), if any."""


@dataclass(frozen=True)
class CallbackHolder:
    """The job a callback id belongs to, whatever its state (for "already resolved")."""

    job_id: int
    state: str


class CallbackOps(Protocol):
    """External-wait jobs: the attempt parks until a callback resolves it.

    Every resolution matches the job by ``callback_id`` AND an open state
    (``running`` or ``waiting_external``) in one guarded statement and
    returns ``None`` when nothing matched (unknown or already resolved:
    ``find_callback`` tells which), so a second resolution never transitions
    twice.  A unique-key collision surfaces as ``psycopg.errors.UniqueViolation``
    with nothing written.
    """

    async def register_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, spec: CallbackSpec) -> bool:
        """Store the callback on the running attempt ``(job_id, run_lease)``; False if stale."""
        ...

    async def park_for_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, callback_id: uuid.UUID) -> bool:
        """``running → waiting_external`` for the attempt still holding ``callback_id``."""
        ...

    async def poll_callback_wait(self, conn: psycopg.AsyncConnection[Any],
                                 job_id: int) -> CallbackWait | None:
        """The waiting handler's view of its job; None once the job left the live rows."""
        ...

    async def complete_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                                result: Any) -> Job[Any] | None:
        """``open → completed``, storing ``result`` (any JSON value) under
        ``CALLBACK_RESULT_KEY``."""
        ...

    async def fail_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                            error: dict[str, Any]) -> Job[Any] | None:
        """``open → failed``, appending ``error`` (its ``attempt`` filled in) to the errors."""
        ...

    async def retry_external(self, conn: psycopg.AsyncConnection[Any],
                             callback_id: uuid.UUID) -> Job[Any] | None:
        """``open → available``, attempt 0, callback cleared; wakes the queue at commit."""
        ...

    async def resume_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                              result: Any) -> Job[Any] | None:
        """``open → running``, storing ``result``, clearing the callback and notifying
        ``CALLBACK_RESUME_CHANNEL`` with the job id."""
        ...

    async def heartbeat_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID, timeout_s: float) -> Job[Any] | None:
        """Push the open callback's timeout to now + ``timeout_s``."""
        ...

    async def lock_open_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID) -> Job[Any] | None:
        """The open job of ``callback_id``, locked for the caller's transaction (CEL resolve)."""
        ...

    async def find_callback(self, conn: psycopg.AsyncConnection[Any],
                            callback_id: uuid.UUID) -> CallbackHolder | None:
        """The job holding ``callback_id`` in any state; None for an unknown id."""
        ...
