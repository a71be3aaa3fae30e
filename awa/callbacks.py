"""External callbacks: a job waits for an outside system, which resolves it by callback id.

Flow: a handler calls ``job.register_callback()`` (which stores a fresh
``callback_id`` and the timeout on its running row, guarded by its run lease)
and hands the id to the outside system.  It then either returns
``WaitForCallback(token)`` -- the runtime parks the row in
``waiting_external`` and the handler is gone -- or awaits
``job.wait_for_callback(token)``, which parks the row itself and keeps the
handler alive until a *resume* moves the row back to ``running``.

Resolutions (``complete_external``, ``fail_external``, ``retry_external``,
``resume_external``, ``heartbeat_callback``, ``resolve_callback``) match the
row by ``callback_id`` AND an open state (``running`` or
``waiting_external``) in one guarded statement, so a second or late
resolution matches nothing and raises ``CallbackNotFound``; there is never a
double transition.  ``running`` is accepted so that an *early* callback --
one that arrives after registration but before the handler returned
``WaitForCallback`` -- still resolves; the handler's later park or outcome
is then a stale write the runtime ignores.

Where results live: resume stores the bare payload under
``metadata["_awa_callback_result"]``, as awa-pg 0.6.9 does; complete stores
its (transformed) payload there too, as the job's result.  A handler in
``wait_for_callback`` returns the payload once its attempt is back in
``running`` with the callback spent; ``awa job dump`` shows the last result.  Resume and retry
clear the callback columns (the callback is spent, a new one may be
registered); complete and fail keep them as a record.  Timeouts
(``callback_timeout_at``) are rescued by maintenance, not here.

The statements live in the storage engine (``awa.storage.engine.CallbackOps``);
this module keeps validation, the CEL decision, the resume listener, error
mapping and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from awa import cel, config, db, lifecycle, recording
from awa.admin import _unique_error
from awa.db import one_line
from awa.job import (
    AwaError,
    CallbackNotFound,
    CallbackToken,
    Job,
    SerializationError,
    ValidationError,
)
from awa.storage import open_engine
from awa.storage.engine import CALLBACK_RESULT_KEY, CALLBACK_RESUME_CHANNEL, CallbackSpec, Engine

log = logging.getLogger("awa.callbacks")

RESULT_KEY = CALLBACK_RESULT_KEY
# A resume notifies here (payload: the job id), waking the handler in
# wait_for_callback at once.  Other resolutions do not: NOTIFY serialises
# committing transactions, and a waiter interrupted by them notices on its
# next fallback poll (at most CALLBACK_WAIT_POLL_MAX_MS).
RESUME_CHANNEL = CALLBACK_RESUME_CHANNEL
LISTEN_RESUME = "LISTEN {}"
DEFAULT_ACTIONS = ("ignore", "complete", "fail")

# --- errors and results -------------------------------------------------------
class CallbackAlreadyResolved(CallbackNotFound):
    """The callback id is known but its job is no longer waiting (HTTP 409)."""

    def __init__(self, message: str, job_id: int, state: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.state = state


class InvalidCallbackId(ValidationError, CallbackNotFound):
    """A callback id that is not a UUID: awa-pg 0.6.9 raised ``ValidationError``; it is
    also a ``CallbackNotFound`` (nobody can be waiting on it)."""


class CallbackWaitInterrupted(AwaError):
    """``wait_for_callback`` ended without a resume (cancelled, resolved, rescued)."""


@dataclass(frozen=True)
class ResolveResult:
    """What ``resolve_callback`` did: ``completed``, ``failed`` or ``ignored``."""

    outcome: str
    job: Job[Any] | None
    payload: Any = None
    reason: str | None = None
    waiting: Job[Any] | None = field(default=None, repr=False, compare=False)
    """The job as it still waits when the outcome is ``ignored`` (``job`` is None then, as in
    awa-pg 0.6.9); the HTTP receiver reports its state."""

    def is_completed(self) -> bool:
        return self.outcome == "completed"

    def is_failed(self) -> bool:
        return self.outcome == "failed"

    def is_ignored(self) -> bool:
        return self.outcome == "ignored"

    def __repr__(self) -> str:
        job = self.job.id if self.job is not None else None
        return f"ResolveResult(outcome={self.outcome!r}, job={job}, reason={self.reason!r})"


# --- validation ----------------------------------------------------------------
def parse_callback_id(callback_id: Any) -> uuid.UUID:
    """The id as a UUID; anything else is a callback nobody could be waiting on."""
    if isinstance(callback_id, CallbackToken):
        callback_id = callback_id.id
    try:
        return uuid.UUID(str(callback_id))
    except ValueError:
        raise InvalidCallbackId(f"callback {str(callback_id)[:80]!r} not found: a callback id "
                                f"is a UUID") from None


def check_timeout(timeout_seconds: Any) -> float:
    try:
        value = float(timeout_seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= config.CALLBACK_TIMEOUT_MAX_SECONDS:
        raise ValidationError(f"callback timeout_seconds must be a positive number of seconds "
                              f"up to {config.CALLBACK_TIMEOUT_MAX_SECONDS:.0f} (ten years), "
                              f"got {timeout_seconds!r}")
    return value


def _json(value: Any, what: str) -> Any:
    """``value`` itself, once it is known to serialize (the engine stores it as JSON)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from None
    return value


