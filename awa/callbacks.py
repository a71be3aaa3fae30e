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

Where results live: resume and complete store
``metadata["_awa_callback_result"] = {callback_id, action, payload, at}``.
A handler in ``wait_for_callback`` returns the payload whose ``callback_id``
matches its token; ``awa job dump`` shows the last result.  Resume and retry
clear the callback columns (the callback is spent, a new one may be
registered); complete and fail keep them as a record.  Timeouts
(``callback_timeout_at``) are rescued by maintenance, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa import cel, config, db, lifecycle
from awa.admin import _unique_error
from awa.db import one_line
from awa.job import (AwaError, CallbackNotFound, CallbackToken, Job, SerializationError,
                     ValidationError)
from awa.metrics import ATTR_CALLBACK_OUTCOME, ATTR_QUEUE, ATTR_TERMINAL, METRICS, job_attributes

log = logging.getLogger("awa.callbacks")

RESULT_KEY = "_awa_callback_result"
# A resume notifies here (payload: the job id), waking the handler in
# wait_for_callback at once.  Other resolutions do not: NOTIFY serialises
# committing transactions, and a waiter interrupted by them notices on its
# next fallback poll (at most CALLBACK_WAIT_POLL_MAX_MS).
RESUME_CHANNEL = "awa:callback_resolved"
LISTEN_RESUME = "LISTEN {}"
DEFAULT_ACTIONS = ("ignore", "complete", "fail")

# --- SQL (every resolution: callback_id + an open state, in one statement) ---
REGISTER_CALLBACK = """
UPDATE awa.jobs_hot
   SET callback_id = %(callback_id)s,
       callback_timeout_at = now() + make_interval(secs => %(timeout)s),
       callback_filter = %(filter)s,
       callback_on_complete = %(on_complete)s,
       callback_on_fail = %(on_fail)s,
       callback_transform = %(transform)s
 WHERE id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
RETURNING id"""

PARK_FOR_WAIT = """
UPDATE awa.jobs_hot SET state = 'waiting_external'
 WHERE id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
   AND callback_id = %(callback_id)s
RETURNING id"""

POLL_WAIT = """
SELECT state::text AS state, run_lease, callback_id, metadata -> %(key)s::text AS result
  FROM awa.jobs_hot WHERE id = %(job_id)s"""

COMPLETE_EXTERNAL = """
UPDATE awa.jobs_hot
   SET state = 'completed', finalized_at = now(), callback_timeout_at = NULL,
       metadata = metadata || jsonb_build_object(%(key)s::text, %(result)s::jsonb)
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *"""

FAIL_EXTERNAL = """
UPDATE awa.jobs_hot
   SET state = 'failed', finalized_at = now(), callback_timeout_at = NULL,
       errors = array_append(COALESCE(errors, '{}'::jsonb[]),
                             %(entry)s::jsonb || jsonb_build_object('attempt', attempt))
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *"""

RETRY_EXTERNAL = """
UPDATE awa.jobs_hot
   SET state = 'available', attempt = 0, run_at = now(), heartbeat_at = NULL,
       deadline_at = NULL, finalized_at = NULL,
       callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
       callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *"""

# An in-place update to 'available' is not an INSERT, so the queue's
# dispatchers are woken explicitly (at commit).
NOTIFY_QUEUE = "SELECT pg_notify(%s, '')"

RESUME_EXTERNAL = """
WITH resolved AS (
    UPDATE awa.jobs_hot
       SET state = 'running', heartbeat_at = now(),
           metadata = metadata || jsonb_build_object(%(key)s::text, %(result)s::jsonb),
           callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
           callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
     WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
    RETURNING *)
SELECT resolved.*, pg_notify(%(channel)s, resolved.id::text) FROM resolved"""

HEARTBEAT_CALLBACK = """
UPDATE awa.jobs_hot
   SET callback_timeout_at = now() + make_interval(secs => %(timeout)s)
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *"""

LOCK_OPEN_CALLBACK = """
SELECT * FROM awa.jobs_hot
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
   FOR UPDATE"""

FIND_CALLBACK = """
SELECT id, state::text AS state FROM awa.jobs_hot WHERE callback_id = %(callback_id)s"""


