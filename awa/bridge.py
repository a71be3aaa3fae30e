"""Enqueue on the caller's own psycopg connection, inside the caller's transaction.

The job is written with the same builder and statement as the client's
``insert``; it becomes visible (and wakes the queue's listeners) when the
caller commits, and vanishes if the caller rolls back.  Accepts a psycopg 3
connection, or an object wrapping one (Django's ``connection.connection``,
SQLAlchemy's ``driver_connection``); ``insert_job`` also takes an asyncpg
connection (or SQLAlchemy's asyncpg driver), the engine's statement carried
over it in ``$n`` form.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import re
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Unpack, cast

import psycopg
from psycopg.pq import TransactionStatus

from awa import recording
from awa.job import SerializationError, ValidationError
from awa.producer import build_batch, raise_if_unique_skipped
from awa.serialization import derive_kind
from awa.storage import describe_layout, engine_for, open_engine_sync
from awa.storage.common import enqueue
from awa.storage.common.enqueue import InsertKeywords, insert_options
from awa.storage.engine import Engine, EnqueueBatch, EnqueueOps, InsertOutcome


class UnsupportedConnection(ValidationError):
    """The object is no connection the bridge can write on (a ``TypeError`` too, as
    awa-pg 0.6.9 raised)."""


def _candidates(conn: Any) -> list[Any]:
    """``conn`` and the psycopg connection it may wrap: SQLAlchemy ``Connection`` /
    ``Session`` (``.connection()`` -> pooled DBAPI connection -> ``driver_connection``),
    Django's ``connection`` (``.connection`` once connected)."""
    found = [conn]
    # Looked up on the type: a Session's connection() is a method, elsewhere it is a property.
    if type(conn).__module__.startswith("sqlalchemy") and inspect.isfunction(
            getattr(type(conn), "connection", None)):
        try:
            conn = conn.connection()  # Session -> Connection (joins the session's transaction)
            found.append(conn)
        except Exception:  # not a Session after all
            pass
    if hasattr(conn, "ensure_connection") and getattr(conn, "vendor", None) == "postgresql":
        conn.ensure_connection()  # Django: connect lazily, inside its transaction handling
    for _ in range(3):
        conn = getattr(conn, "driver_connection", None) or getattr(conn, "connection", None)
        if conn is None or callable(conn):
            break
        found.append(conn)
    return found


def _unwrap(conn: Any, wanted: type) -> Any:
    for candidate in _candidates(conn):
        if isinstance(candidate, wanted):
            return candidate
    # 0.6.9's first sentence, then what this bridge takes.
    raise UnsupportedConnection(
        f"Unsupported connection type: {type(conn).__qualname__} (module="
        f"{type(conn).__module__}). Expected a {wanted.__module__}.{wanted.__name__}, or a "
        f"SQLAlchemy Session/Connection or Django connection using psycopg 3")