def _result(payload: Any) -> Any:
    """What a resolution stores under ``RESULT_KEY``: the bare payload (awa-pg 0.6.9)."""
    return _json(payload, "callback payload")


async def _engine_for(pool: AsyncConnectionPool, engine: Engine | None) -> Engine:
    return engine if engine is not None else await open_engine(pool)


# --- the handler side (called lazily by the runtime's JobContext) --------------
async def register_callback(pool: AsyncConnectionPool, job_id: int, run_lease: int,
                            timeout_seconds: float = config.CALLBACK_TIMEOUT_SECONDS,
                            filter: str | None = None, on_complete: str | None = None,
                            on_fail: str | None = None,
                            transform: str | None = None, *,
                            engine: Engine | None = None) -> CallbackToken:
    """Give the running attempt a fresh callback id; CEL is compiled first."""
    timeout = check_timeout(timeout_seconds)
    cel.validate(filter=filter, on_complete=on_complete, on_fail=on_fail, transform=transform)
    callback_id = uuid.uuid4()
    spec = CallbackSpec(callback_id=callback_id, timeout_s=timeout, filter=filter,
                        on_complete=on_complete, on_fail=on_fail, transform=transform)
    engine = await _engine_for(pool, engine)
    async with pool.connection() as conn:
        registered = await engine.register_callback(conn, job_id, run_lease, spec)
    if not registered:
        raise AwaError(f"job {job_id} is no longer running under run lease {run_lease} "
                       f"(cancelled or rescued); the callback was not registered")
    return CallbackToken(str(callback_id))


class _ResolutionListener:
    """One ``LISTEN`` connection per event loop and database, shared by every
    handler in ``wait_for_callback``; it lives while at least one waits."""

    _registry: dict[tuple[int, str], _ResolutionListener] = {}

    def __init__(self, key: tuple[int, str], conninfo: str) -> None:
        self.key = key
        self.conninfo = conninfo
        self.loop = asyncio.get_running_loop()
        self.waiters: dict[int, set[asyncio.Event]] = {}
        self.task = asyncio.create_task(self._run(), name="awa-callback-listener")

    @classmethod
    def subscribe(cls, pool: AsyncConnectionPool, job_id: int) -> tuple[_ResolutionListener,
                                                                         asyncio.Event]:
        loop = asyncio.get_running_loop()
        conninfo = str(pool.conninfo)  # awa opens its pools from a URL string
        key = (id(loop), conninfo)
        listener = cls._registry.get(key)
        if listener is None or listener.loop is not loop or listener.task.done():
            listener = cls._registry[key] = cls(key, conninfo)
        event = asyncio.Event()
        listener.waiters.setdefault(job_id, set()).add(event)
        return listener, event

    async def unsubscribe(self, job_id: int, event: asyncio.Event) -> None:
        events = self.waiters.get(job_id, set())
        events.discard(event)
        if not events:
            self.waiters.pop(job_id, None)
        if not self.waiters and self._registry.get(self.key) is self:
            del self._registry[self.key]
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
            except Exception:  # a listener bug must not replace the waiter's own outcome
                log.exception("callback listener failed")

    def _wake(self, job_id: int | None) -> None:
        targets = self.waiters.values() if job_id is None else [self.waiters.get(job_id, ())]
        for events in targets:
            for event in events:
                event.set()

    async def _run(self) -> None:
        channel = sql.SQL(LISTEN_RESUME).format(sql.Identifier(RESUME_CHANNEL))
        while True:
            try:
                conn = await db.connect(self.conninfo, config.APP_NAME_CALLBACK_LISTENER)
                try:
                    await conn.execute(channel)
                    self._wake(None)  # a resolution may have slipped in before LISTEN: re-check
                    async for note in conn.notifies():
                        if note.payload.isdigit():
                            self._wake(int(note.payload))
                finally:
                    await conn.close()
            except (AwaError, psycopg.Error) as exc:
                log.warning("callback listener connection lost (%s); waiting handlers poll "
                            "until it reconnects", one_line(exc))
                await asyncio.sleep(config.CANCEL_LISTENER_RETRY_MS / 1000)