# --- errors and results -------------------------------------------------------
class CallbackAlreadyResolved(CallbackNotFound):
    """The callback id is known but its job is no longer waiting (HTTP 409)."""

    def __init__(self, message: str, job_id: int, state: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.state = state


class CallbackWaitInterrupted(AwaError):
    """``wait_for_callback`` ended without a resume (cancelled, resolved, rescued)."""


@dataclass(frozen=True)
class ResolveResult:
    """What ``resolve_callback`` did: ``completed``, ``failed`` or ``ignored``."""

    outcome: str
    job: Job[Any] | None
    payload: Any = None
    reason: str | None = None

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
        raise CallbackNotFound(f"callback {str(callback_id)[:80]!r} not found: a callback id "
                               f"is a UUID") from None


def check_timeout(timeout_seconds: Any) -> float:
    try:
        value = float(timeout_seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValidationError(f"callback timeout_seconds must be a positive number of seconds, "
                              f"got {timeout_seconds!r}")
    return value


def _json(value: Any, what: str) -> Jsonb:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from None
    return Jsonb(value)


def _result(callback_id: uuid.UUID, action: str, payload: Any) -> Jsonb:
    return _json({"callback_id": str(callback_id), "action": action, "payload": payload,
                  "at": datetime.now(timezone.utc).isoformat()}, "callback payload")


# --- the handler side (called lazily by the runtime's JobContext) --------------
async def register_callback(pool: AsyncConnectionPool, job_id: int, run_lease: int,
                            timeout_seconds: float = config.CALLBACK_TIMEOUT_SECONDS,
                            filter: str | None = None, on_complete: str | None = None,
                            on_fail: str | None = None,
                            transform: str | None = None) -> CallbackToken:
    """Give the running attempt a fresh callback id; CEL is compiled first."""
    timeout = check_timeout(timeout_seconds)
    cel.validate(filter=filter, on_complete=on_complete, on_fail=on_fail, transform=transform)
    callback_id = uuid.uuid4()
    async with pool.connection() as conn:
        cur = await conn.execute(REGISTER_CALLBACK, {
            "callback_id": callback_id, "timeout": timeout, "filter": filter,
            "on_complete": on_complete, "on_fail": on_fail, "transform": transform,
            "job_id": job_id, "run_lease": run_lease})
        registered = await cur.fetchone()
    if registered is None:
        raise AwaError(f"job {job_id} is no longer running under run lease {run_lease} "
                       f"(cancelled or rescued); the callback was not registered")
    return CallbackToken(str(callback_id))


class _ResolutionListener:
    """One ``LISTEN`` connection per event loop and database, shared by every
    handler in ``wait_for_callback``; it lives while at least one waits."""

    _registry: dict[tuple[int, str], "_ResolutionListener"] = {}

    def __init__(self, key: tuple[int, str], conninfo: str) -> None:
        self.key = key
        self.conninfo = conninfo
        self.loop = asyncio.get_running_loop()
        self.waiters: dict[int, set[asyncio.Event]] = {}
        self.task = asyncio.create_task(self._run(), name="awa-callback-listener")

    @classmethod
    def subscribe(cls, pool: AsyncConnectionPool, job_id: int) -> tuple["_ResolutionListener",
                                                                         asyncio.Event]:
        loop = asyncio.get_running_loop()
        key = (id(loop), pool.conninfo)
        listener = cls._registry.get(key)
        if listener is None or listener.loop is not loop or listener.task.done():
            listener = cls._registry[key] = cls(key, pool.conninfo)
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
                          callback_id: Any, is_cancelled: Callable[[], bool]) -> Any:
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
    params = {"job_id": job_id, "run_lease": run_lease, "callback_id": cid, "key": RESULT_KEY}
    listener, woken = _ResolutionListener.subscribe(pool, job_id)
    try:
        async with pool.connection() as conn:
            await conn.execute(PARK_FOR_WAIT, params)
        delay = config.CALLBACK_WAIT_POLL_MIN_MS / 1000
        while True:
            woken.clear()
            async with pool.connection() as conn:
                row = await (await conn.execute(POLL_WAIT, params)).fetchone()
            mine = row is not None and row["run_lease"] == run_lease
            result = (row or {}).get("result") or {}
            if mine and row["state"] == "running" and result.get("callback_id") == str(cid) \
                    and result.get("action") == "resume":
                return result.get("payload")
            if not (mine and row["state"] in ("waiting_external", "running")
                    and row["callback_id"] == cid):
                state = row["state"] if row is not None else "no longer in the hot table"
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
async def _not_found(conn: Any, callback_id: uuid.UUID) -> CallbackNotFound:
    row = await (await conn.execute(FIND_CALLBACK, {"callback_id": callback_id})).fetchone()
    if row is not None:
        return CallbackAlreadyResolved(
            f"callback {callback_id} not found or already resolved: job {row['id']} is "
            f"{row['state']}", row["id"], row["state"])
    return CallbackNotFound(f"callback {callback_id} not found or already resolved")


def _count(row: dict[str, Any], outcome: str) -> None:
    METRICS.callback_resolved.add(1, {ATTR_QUEUE: row["queue"], ATTR_CALLBACK_OUTCOME: outcome})
    # A callback that ends the job is that job's completion or failure too.
    if outcome == "complete":
        METRICS.job_completed.add(1, job_attributes(row["kind"], row["queue"]))
    elif outcome == "fail":
        METRICS.job_failed.add(1, {**job_attributes(row["kind"], row["queue"]),
                                   ATTR_TERMINAL: True})


async def _resolve(conn: Any, sql: str, params: dict[str, Any],
                   outcome: str | None) -> Job[Any]:
    """Run one guarded resolution; nothing matched means unknown or already resolved."""
    try:
        row = await (await conn.execute(sql, {**params, "channel": RESUME_CHANNEL})).fetchone()
    except psycopg.errors.UniqueViolation as exc:
        # waiting_external is outside the default unique mask, so a newer job
        # may have taken the key meanwhile; nothing was written.
        conflict = _unique_error(exc, f"{outcome or 'resolve'} callback {params['callback_id']}")
        if conflict is None:
            raise
        raise conflict from None
    if row is None:
        raise await _not_found(conn, params["callback_id"])
    if outcome is not None:
        _count(row, outcome)
    return Job.from_row(row)


async def _resolve_with_payload(pool: AsyncConnectionPool, query: str, callback_id: Any,
                                payload: Any, outcome: str) -> Job[Any]:
    cid = parse_callback_id(callback_id)
    params = {"callback_id": cid, "key": RESULT_KEY, "result": _result(cid, outcome, payload)}
    async with pool.connection() as conn:
        return await _resolve(conn, query, params, outcome)


async def complete_external(pool: AsyncConnectionPool, callback_id: Any,
                            payload: Any = None) -> Job[Any]:
    """``running | waiting_external → completed``, storing the payload as the result."""
    return await _resolve_with_payload(pool, COMPLETE_EXTERNAL, callback_id, payload, "complete")


async def fail_external(pool: AsyncConnectionPool, callback_id: Any, error: str) -> Job[Any]:
    """``running | waiting_external → failed``, recording ``error`` for the attempt."""
    cid = parse_callback_id(callback_id)
    if not isinstance(error, str) or not error.strip():
        raise ValidationError("fail_external needs a non-empty error message")
    entry = _json(lifecycle.error_entry(error, 0, terminal=True), "error")
    async with pool.connection() as conn:
        return await _resolve(conn, FAIL_EXTERNAL, {"callback_id": cid, "entry": entry}, "fail")


async def retry_external(pool: AsyncConnectionPool, callback_id: Any) -> Job[Any]:
    """``running | waiting_external → available`` with attempt 0: a fresh start."""
    cid = parse_callback_id(callback_id)
    async with pool.connection() as conn, conn.transaction():
        job = await _resolve(conn, RETRY_EXTERNAL, {"callback_id": cid}, None)
        await conn.execute(NOTIFY_QUEUE, (config.NOTIFY_CHANNEL_PREFIX + job.queue,))
    _count({"kind": job.kind, "queue": job.queue}, "retry")  # once committed
    return job


async def resume_external(pool: AsyncConnectionPool, callback_id: Any,
                          payload: Any = None) -> Job[Any]:
    """``waiting_external → running``: the handler in ``wait_for_callback`` gets ``payload``."""
    return await _resolve_with_payload(pool, RESUME_EXTERNAL, callback_id, payload, "resume")


async def heartbeat_callback(pool: AsyncConnectionPool, callback_id: Any,
                             timeout_seconds: float = config.CALLBACK_TIMEOUT_SECONDS) -> Job[Any]:
    """Push the callback's timeout to now + ``timeout_seconds``."""
    cid = parse_callback_id(callback_id)
    timeout = check_timeout(timeout_seconds)
    async with pool.connection() as conn:
        return await _resolve(conn, HEARTBEAT_CALLBACK,
                              {"callback_id": cid, "timeout": timeout}, None)


def decide(row: dict[str, Any], payload: Any, default_action: str) -> tuple[str, str]:
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

    if check("filter", row.get("callback_filter")) is False:
        return "ignore", because("filter did not match the payload")
    if check("on_fail", row.get("callback_on_fail")):
        return "fail", because(f"on_fail matched: {row['callback_on_fail']}")
    if check("on_complete", row.get("callback_on_complete")):
        return "complete", because(f"on_complete matched: {row['callback_on_complete']}")
    return default_action, because(f"no expression matched; default_action={default_action}")


async def resolve_callback(pool: AsyncConnectionPool, callback_id: Any, payload: Any = None,
                           default_action: str = "ignore") -> ResolveResult:
    """Let the job's CEL expressions decide; ``transform`` shapes a completing payload."""
    cid = parse_callback_id(callback_id)
    if default_action not in DEFAULT_ACTIONS:
        raise ValidationError(f"default_action must be one of {', '.join(DEFAULT_ACTIONS)}, "
                              f"got {default_action!r}")
    _json(payload, "callback payload")
    async with pool.connection() as conn, conn.transaction():
        row = await (await conn.execute(LOCK_OPEN_CALLBACK, {"callback_id": cid})).fetchone()
        if row is None:
            raise await _not_found(conn, cid)
        action, reason = decide(row, payload, default_action)
        if action == "ignore":
            return ResolveResult("ignored", Job.from_row(row), payload, reason)
        if action == "fail":
            entry = _json(lifecycle.error_entry(f"callback failed: {reason}", 0, terminal=True),
                          "error")
            job = await _resolve(conn, FAIL_EXTERNAL, {"callback_id": cid, "entry": entry},
                                 "fail")
            return ResolveResult("failed", job, payload, reason)
        result = payload
        transform = row.get("callback_transform")
        if transform is not None:
            try:
                result = cel.evaluate(transform, payload, "transform")
            except cel.CelEvaluationError as exc:
                reason = f"{reason}; {exc} (completed with the untransformed payload: fail-open)"
        params = {"callback_id": cid, "key": RESULT_KEY,
                  "result": _result(cid, "complete", result)}
        job = await _resolve(conn, COMPLETE_EXTERNAL, params, "complete")
        return ResolveResult("completed", job, result, reason)


# --- the client role ---------------------------------------------------------------
class CallbackMixin:
    """Resolve external callbacks from the client; the CLI and HTTP receiver use these."""

    async def complete_external(self, callback_id: str,
                                payload: dict[str, Any] | None = None) -> Job[Any]:
        return await complete_external(await self._get_pool(), callback_id, payload)

    async def fail_external(self, callback_id: str, error: str) -> Job[Any]:
        return await fail_external(await self._get_pool(), callback_id, error)

    async def retry_external(self, callback_id: str) -> Job[Any]:
        return await retry_external(await self._get_pool(), callback_id)

    async def resume_external(self, callback_id: str,
                              payload: dict[str, Any] | None = None) -> Job[Any]:
        return await resume_external(await self._get_pool(), callback_id, payload)

    async def heartbeat_callback(self, callback_id: str,
                                 timeout_seconds: float = config.CALLBACK_TIMEOUT_SECONDS
                                 ) -> Job[Any]:
        return await heartbeat_callback(await self._get_pool(), callback_id, timeout_seconds)

    async def resolve_callback(self, callback_id: str, payload: dict[str, Any] | None = None,
                               default_action: str = "ignore") -> ResolveResult:
        return await resolve_callback(await self._get_pool(), callback_id, payload,
                                      default_action)