async def _unwrap_async(conn: Any) -> Any:
    """An async psycopg connection, or an asyncpg one wrapped in ``_AsyncpgConnection``,
    from itself or a SQLAlchemy AsyncSession/AsyncConnection (psycopg or asyncpg driver)."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    if _is_asyncpg(conn):
        return _AsyncpgConnection(conn)
    module = type(conn).__module__
    sa_conn, raw = None, conn
    if module.startswith("sqlalchemy") and hasattr(conn, "get_raw_connection"):
        sa_conn = conn  # AsyncConnection
    elif module.startswith("sqlalchemy") and callable(getattr(conn, "connection", None)):
        sa_conn = await conn.connection()  # AsyncSession -> AsyncConnection (its transaction)
    if sa_conn is not None:
        raw = await sa_conn.get_raw_connection()
    for candidate in _candidates(raw):
        if _is_asyncpg(candidate):
            if sa_conn is not None:
                # SQLAlchemy's asyncpg driver begins its transaction on its first statement:
                # make it begin now, so the job is written inside it.
                await sa_conn.exec_driver_sql(BEGIN_PROBE)
            return _AsyncpgConnection(candidate)
    return _unwrap(raw, psycopg.AsyncConnection)


# --- asyncpg: the engines' insert statements, carried over an asyncpg connection -----------
def _is_asyncpg(conn: Any) -> bool:
    """An asyncpg connection (or pool connection proxy), by module: asyncpg is optional."""
    return type(conn).__module__.startswith("asyncpg") and hasattr(conn, "prepare")


BEGIN_PROBE = "SELECT 1"
_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)[sbt]|%[sbt]")


def _dollar_query(query: str, params: Any) -> tuple[str, list[Any]]:
    """A psycopg query (``%(name)s`` / ``%(name)b`` / ``%s``) as asyncpg's ``$n`` form."""
    names: dict[str, int] = {}
    values: list[Any] = []
    positional = iter(params) if isinstance(params, (list, tuple)) else iter(())

    def placeholder(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name is None:
            values.append(next(positional))
            return f"${len(values)}"
        if name not in names:
            values.append(params[name])
            names[name] = len(values)
        return f"${names[name]}"

    return _PLACEHOLDER.sub(placeholder, query), values


class _AsyncpgCursor:
    """The part of a psycopg cursor the engines' insert path uses, over asyncpg (dict rows)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._rows: list[dict[str, Any]] = []
        self.rowcount = -1
        # psycopg's says whether a statement returned rows at all; asyncpg's fetch() gives
        # a list either way, so every statement reads as one with (maybe no) rows.
        self.description: tuple[()] | None = None

    async def __aenter__(self) -> _AsyncpgCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def execute(self, query: Any, params: Any = None) -> _AsyncpgCursor:
        if not isinstance(query, str):
            raise TypeError(f"the asyncpg bridge runs plain SQL strings, got {type(query)}")
        sql, args = _dollar_query(query, params)
        # fetch() goes through asyncpg's statement cache; the bridge always asks for the
        # returning statements, so the row count is the number of rows.
        self._rows = [dict(r) for r in await self._conn.fetch(sql, *args)]
        self.rowcount = len(self._rows)
        self.description = ()
        return self

    async def fetchall(self) -> list[dict[str, Any]]:
        rows, self._rows = self._rows, []
        return rows

    async def fetchone(self) -> dict[str, Any] | None:
        return self._rows.pop(0) if self._rows else None


@dataclass
class _AsyncpgInfo:
    conn: Any

    @property
    def transaction_status(self) -> TransactionStatus:
        return TransactionStatus.INTRANS if self.conn.is_in_transaction() \
            else TransactionStatus.IDLE


class _AsyncpgConnection:
    """An asyncpg connection seen through the psycopg methods the engines' enqueue uses
    (``cursor``, ``execute``, ``transaction`` -- a savepoint inside the caller's one --,
    ``info.transaction_status``), so the job is written by the engine's own statement."""

    def __init__(self, conn: Any) -> None:
        self.raw = conn
        self.info = _AsyncpgInfo(conn)

    def cursor(self, *, row_factory: Any = None) -> _AsyncpgCursor:
        return _AsyncpgCursor(self.raw)

    async def execute(self, query: Any, params: Any = None) -> _AsyncpgCursor:
        return await _AsyncpgCursor(self.raw).execute(query, params)

    def transaction(self) -> Any:
        return self.raw.transaction()


# Decided once per connection (psycopg or asyncpg), like open_engine does per pool.
_ASYNC_ENGINES: weakref.WeakKeyDictionary[Any, Engine] = weakref.WeakKeyDictionary()


async def _engine_of(aconn: Any) -> Engine:
    key = aconn.raw if isinstance(aconn, _AsyncpgConnection) else aconn
    try:
        engine = _ASYNC_ENGINES.get(key)
    except TypeError:  # not weakly referenceable: decide every time
        engine = None
    if engine is None:
        engine = engine_for(await describe_layout(cast(Any, aconn)))
        with contextlib.suppress(TypeError):
            _ASYNC_ENGINES[key] = engine
    return engine


# Decided once per connection (a database does not change engine under an open one).
_SYNC_ENGINES: weakref.WeakKeyDictionary[psycopg.Connection[Any], EnqueueOps] = (
    weakref.WeakKeyDictionary())


def _sync_engine(conn: psycopg.Connection[Any]) -> EnqueueOps:
    """The engine serving a blocking connection's database, decided once per connection."""
    engine = _SYNC_ENGINES.get(conn)
    if engine is None:
        engine = _SYNC_ENGINES[conn] = open_engine_sync(conn)
    return engine


# The columns awa-pg 0.6.9's bridge returned (timestamps as datetimes, state as text).
BRIDGE_COLUMNS = ("id", "kind", "queue", "args", "state", "priority", "attempt",
                  "max_attempts", "run_at", "created_at", "metadata", "tags")


# --- the args as awa-pg 0.6.9's bridge took them ------------------------------------
NULL_BYTES_ERROR = ("Job args must not contain null bytes (\\u0000): "
                    "Postgres JSONB does not support them")


def _reject_null_bytes(obj: Any) -> None:
    if isinstance(obj, str):
        if "\x00" in obj:
            raise ValidationError(NULL_BYTES_ERROR)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _reject_null_bytes(key)
            _reject_null_bytes(value)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _reject_null_bytes(item)


def _normalize_run_at(run_at: Any) -> datetime | None:
    if run_at is None:
        return None
    if isinstance(run_at, str):
        run_at = datetime.fromisoformat(run_at)  # its ValueError names the bad string
    if not isinstance(run_at, datetime):
        raise ValidationError(f"run_at must be a string or datetime, got "
                              f"{type(run_at).__name__}")
    return run_at if run_at.tzinfo is not None else run_at.replace(tzinfo=UTC)


def _prepared(args: Any, kind: str | None, metadata: dict[str, Any] | None, run_at: Any,
              ordering_key: Any) -> tuple[dict[str, Any], str, datetime | None, Any]:
    """Args, kind and run_at as the bridge of awa-pg 0.6.9 made them: a dict may carry its
    kind under ``"kind"``; values JSON cannot hold are stored as their ``str()``; its
    errors, with its wording."""
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        data: Any = dataclasses.asdict(args)
    elif hasattr(args, "model_dump"):
        data = args.model_dump(mode="json")
    elif isinstance(args, dict):
        data = args
    else:
        raise SerializationError(f"Job args must be a dataclass, pydantic BaseModel, or dict, "
                                 f"got {type(args).__name__}")
    _reject_null_bytes(data)
    _reject_null_bytes(metadata or {})
    if kind is None:
        if isinstance(args, dict):
            if "kind" not in args:
                raise ValidationError("Dict args require an explicit 'kind' parameter or a "
                                      "'kind' key")
            kind = args["kind"]
        else:
            kind = derive_kind(type(args).__name__)
    when = _normalize_run_at(run_at)
    if ordering_key is not None and not isinstance(ordering_key,
                                                   (str, bytes, bytearray, memoryview)):
        raise ValidationError(f"ordering_key must be bytes-like or str, got "
                              f"{type(ordering_key).__name__}")
    if isinstance(ordering_key, (bytearray, memoryview)):
        ordering_key = bytes(ordering_key)
    return json.loads(json.dumps(data, default=str)), cast(str, kind), when, ordering_key


def _row(batch: EnqueueBatch, outcome: InsertOutcome) -> dict[str, Any]:
    """The new job as awa-pg 0.6.9's bridge returned it (args as stored JSON)."""
    job = outcome.jobs[0]
    row = {name: getattr(job, name) for name in BRIDGE_COLUMNS}
    for name in ("run_at", "created_at"):
        row[name] = getattr(row[name], "datetime", row[name])
    row.update(args=json.loads(batch.args[0]), state=job.state.value)
    return row


def _one_job_batch(call: str, args: Any, options: InsertKeywords) -> EnqueueBatch:
    """The one-row batch both bridge inserts write (args prepared as 0.6.9's bridge did)."""
    given = insert_options(call, options)
    args, kind, run_at, ordering_key = _prepared(args, given.kind, given.metadata,
                                                 given.run_at, given.ordering_key)
    return build_batch([args], dataclasses.replace(given, kind=kind, run_at=run_at,
                                                   ordering_key=ordering_key))


async def insert_job(conn: Any, args: Any, **options: Unpack[InsertKeywords]) -> dict[str, Any]:
    """Insert one job on an ``psycopg.AsyncConnection`` or an asyncpg connection (or a
    SQLAlchemy async Session/Connection on either), inside its transaction; returns the row
    as a dict."""
    aconn = await _unwrap_async(conn)
    batch = _one_job_batch("insert_job", args, options)
    engine = await _engine_of(aconn)
    outcome = await engine.insert_batch(aconn, batch)
    await raise_if_unique_skipped(engine, aconn, batch, outcome)
    recording.record_inserted(batch, outcome)
    return _row(batch, outcome)


def insert_job_sync(conn: Any, args: Any, **options: Unpack[InsertKeywords]) -> dict[str, Any]:
    """Insert one job on a blocking ``psycopg.Connection``; returns the row as a dict."""
    sconn = _unwrap(conn, psycopg.Connection)
    batch = _one_job_batch("insert_job_sync", args, options)
    engine = _sync_engine(sconn)
    outcome = engine.insert_batch_sync(sconn, batch)
    if outcome.skipped and batch.unique_key[0] is not None:
        raise enqueue.unique_conflict(batch.kind[0],
                                      engine.unique_holder_sync(sconn, batch.unique_key[0]))
    recording.record_inserted(batch, outcome)
    return _row(batch, outcome)