async def wait_for_resume(pool: AsyncConnectionPool, job_id: int, run_lease: int,
                          callback_id: Any, is_cancelled: Callable[[], bool], *,
                          engine: Engine | None = None) -> Any:
    """Park the still-live attempt and return the payload of the resume that wakes it.

    A resolution notifies ``RESUME_CHANNEL``; the row is re-read on each
    notification and, as a fallback for lost notifications, on a poll that
    backs off from ``CALLBACK_WAIT_POLL_MIN_MS`` to ``CALLBACK_WAIT_POLL_MAX_MS``.
    If the callback was resumed early the park matches nothing and the stored
    payload is returned at once.  Raises ``CallbackWaitInterrupted`` when the
    job leaves the wait any other way (completed/failed/retried by callback,
    cancelled, timed out and rescued) or when the runtime flips the cancel
    flag (shutdown): the row then stays ``waiting_external`` for its callback
    or the timeout rescue.
    """
    cid = parse_callback_id(callback_id)
    engine = await _engine_for(pool, engine)
    listener, woken = _ResolutionListener.subscribe(pool, job_id)
    try:
        async with pool.connection() as conn:
            await engine.park_for_callback(conn, job_id, run_lease, cid)
        delay = config.CALLBACK_WAIT_POLL_MIN_MS / 1000
        while True:
            woken.clear()
            async with pool.connection() as conn:
                wait = await engine.poll_callback_wait(conn, job_id)
            mine = wait is not None and wait.run_lease == run_lease
            # Resumed: the same attempt back in running with its callback spent (a resume
            # is the only resolution that keeps the attempt; it stores the bare payload).
            if mine and wait is not None and wait.state == "running" \
                    and wait.callback_id != cid:
                return wait.result
            if not (mine and wait is not None and wait.state in ("waiting_external", "running")
                    and wait.callback_id == cid):
                state = wait.state if wait is not None else "no longer in the hot table"
                raise CallbackWaitInterrupted(
                    f"callback {cid} of job {job_id} ended without a resume: the job is {state}")
            if is_cancelled():
                raise CallbackWaitInterrupted(
                    f"wait for callback {cid} of job {job_id} interrupted: the attempt was "
                    f"cancelled (the job stays waiting_external for its callback or timeout)")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(woken.wait(), delay)
            delay = min(delay * 2, config.CALLBACK_WAIT_POLL_MAX_MS / 1000)
    finally:
        await listener.unsubscribe(job_id, woken)


# --- resolutions ------------------------------------------------------------------
async def _not_found(engine: Engine, conn: Any, callback_id: uuid.UUID) -> CallbackNotFound:
    holder = await engine.find_callback(conn, callback_id)
    if holder is not None:
        return CallbackAlreadyResolved(
            f"callback {callback_id} not found or already resolved: job {holder.job_id} is "
            f"{holder.state}", holder.job_id, holder.state)
    return CallbackNotFound(f"callback {callback_id} not found or already resolved")


