"""Jobs, their states, what a handler may return, and the exceptions.

A ``Job`` is a row of ``awa.jobs`` plus, while a handler runs it, the
execution context the runtime attaches (cancellation flag, progress buffer,
callback registration).  Outside a handler those methods raise ``AwaError``.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

T = TypeVar("T")

# ``Timestamp.datetime`` (the attribute) shadows the class inside Timestamp's body, so its
# annotations name the class through this alias.
_DateTime = datetime


# --- exceptions -----------------------------------------------------------
class AwaError(Exception):
    """Base of every error this package raises on purpose."""


class DatabaseError(AwaError):
    """The database could not be reached or refused the operation."""


class SchemaNotMigrated(DatabaseError):
    """The database schema is older than this code; run ``awa migrate``.

    A ``DatabaseError`` too: awa-pg 0.6.9 surfaced an unmigrated database as one.
    """


class ForeignSchema(SchemaNotMigrated):
    """The database was laid out by another awa distribution (e.g. the Rust-core awa 0.6), or
    is served by a storage engine this version lacks: it is refused and left unchanged.

    A ``SchemaNotMigrated``, so code that refuses an unmigrated database refuses this one too.
    """


class SerializationError(AwaError, TypeError):
    """Job args could not be turned into JSON, or back into the args type.

    Also a ``TypeError``: awa-pg 0.6.9 raised ``TypeError`` for unserialisable args.
    """


class TerminalError(AwaError):
    """Raise from a handler to fail the job at once, without retries."""


class UniqueConflict(AwaError):
    """A unique job with the same key is already held by another job."""


class UnknownJobKind(AwaError):
    """A job's kind has no registered handler in this runtime."""


class ValidationError(AwaError, ValueError, TypeError):
    """An argument is out of range (priority, max_attempts, queue name...).

    Also a ``ValueError`` and a ``TypeError``: where awa-pg 0.6.9 raised one of those
    for a bad argument, code catching it still catches this.
    """


class ArgsNotAnObject(SerializationError, ValidationError):
    """Job args that are not a dataclass, pydantic model or dict: awa-pg 0.6.9's
    ``ValidationError`` (with its wording), and the ``SerializationError`` of every
    other args that cannot be stored."""


class CallbackNotFound(AwaError):
    """No job waits on this callback id (unknown, or already resolved)."""


class NotInHandler(AwaError, RuntimeError):
    """A handler-only ``Job`` method was called outside a running handler
    (a ``RuntimeError`` too, as in awa-pg 0.6.9)."""


class JobNotFound(AwaError):
    """No job has this id."""


# --- timestamps -----------------------------------------------------------
class Timestamp(str):
    """A job timestamp: the ISO-8601 string awa-pg 0.6.9 returned, that still acts as a datetime.

    ``job.created_at`` is a ``str`` (``"2026-01-01T12:00:00.123456+00:00"``, UTC) as in
    the reference, so code that stores, prints or parses it keeps working; comparisons,
    subtraction and attribute access (``.timestamp()``, ``.tzinfo``...) also accept
    and behave like the ``datetime`` it came from, which the runtime relies on.
    """

    __slots__ = ("datetime",)
    datetime: _DateTime

    def __new__(cls, value: _DateTime) -> Timestamp:
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        self = super().__new__(cls, value.isoformat())
        self.datetime = value
        return self

    @classmethod
    def of(cls, value: Any) -> Any:
        """Wrap a datetime; leave None (and anything else) as it is."""
        if isinstance(value, Timestamp) or not isinstance(value, datetime):
            return value
        return cls(value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.datetime, name)

    def __reduce__(self) -> Any:
        return (Timestamp, (self.datetime,))

    @staticmethod
    def _other(other: Any) -> Any:
        if isinstance(other, Timestamp):
            return other.datetime
        return other if isinstance(other, datetime) else None

    def _cmp(self, other: Any, op: str) -> Any:
        o = self._other(other)
        if o is None:
            return getattr(str, op)(self, other)
        return getattr(self.datetime, op)(o)

    def __eq__(self, other: object) -> bool:
        return bool(self._cmp(other, "__eq__"))

    def __ne__(self, other: object) -> bool:
        return bool(self._cmp(other, "__ne__"))

    def __lt__(self, other: Any) -> Any:
        return self._cmp(other, "__lt__")

    def __le__(self, other: Any) -> Any:
        return self._cmp(other, "__le__")

    def __gt__(self, other: Any) -> Any:
        return self._cmp(other, "__gt__")

    def __ge__(self, other: Any) -> Any:
        return self._cmp(other, "__ge__")

    def __hash__(self) -> int:
        return hash(self.datetime)

    def __sub__(self, other: Any) -> Any:
        o = self._other(other)
        if o is not None:
            return self.datetime - o
        if isinstance(other, timedelta):
            return Timestamp(self.datetime - other)
        return NotImplemented

    def __rsub__(self, other: Any) -> Any:
        if isinstance(other, datetime):
            return other - self.datetime
        return NotImplemented

    def __add__(self, other: Any) -> Any:
        if isinstance(other, timedelta):
            return Timestamp(self.datetime + other)
        return str.__add__(self, other)

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, timedelta):
            return Timestamp(self.datetime + other)
        return other + str(self)


