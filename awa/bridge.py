"""Enqueue on the caller's own psycopg connection, inside the caller's transaction.

The job is written with the same builder and statement as the client's
``insert``; it becomes visible (and wakes the queue's listeners) when the
caller commits, and vanishes if the caller rolls back.  Accepts a psycopg 3
connection, or an object wrapping one (Django's ``connection.connection``,
SQLAlchemy's ``driver_connection``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg

from awa import config
from awa import metrics as awa_metrics
from awa.job import ValidationError
from awa.producer import raise_if_unique_skipped
from awa.storage import open_engine
from awa.storage.canonical import ENGINE as CANONICAL
from awa.storage.canonical import enqueue
from awa.storage.engine import EnqueueBatch, EnqueueOps, InsertOutcome


def _unwrap(conn: Any, wanted: type) -> Any:
    for candidate in (conn, getattr(conn, "driver_connection", None),
                      getattr(conn, "connection", None),
                      getattr(getattr(conn, "connection", None), "driver_connection", None)):
        if isinstance(candidate, wanted):
            return candidate
    raise ValidationError(f"expected a {wanted.__module__}.{wanted.__name__} (or an object "
                          f"wrapping one), got {type(conn).__name__}")


def _sync_engine(conn: psycopg.Connection[Any]) -> EnqueueOps:
    """The engine for a blocking connection: ``open_engine`` is async, and only canonical
    exists so far; when a second engine arrives this needs a sync twin of the decision."""
    return CANONICAL


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
    aconn = _unwrap(conn, psycopg.AsyncConnection)
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
