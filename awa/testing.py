"""awa.testing: run one job of a test by hand, as awa-pg 0.6.9's ``awa.testing`` did.

    from awa.testing import AwaTestClient

    async def test_send_email(database_url):
        tc = AwaTestClient(awa.AsyncClient(database_url))     # or awa.Client
        await tc.migrate()
        await tc.clean()
        await tc.insert(SendEmail(to="a@b.c"))
        result = await tc.work_one(SendEmail, handler=send_email)
        assert result.is_completed()

``work_one`` claims through the storage engine and writes the outcome the way
the runtime does (same guarded statements), so states, attempts and errors
match a real worker's.  Differences from awa-pg 0.6.9 are in docs/compat.md.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import awa
from awa import lifecycle
from awa.serialization import derive_kind
from awa.storage.engine import AttemptWrite

DEFAULT_DATABASE_URL = "postgres://postgres:test@localhost:5432/awa_test"
WORK_ONE_DEADLINE_MS = 5 * 60 * 1000

T = TypeVar("T")


def get_database_url() -> str:
    """``DATABASE_URL`` from the environment, else ``DEFAULT_DATABASE_URL``."""
    return os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)


@dataclass
class JobRow:
    """A job as ``work_one`` reports it (plain data, state as text)."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    priority: int
    tags: list[str]
    state: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> JobRow:
        return cls(id=row["id"], kind=row["kind"], queue=row["queue"], args=row["args"],
                   attempt=row["attempt"], max_attempts=row["max_attempts"],
                   priority=row["priority"], tags=row.get("tags") or [],
                   state=row.get("state"))

    @classmethod
    def from_job(cls, job: awa.Job[Any]) -> JobRow:
        return cls(id=job.id, kind=job.kind, queue=job.queue, args=job.args,
                   attempt=job.attempt, max_attempts=job.max_attempts, priority=job.priority,
                   tags=list(job.tags), state=str(job.state))


class _NoJob:
    """Sentinel: no job was available to claim."""

    def __repr__(self) -> str:
        return "NoJob"

    def __bool__(self) -> bool:
        return False


NoJob = _NoJob()


@dataclass
class HandlerJob(Generic[T]):
    """What ``work_one`` hands the handler (the fields a handler usually reads)."""

    args: T
    id: int
    attempt: int
    max_attempts: int
    queue: str
    priority: int
    deadline: datetime | None
    metadata: dict[str, Any]
    tags: list[str]

    def is_cancelled(self) -> bool:
        return False


@dataclass
class WorkResult:
    """The outcome of ``work_one``: completed, retryable, failed, cancelled, snoozed, no_job."""

    job: JobRow | _NoJob
    outcome: str
    error: str | None = None

    def is_completed(self) -> bool:
        return self.outcome == "completed"

    def is_failed(self) -> bool:
        return self.outcome == "failed"

    def is_retryable(self) -> bool:
        return self.outcome == "retryable"

    def is_cancelled(self) -> bool:
        return self.outcome == "cancelled"

    def is_snoozed(self) -> bool:
        return self.outcome == "snoozed"

    def is_no_job(self) -> bool:
        return self.outcome == "no_job"


def _decode(args: Any) -> Any:
    if isinstance(args, (bytes, bytearray, memoryview)):
        args = bytes(args).decode()
    return json.loads(args) if isinstance(args, str) else args


def _build_args(args_type: type, data: Any) -> Any:
    if hasattr(args_type, "model_validate"):
        return args_type.model_validate(data)
    if hasattr(args_type, "__dataclass_fields__"):
        return args_type(**data)
    return data


def _error(exc: BaseException | str, attempt: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"error": str(exc), "attempt": attempt,
                             "at": datetime.now(UTC).isoformat()}
    if isinstance(exc, BaseException):
        entry["traceback"] = "".join(traceback.format_exception(exc))[-4000:]
    return entry