async def _resolve(engine: Engine, conn: Any, callback_id: uuid.UUID, outcome: str | None,
                   resolution: Callable[[], Awaitable[Job[Any] | None]]) -> Job[Any]:
    """Run one guarded resolution; nothing matched means unknown or already resolved."""
    try:
        job = await resolution()
    except psycopg.errors.UniqueViolation as exc:
        # waiting_external is outside the default unique mask, so a newer job
        # may have taken the key meanwhile; nothing was written.
        conflict = _unique_error(exc, f"{outcome or 'resolve'} callback {callback_id}")
        if conflict is None:
            raise
        raise conflict from None
    if job is None:
        raise await _not_found(engine, conn, callback_id)
    if outcome is not None:
        recording.record_callback_resolved(job, outcome)
    return job


def _fail_entry(error: str) -> dict[str, Any]:
    entry: dict[str, Any] = _json(lifecycle.error_entry(error, 0, terminal=True), "error")
    return entry


async def complete_external(pool: AsyncConnectionPool, callback_id: Any,
                            payload: Any = None, *, engine: Engine | None = None) -> Job[Any]:
    """``running | waiting_external → completed``, storing the payload as the result."""
    cid = parse_callback_id(callback_id)
    result = _result(payload)
    engine = await _engine_for(pool, engine)
    async with pool.connection() as conn:
        return await _resolve(engine, conn, cid, "complete",
                              lambda: engine.complete_external(conn, cid, result))


async def fail_external(pool: AsyncConnectionPool, callback_id: Any, error: str, *,
                        engine: Engine | None = None) -> Job[Any]:
    """``running | waiting_external → failed``, recording ``error`` for the attempt."""
    cid = parse_callback_id(callback_id)
    if not isinstance(error, str) or not error.strip():
        raise ValidationError("fail_external needs a non-empty error message")
    entry = _fail_entry(error)
    engine = await _engine_for(pool, engine)
    async with pool.connection() as conn:
        return await _resolve(engine, conn, cid, "fail",
                              lambda: engine.fail_external(conn, cid, entry))


async def retry_external(pool: AsyncConnectionPool, callback_id: Any, *,
                         engine: Engine | None = None) -> Job[Any]:
    """``running | waiting_external → available`` with attempt 0: a fresh start."""
    cid = parse_callback_id(callback_id)
    engine = await _engine_for(pool, engine)
    async with pool.connection() as conn, conn.transaction():
        job = await _resolve(engine, conn, cid, None,
                             lambda: engine.retry_external(conn, cid))
    recording.record_callback_resolved(job, "retry")  # once committed
    return job


async def resume_external(pool: AsyncConnectionPool, callback_id: Any,
                          payload: Any = None, *, engine: Engine | None = None) -> Job[Any]:
    """``waiting_external → running``: the handler in ``wait_for_callback`` gets ``payload``."""
    cid = parse_callback_id(callback_id)
    result = _result(payload)
    engine = await _engine_for(pool, engine)
    async with pool.connection() as conn:
        return await _resolve(engine, conn, cid, "resume",
                              lambda: engine.resume_external(conn, cid, result))


async def heartbeat_callback(pool: AsyncConnectionPool, callback_id: Any,
                             timeout_seconds: float = config.CALLBACK_TIMEOUT_SECONDS, *,
                             engine: Engine | None = None) -> Job[Any]:
    """Push the callback's timeout to now + ``timeout_seconds``."""
    cid = parse_callback_id(callback_id)
    timeout = check_timeout(timeout_seconds)
    engine = await _engine_for(pool, engine)
    async with pool.connection() as conn:
        return await _resolve(engine, conn, cid, None,
                              lambda: engine.heartbeat_callback(conn, cid, timeout))