TIMESTAMP_FIELDS = ("run_at", "heartbeat_at", "deadline_at", "attempted_at", "finalized_at",
                    "created_at", "callback_timeout_at")


class _TimestampField:
    """A ``Job`` timestamp field: whatever is set is kept as it is (the runtime sets the
    driver's datetimes), and a datetime is read as a ``Timestamp``, made on the first read
    and kept.  A job the runtime claims and finishes without its handler reading a
    timestamp builds no Timestamp: building one per field (``astimezone`` and
    ``isoformat``) when the job was made, through a ``__setattr__`` that every field
    assignment ran, cost ~17 us of CPU per claimed job against ~2.5 us now (issue 32)."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object | None, owner: type | None = None) -> datetime | None:
        if obj is None:
            return None  # the class attribute: the dataclass field's default
        values = obj.__dict__
        value = values.get(self.name)
        if isinstance(value, datetime):
            value = values[self.name] = Timestamp(value)
        return value  # type: ignore[return-value]  # a Timestamp: a str acting as a datetime

    def __set__(self, obj: object, value: datetime | str | None) -> None:
        obj.__dict__[self.name] = value


def job_datetime(job: Job[Any], name: str) -> datetime | None:
    """A timestamp field of ``job`` as a plain ``datetime`` (or None), without building the
    ``Timestamp`` reading the field would: for the runtime's own arithmetic per job."""
    value = job.__dict__.get(name)
    return value.datetime if isinstance(value, Timestamp) else value


# --- states -------------------------------------------------------------
class JobState(str, enum.Enum):
    Scheduled = "scheduled"
    Available = "available"
    Running = "running"
    Completed = "completed"
    Retryable = "retryable"
    Failed = "failed"
    Cancelled = "cancelled"
    WaitingExternal = "waiting_external"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"JobState.{self.name}"

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.Completed, JobState.Failed, JobState.Cancelled)


# --- handler results ----------------------------------------------------
@dataclass(frozen=True)
class RetryAfter:
    """Retry after ``seconds``; spends the attempt."""

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", float(self.seconds))


@dataclass(frozen=True)
class Snooze:
    """Run again after ``seconds`` without spending an attempt."""

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", float(self.seconds))


@dataclass(frozen=True)
class Cancel:
    """End the job as ``cancelled``."""

    reason: str = "cancelled by handler"


@dataclass(frozen=True)
class CallbackToken:
    id: str

    def __repr__(self) -> str:
        return f"CallbackToken({self.id!r})"


@dataclass(frozen=True)
class WaitForCallback:
    """Park the job in ``waiting_external`` until its callback resolves."""

    token: CallbackToken | str

    @property
    def callback_id(self) -> str:
        return self.token.id if isinstance(self.token, CallbackToken) else str(self.token)


# --- the job ---------------------------------------------------------------
class ExecutionContext(Protocol):
    """What the runtime offers a handler for the attempt it is running."""

    def is_cancelled(self) -> bool: ...
    def set_progress(self, percent: float | None, message: str | None) -> None: ...
    def update_metadata(self, updates: dict[str, Any]) -> None: ...
    async def flush_progress(self) -> None: ...
    async def register_callback(self, timeout_seconds: float, filter: str | None,
                                on_complete: str | None, on_fail: str | None,
                                transform: str | None) -> CallbackToken: ...
    async def wait_for_callback(self, token: CallbackToken | str) -> Any: ...