class AwaTestClient:
    """Wraps an ``awa.Client`` or ``awa.AsyncClient`` with per-test helpers."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        return self._client

    async def _on_client(self, fn: Callable[[awa.AsyncClient], Coroutine[Any, Any, Any]]) -> Any:
        """Run ``fn(async_client)`` on the loop that owns the client's pool."""
        if isinstance(self._client, awa.AsyncClient):
            return await fn(self._client)
        target = self._client.async_client
        future = asyncio.run_coroutine_threadsafe(fn(target), self._client._loop.loop)
        return await asyncio.wrap_future(future)

    async def insert(self, args: Any, **kwargs: Any) -> awa.Job[Any]:
        job: awa.Job[Any] = await self._on_client(lambda c: c.insert(args, **kwargs))
        return job

    async def migrate(self) -> None:
        await self._on_client(lambda c: c.migrate())

    async def clean(self) -> None:
        """Delete every job (DLQ too), unique claim, queue setting and runtime snapshot
        (test isolation), through the storage engine; the database keeps its engine."""
        async def clean(c: awa.AsyncClient) -> None:
            engine = await c._get_engine()
            pool = await c._get_pool()
            async with pool.connection() as conn:
                await engine.clean_for_tests(conn)
        await self._on_client(clean)

    async def work_one(self, args_type: type,
                       handler: Callable[[HandlerJob[Any]], Awaitable[Any]], *,
                       kind: str | None = None, queue: str = "default") -> WorkResult:
        """Claim the next available job of ``queue``, run ``handler`` on it, record the outcome.

        ``outcome="no_job"`` when nothing of that kind is available.
        """
        kind_str = kind or derive_kind(args_type.__name__)

        async def claim(c: awa.AsyncClient) -> Any:
            engine = await c._get_engine()
            pool = await c._get_pool()
            async with pool.connection() as conn:
                jobs = await engine.claim_batch(conn, queue, 1, WORK_ONE_DEADLINE_MS)
                if jobs and jobs[0].kind != kind_str:
                    # Another kind was next: hand it back untouched (attempt returned).
                    await engine.snooze_batch(conn, [AttemptWrite(
                        id=jobs[0].id, run_lease=jobs[0].run_lease, delay_s=0.0)])
                    return None
                return jobs[0] if jobs else None
        job = await self._on_client(claim)
        if job is None:
            return WorkResult(job=NoJob, outcome="no_job")
        data = _decode(job.args)
        try:
            args = _build_args(args_type, data)
        except Exception as exc:
            return await self._finish(job, "failed", exc)
        deadline = job.deadline_at.datetime if hasattr(job.deadline_at, "datetime") \
            else job.deadline_at
        handler_job = HandlerJob(args=args, id=job.id, attempt=job.attempt,
                                 max_attempts=job.max_attempts, queue=job.queue,
                                 priority=job.priority, deadline=deadline,
                                 metadata=dict(job.metadata or {}), tags=list(job.tags))
        try:
            result = handler(handler_job)
            if inspect.isawaitable(result):
                result = await result
        except awa.TerminalError as exc:
            return await self._finish(job, "failed", exc)
        except Exception as exc:
            outcome = "failed" if job.attempt >= job.max_attempts else "retryable"
            return await self._finish(job, outcome, exc)
        if result is None:
            return await self._finish(job, "completed", None)
        if isinstance(result, awa.RetryAfter):
            return await self._finish(job, "retryable", None, delay_s=result.seconds)
        if isinstance(result, awa.Snooze):
            return await self._finish(job, "snoozed", None, delay_s=result.seconds)
        if isinstance(result, awa.Cancel):
            return await self._finish(job, "cancelled", result.reason)
        await self._finish(job, "retryable", TypeError(f"unexpected handler return type: "
                                                       f"{type(result)}"))
        raise TypeError(f"Unexpected handler return type: {type(result)}")

    async def _finish(self, job: awa.Job[Any], outcome: str, error: BaseException | str | None,
                      delay_s: float | None = None) -> WorkResult:
        async def write(c: awa.AsyncClient) -> awa.Job[Any]:
            engine = await c._get_engine()
            pool = await c._get_pool()
            attempt = AttemptWrite(
                id=job.id, run_lease=job.run_lease,
                error=_error(error, job.attempt) if error is not None else None,
                delay_s=delay_s if delay_s is not None
                else lifecycle.backoff_seconds(job.attempt))
            async with pool.connection() as conn:
                op = {"completed": engine.complete_batch, "retryable": engine.retry_batch,
                      "snoozed": engine.snooze_batch, "cancelled": engine.cancel_batch,
                      "failed": engine.fail_batch}[outcome]
                await op(conn, [attempt])
            return await c.get_job(job.id)
        final = await self._on_client(write)
        message = None if error is None else str(error)
        return WorkResult(job=JobRow.from_job(final), outcome=outcome, error=message)


try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - awa.testing works without pytest
    pytest_asyncio = None  # type: ignore[assignment]  # optional import: None marks it absent

if pytest_asyncio is not None:
    @pytest_asyncio.fixture
    async def awa_client() -> Any:
        """A migrated, cleaned ``AwaTestClient`` on ``get_database_url()``."""
        client = awa.AsyncClient(get_database_url())
        tc = AwaTestClient(client)
        await tc.migrate()
        await tc.clean()
        yield tc
        await tc.clean()
        await client.close()