def decide(job: Job[Any], payload: Any, default_action: str) -> tuple[str, str]:
    """``(action, reason)`` from the CEL expressions: filter → on_fail → on_complete → default.

    Fail-open: an expression that errors at evaluation is skipped as if it
    were not configured -- a failing filter lets the payload through, a
    failing on_fail / on_complete counts as no match -- so a broken
    expression falls through to the default action instead of wedging the
    job; the reason names the error.
    """
    notes: list[str] = []

    def check(role: str, source: str | None) -> bool | None:
        if source is None:
            return None
        try:
            return cel.evaluate_bool(source, payload, role)
        except cel.CelEvaluationError as exc:
            notes.append(f"{exc} (skipped: fail-open)")
            return None

    def because(text: str) -> str:
        return "; ".join([text, *notes])

    if check("filter", job.callback_filter) is False:
        return "ignore", because("filter did not match the payload")
    if check("on_fail", job.callback_on_fail):
        return "fail", because(f"on_fail matched: {job.callback_on_fail}")
    if check("on_complete", job.callback_on_complete):
        return "complete", because(f"on_complete matched: {job.callback_on_complete}")
    return default_action, because(f"no expression matched; default_action={default_action}")


async def resolve_callback(pool: AsyncConnectionPool, callback_id: Any, payload: Any = None,
                           default_action: str = "ignore", *,
                           engine: Engine | None = None) -> ResolveResult:
    """Let the job's CEL expressions decide; ``transform`` shapes a completing payload."""
    cid = parse_callback_id(callback_id)
    if default_action not in DEFAULT_ACTIONS:
        raise ValidationError(f"default_action must be one of {', '.join(DEFAULT_ACTIONS)}, "
                              f"got {default_action!r}")
    _json(payload, "callback payload")
    engine = await _engine_for(pool, engine)
    async with pool.connection() as conn, conn.transaction():
        locked = await engine.lock_open_callback(conn, cid)
        if locked is None:
            raise await _not_found(engine, conn, cid)
        action, reason = decide(locked, payload, default_action)
        if action == "ignore":
            # Nothing was written: no job in the result, as in awa-pg 0.6.9.
            return ResolveResult("ignored", None, payload, reason, waiting=locked)
        if action == "fail":
            entry = _fail_entry(f"callback failed: {reason}")
            job = await _resolve(engine, conn, cid, "fail",
                                 lambda: engine.fail_external(conn, cid, entry))
            return ResolveResult("failed", job, payload, reason)
        result = payload
        transform = locked.callback_transform
        if transform is not None:
            try:
                result = cel.evaluate(transform, payload, "transform")
            except cel.CelEvaluationError as exc:
                reason = f"{reason}; {exc} (completed with the untransformed payload: fail-open)"
        record = _result(result)
        job = await _resolve(engine, conn, cid, "complete",
                             lambda: engine.complete_external(conn, cid, record))
        return ResolveResult("completed", job, result, reason)


# --- the client role ---------------------------------------------------------------
class CallbackMixin:
    """Resolve external callbacks from the client; the CLI and HTTP receiver use these."""

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        raise NotImplementedError  # provided by AsyncClient

    async def _get_engine(self) -> Engine:
        raise NotImplementedError  # provided by AsyncClient

    async def complete_external(self, callback_id: str,
                                payload: dict[str, Any] | None = None) -> Job[Any]:
        return await complete_external(await self._get_pool(), callback_id, payload,
                                       engine=await self._get_engine())

    async def fail_external(self, callback_id: str, error: str) -> Job[Any]:
        return await fail_external(await self._get_pool(), callback_id, error,
                                   engine=await self._get_engine())

    async def retry_external(self, callback_id: str) -> Job[Any]:
        return await retry_external(await self._get_pool(), callback_id,
                                    engine=await self._get_engine())

    async def resume_external(self, callback_id: str,
                              payload: dict[str, Any] | None = None) -> Job[Any]:
        return await resume_external(await self._get_pool(), callback_id, payload,
                                     engine=await self._get_engine())

    async def heartbeat_callback(self, callback_id: str,
                                 timeout_seconds: float = config.CALLBACK_TIMEOUT_SECONDS
                                 ) -> Job[Any]:
        return await heartbeat_callback(await self._get_pool(), callback_id, timeout_seconds,
                                        engine=await self._get_engine())

    async def resolve_callback(self, callback_id: str, payload: dict[str, Any] | None = None,
                               default_action: str = "ignore") -> ResolveResult:
        return await resolve_callback(await self._get_pool(), callback_id, payload,
                                      default_action, engine=await self._get_engine())
