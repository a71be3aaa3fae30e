"""Enqueue on the caller's own psycopg connection, inside the caller's transaction.

The job is written with the same builder and statement as the client's
``insert``; it becomes visible (and wakes the queue's listeners) when the
caller commits, and vanishes if the caller rolls back.  Accepts a psycopg 3
connection, or an object wrapping one (Django's ``connection.connection``,
SQLAlchemy's ``driver_connection``).
"""

from __future__ import annotations

import inspect
import json
import weakref
from datetime import datetime
from typing import Any

import psycopg

from awa import config
from awa import metrics as awa_metrics
from awa.job import ValidationError
from awa.producer import raise_if_unique_skipped
from awa.storage import describe_layout_sync, engine_for, open_engine
from awa.storage.canonical import enqueue
from awa.storage.engine import EnqueueBatch, EnqueueOps, InsertOutcome


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
    raise UnsupportedConnection(
        f"expected a {wanted.__module__}.{wanted.__name__}, or a SQLAlchemy Session/Connection "
        f"or Django connection using psycopg 3; got {type(conn).__module__}."
        f"{type(conn).__qualname__}")


async def _unwrap_async(conn: Any) -> Any:
    """An async psycopg connection from itself or a SQLAlchemy AsyncSession/AsyncConnection."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    module = type(conn).__module__
    if module.startswith("sqlalchemy") and hasattr(conn, "get_raw_connection"):
        raw = await conn.get_raw_connection()  # AsyncConnection
        return _unwrap(raw, psycopg.AsyncConnection)
    if module.startswith("sqlalchemy") and callable(getattr(conn, "connection", None)):
        aconn = await conn.connection()  # AsyncSession -> AsyncConnection (its transaction)
        raw = await aconn.get_raw_connection()
        return _unwrap(raw, psycopg.AsyncConnection)
    return _unwrap(conn, psycopg.AsyncConnection)


# Decided once per connection (a database does not change engine under an open one).
_SYNC_ENGINES: weakref.WeakKeyDictionary[psycopg.Connection[Any], EnqueueOps] = (
    weakref.WeakKeyDictionary())


def _sync_engine(conn: psycopg.Connection[Any]) -> EnqueueOps:
    """The engine serving a blocking connection's database (``open_engine``'s sync twin)."""
    engine = _SYNC_ENGINES.get(conn)
    if engine is None:
        engine = _SYNC_ENGINES[conn] = engine_for(describe_layout_sync(conn))
    return engine


# The columns awa-pg 0.6.9's bridge returned (timestamps as datetimes, state as text).
BRIDGE_COLUMNS = ("id", "kind", "queue", "args", "state", "priority", "attempt",
                  "max_attempts", "run_at", "created_at", "metadata", "tags")


def _row(batch: EnqueueBatch, outcome: InsertOutcome) -> dict[str, Any]:
    """The new job as awa-pg 0.6.9's bridge returned it (args as stored JSON)."""
    job = outcome.jobs[0]
    row = {name: getattr(job, name) for name in BRIDGE_COLUMNS}
    for name in ("run_at", "created_at"):
        row[name] = getattr(row[name], "datetime", row[name])
    row.update(args=json.loads(batch.args[0]), state=job.state.value)
    return row


async def insert_job(conn: Any, args: Any, *, kind: str | None = None,
                     queue: str = config.DEFAULT_QUEUE, priority: int = config.DEFAULT_PRIORITY,
                     max_attempts: int = config.DEFAULT_MAX_ATTEMPTS,
                     tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                     run_at: str | datetime | None = None,
                     ordering_key: bytes | str | None = None,
                     unique_opts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Insert one job on an ``psycopg.AsyncConnection``; returns the row as a dict."""
    aconn = await _unwrap_async(conn)
    batch = enqueue.build_batch([args], kind=kind, queue=queue, priority=priority,
                                max_attempts=max_attempts, tags=tags, metadata=metadata,
                                run_at=run_at, unique_opts=unique_opts, ordering_key=ordering_key)
    engine = await open_engine(aconn)
    outcome = await engine.insert_batch(aconn, batch)
    await raise_if_unique_skipped(engine, aconn, batch, outcome)
    awa_metrics.record_inserted(batch, outcome)
    return _row(batch, outcome)


def insert_job_sync(conn: Any, args: Any, *, kind: str | None = None,
                    queue: str = config.DEFAULT_QUEUE, priority: int = config.DEFAULT_PRIORITY,
                    max_attempts: int = config.DEFAULT_MAX_ATTEMPTS,
                    tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                    run_at: str | datetime | None = None,
                    ordering_key: bytes | str | None = None,
                    unique_opts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Insert one job on a blocking ``psycopg.Connection``; returns the row as a dict."""
    sconn = _unwrap(conn, psycopg.Connection)
    batch = enqueue.build_batch([args], kind=kind, queue=queue, priority=priority,
                                max_attempts=max_attempts, tags=tags, metadata=metadata,
                                run_at=run_at, unique_opts=unique_opts, ordering_key=ordering_key)
    engine = _sync_engine(sconn)
    outcome = engine.insert_batch_sync(sconn, batch)
    if outcome.skipped and batch.unique_key[0] is not None:
        raise enqueue.unique_conflict(batch.kind[0],
                                      engine.unique_holder_sync(sconn, batch.unique_key[0]))
    awa_metrics.record_inserted(batch, outcome)
    return _row(batch, outcome)