@dataclass(eq=False)
class Job(Generic[T]):
    """A job row; its public fields, in order, are the job's columns (``JOB_COLUMNS``)."""

    id: int
    kind: str
    queue: str
    args: T
    state: JobState
    priority: int = 2
    attempt: int = 0
    max_attempts: int = 25
    run_at: _TimestampField = _TimestampField()
    heartbeat_at: _TimestampField = _TimestampField()
    deadline_at: _TimestampField = _TimestampField()
    attempted_at: _TimestampField = _TimestampField()
    finalized_at: _TimestampField = _TimestampField()
    created_at: _TimestampField = _TimestampField()
    errors: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    unique_key: bytes | None = None
    unique_states: str | None = None
    callback_id: str | None = None
    callback_timeout_at: _TimestampField = _TimestampField()
    callback_filter: str | None = None
    callback_on_complete: str | None = None
    callback_on_fail: str | None = None
    callback_transform: str | None = None
    run_lease: int = 0
    progress: dict[str, Any] | None = None
    _ctx: ExecutionContext | None = field(default=None, repr=False)

    @classmethod
    def from_row(cls, row: dict[str, Any], args: Any = None) -> Job[Any]:
        """Build from a row of awa.jobs (a dict; missing columns keep defaults)."""
        values = {k: row[k] for k in JOB_COLUMNS if k in row}
        values["state"] = JobState(values.get("state", "available"))
        values["errors"] = list(values.get("errors") or [])
        values["metadata"] = values.get("metadata") or {}
        values["tags"] = list(values.get("tags") or [])
        if values.get("callback_id") is not None:
            values["callback_id"] = str(values["callback_id"])
        if values.get("unique_key") is not None:
            values["unique_key"] = bytes(values["unique_key"])
        if args is not None:
            values["args"] = args
        return cls(**values)

    @property
    def deadline(self) -> datetime | None:
        return self.deadline_at

    def __repr__(self) -> str:
        return (f"Job(id={self.id}, kind={self.kind!r}, queue={self.queue!r}, "
                f"state={self.state.value}, attempt={self.attempt}/{self.max_attempts})")

    # -- inside a handler --------------------------------------------------
    def _context(self) -> ExecutionContext:
        if self._ctx is None:
            raise NotInHandler("this method is only available inside a running handler")
        return self._ctx

    def is_cancelled(self) -> bool:
        return self._ctx is not None and self._ctx.is_cancelled()

    def set_progress(self, percent: float | None, message: str | None = None) -> None:
        self._context().set_progress(percent, message)

    def update_metadata(self, updates: dict[str, Any]) -> None:
        self._context().update_metadata(updates)

    async def flush_progress(self) -> None:
        await self._context().flush_progress()

    def flush_progress_sync(self) -> None:
        """``flush_progress`` from a sync handler (it runs on a worker thread)."""
        import asyncio
        ctx = self._context()
        loop: asyncio.AbstractEventLoop | None = getattr(ctx, "loop", None)
        if loop is None:
            raise NotInHandler("flush_progress_sync() needs the runtime's event loop")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            # An async handler: blocking would stall the loop, so the write is scheduled
            # (it lands before the attempt's outcome is written).
            loop.create_task(ctx.flush_progress())
            return
        asyncio.run_coroutine_threadsafe(ctx.flush_progress(), loop).result()

    async def register_callback(self, timeout_seconds: float = 3600.0, filter: str | None = None,
                                on_complete: str | None = None, on_fail: str | None = None,
                                transform: str | None = None) -> CallbackToken:
        return await self._context().register_callback(
            timeout_seconds, filter, on_complete, on_fail, transform)

    async def wait_for_callback(self, token: CallbackToken | str) -> Any:
        return await self._context().wait_for_callback(token)


# The columns of a job row (awa.jobs), in table order: Job's public fields, the one list.
# Its copies in SQL -- the job tables of migration 0001 and of queue storage's layout, the
# view's write triggers of migrations 0002 and 0006, which cannot change once released --
# are checked against it (tests/foundation/test_job_columns.py).
JOB_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Job) if not f.name.startswith("_"))


# --- a claimed job's args, read when first asked for (issue 48) ----------------------
# A claimed job's instance dict holds no "args" until they are first read: instead
# ``ARGS_SOURCE`` holds the row's args as JSON text (or, once checked, the parsed object)
# and ``ARGS_BUILD``, when the args are a dataclass, ``(args type, its init field names)``
# (absent: the parsed object is the args).  ``Job.args`` is a non-data descriptor
# (``_ClaimedArgs``): the instance dict wins over it, so it runs only while "args" is
# missing there, i.e. on the first read of a claimed job's args, which parses and builds
# them and stores the result as the plain attribute; later reads cost what any attribute
# does, and a handler that never reads its args never has them parsed.  The runtime checks
# before the handler runs that the args fit its handler (``awa.serialization.ArgsDecoder``,
# the one other reader of these two keys), leaving for the first read only what cannot
# fail.  (Not ``Job.__getattr__``: defining it turns off CPython's specialised attribute
# loads for every attribute of every Job.)
ARGS_SOURCE = "_args_source"
ARGS_BUILD = "_args_build"
# The C scanner behind json.loads, without its Python layers (two calls, two regex
# matches): jsonb's text form has no whitespace around the value to skip.
_scan_json: Any = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009 - set in __init__; typeshed omits it
_decode_json = json.JSONDecoder().decode


def parse_json_text(text: str) -> Any:
    """``json.loads(text)`` for jsonb's text form (nothing around the value), cheaper."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:  # not a value at 0 (leading whitespace): the full decoder says
        return _decode_json(text)
    return value if end == len(text) else _decode_json(text)


class _ClaimedArgs:
    """``Job.args`` where the instance dict has none: a claimed job's first read parses
    and builds them and keeps them as the attribute."""

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        values = obj.__dict__
        source = values.get(ARGS_SOURCE, values)
        if source is values:
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute 'args'")
        data = parse_json_text(source) if type(source) is str else source
        build = values.get(ARGS_BUILD)
        if build is not None:  # a dataclass whose construction cannot fail (ArgsDecoder)
            args_type, names = build
            data = (args_type(**data) if data.keys() <= names else
                    args_type(**{k: v for k, v in data.items() if k in names}))
        values["args"] = data
        # pop, not del: a sync handler's thread and a hook on the loop may both be here.
        values.pop(ARGS_SOURCE, None)
        values.pop(ARGS_BUILD, None)
        return data


# Set after the class is made, so the dataclass field ``args`` keeps having no default.
setattr(Job, "args", _ClaimedArgs())  # noqa: B010 - an attribute mypy must not see as the field's type


def claimed_job(row: tuple[Any, ...]) -> Job[Any]:
    """A claimed attempt's row (the engines' claim columns: id, kind, queue, args,
    priority, attempt, max_attempts, run_at, deadline_at, attempted_at, created_at,
    errors, metadata, tags, run_lease, progress) as a running ``Job``.

    Built as its instance dict in one go: the dataclass ``__init__`` assigns 27 fields,
    seven of them through ``_TimestampField.__set__`` (a Python call each), and this runs
    once per claimed job on the hot path.  What ``__init__`` would store, this stores,
    except ``args``: the row's args (JSON text, ``args::text``) wait for their first read
    (``ARGS_SOURCE`` above); a row whose args the driver already parsed keeps them.
    """
    (id_, kind, queue, args, priority, attempt, max_attempts, run_at, deadline_at,
     attempted_at, created_at, errors, metadata, tags, run_lease, progress) = row
    job: Job[Any] = _new_job(Job)
    job.__dict__ = {
        "id": id_, "kind": kind, "queue": queue, ARGS_SOURCE: args, "state": _RUNNING,
        "priority": priority, "attempt": attempt, "max_attempts": max_attempts,
        "run_at": run_at, "heartbeat_at": None, "deadline_at": deadline_at,
        "attempted_at": attempted_at, "finalized_at": None, "created_at": created_at,
        "errors": errors or [], "metadata": metadata or {}, "tags": tags or [],
        "unique_key": None, "unique_states": None, "callback_id": None,
        "callback_timeout_at": None, "callback_filter": None, "callback_on_complete": None,
        "callback_on_fail": None, "callback_transform": None, "run_lease": run_lease,
        "progress": progress, "_ctx": None,
    }
    return job


_new_job = object.__new__
_RUNNING = JobState.Running


if TYPE_CHECKING:  # pragma: no cover
    JobT = Job[Any]
