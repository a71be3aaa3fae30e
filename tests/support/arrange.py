"""Jobs in any state, arranged through the engine that serves the database.

Tests that need a row the runtime would take minutes to produce (a running
attempt with an old heartbeat, a failed job with three errors, a waiting job
whose callback times out soon) arrange it here instead of through a worker,
never by writing the engine's tables themselves:

* canonical: the engine enqueues the job (``insert_batch``), then an UPDATE of
  the ``awa.jobs`` view gives it its state and columns (the view's trigger puts
  the row where its state lives; the tables' triggers keep unique claims);
* queue storage: ``awa.qs_arrange_job`` (the engine's ``sql/arrange.sql``)
  places it: a ready entry on its lane for available jobs; for a running or
  waiting attempt the ready entry of the previous lease, the claim's receipt,
  materialized into a lease; deferred and done rows; and the unique claim its
  state holds.  ``awa.qs_arrange_times`` moves an attempt's or a done entry's times.

Columns are the ``awa.jobs`` view's; values are Python values, missing ones
take the defaults below.  ``insert_job`` is for a blocking connection and
asks the database which engine serves it; the conformance suite's arrangers
(tests/storage) call ``canonical_job`` / ``queue_storage_job`` on their own
engine.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from psycopg import sql
from psycopg.types.json import Jsonb

from awa.storage import QUEUE_STORAGE, describe_layout_sync
from awa.storage.canonical import CanonicalEngine
from awa.storage.engine import EnqueueBatch
from awa.storage.queue_storage.schema import in_schema

DEFERRED = ("scheduled", "retryable")
TERMINAL = ("completed", "failed", "cancelled")
ATTEMPTS = ("running", "waiting_external")

# Queue storage: the job placed by the engine's own function.
QS_ARRANGE = "SELECT awa.qs_arrange_job(%(job)s::jsonb, %(claimed_at)s::timestamptz) AS id"
# Queue storage: an attempt's lease times or a done entry's finalization moved.
QS_TIMES = """SELECT awa.qs_arrange_times(%(id)s, %(heartbeat_at)s::timestamptz,
                                         %(deadline_at)s::timestamptz,
                                         %(claimed_at)s::timestamptz,
                                         %(finalized_at)s::timestamptz) AS found"""
# Canonical: the enqueued job given the image's columns through the awa.jobs view.
_VIEW_UPDATE = """UPDATE awa.jobs AS j SET ({columns}) = (
    SELECT {values} FROM jsonb_populate_record(NULL::awa.jobs, %(job)s::jsonb) r)
 WHERE j.id = %(id)s RETURNING j.id"""
DB_NOW = "SELECT now() AS now"
CANONICAL_CLAIMED_BY = "UPDATE awa.jobs_hot SET claimed_by = %(by)s WHERE id = %(id)s"


def job_image(state: str, given: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The ``awa.jobs`` row of a job in ``state``: ``given`` over the defaults."""
    now = now or datetime.now(UTC)
    attempt = given.get("attempt", 1 if state in ATTEMPTS else 0)
    values: dict[str, Any] = {
        "kind": "k", "queue": "q", "args": {}, "state": state, "priority": 2,
        "attempt": attempt, "max_attempts": 25, "run_at": now,
        "attempted_at": now if attempt else None, "created_at": now, "errors": None,
        "metadata": {}, "tags": [], "unique_key": None, "unique_states": None,
        "run_lease": attempt, "progress": None,
        "heartbeat_at": now if state in ATTEMPTS else None,
        "deadline_at": None, "finalized_at": now if state in TERMINAL else None,
        "callback_id": None, "callback_timeout_at": None, "callback_filter": None,
        "callback_on_complete": None, "callback_on_fail": None, "callback_transform": None,
    }
    values.update(given)
    return values


def aged_columns(now: datetime, *, state: str, kind: str, queue: str, attempt: int,
                 max_attempts: int, run_lease: int, priority: int,
                 heartbeat_age_s: float = 0.0, deadline_in_s: float = 300.0,
                 run_at_offset_s: float = 0.0, finalized_age_s: float | None = None,
                 unique_key: bytes | None = None, unique_states: str | None = None,
                 callback_timeout_in_s: float | None = None, created_age_s: float = 0.0,
                 tags: list[str] | None = None) -> dict[str, Any]:
    """The columns of the conformance arrangers' jobs, their times counted from ``now``
    (the server's): an attempt's heartbeat ``heartbeat_age_s`` old, a running one's
    deadline ``deadline_in_s`` ahead, a terminal one finalized ``finalized_age_s`` ago (or
    now on queue storage, which never has a terminal row without it), a callback that times
    out in ``callback_timeout_in_s``."""
    def ago(seconds: float) -> datetime:
        return now - timedelta(seconds=seconds)

    attempting = state in ATTEMPTS
    return {
        "kind": kind, "queue": queue, "args": {}, "priority": priority, "attempt": attempt,
        "max_attempts": max_attempts, "run_lease": run_lease,
        "run_at": ago(-run_at_offset_s), "attempted_at": now if attempt > 0 else None,
        "created_at": ago(created_age_s), "tags": tags or [],
        "heartbeat_at": ago(heartbeat_age_s) if attempting else None,
        "deadline_at": ago(-deadline_in_s) if state == "running" else None,
        "finalized_at": ago(finalized_age_s) if finalized_age_s is not None else None,
        "unique_key": unique_key, "unique_states": unique_states,
        "callback_id": uuid4() if callback_timeout_in_s is not None else None,
        "callback_timeout_at": (ago(-callback_timeout_in_s)
                                if callback_timeout_in_s is not None else None)}


def _encode(value: Any) -> Any:
    """JSON for what ``jsonb_populate_record`` reads back as the column's type."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Jsonb):  # a value already wrapped for psycopg
        return value.obj
    raise TypeError(f"cannot arrange a {type(value).__name__} column value")


def image_json(image: dict[str, Any]) -> Jsonb:
    """The image as the jsonb parameter of ``awa.qs_arrange_job`` / the view update."""
    return Jsonb({k: v for k, v in image.items() if k != "id" or v is not None},
                 dumps=lambda obj: json.dumps(obj, default=_encode))


def plain_batch(kind: str, queue: str, n: int = 1) -> EnqueueBatch:
    """``n`` plain jobs (no args, the default priority and attempts) for an engine to enqueue."""
    return EnqueueBatch(kind=[kind] * n, queue=[queue] * n, args=["{}"] * n, priority=[2] * n,
                        max_attempts=[25] * n, run_at=[None] * n, metadata=["{}"] * n,
                        tags=["{}"] * n, unique_key=[None] * n, unique_states=[None] * n,
                        originals=[{} for _ in range(n)], metadata_dicts=[{} for _ in range(n)],
                        tag_lists=[[] for _ in range(n)])


def _enqueue_batch(image: dict[str, Any]) -> EnqueueBatch:
    """The one plain job the canonical engine enqueues before the view update shapes it."""
    return plain_batch(image["kind"], image["queue"])


def _view_update(image: dict[str, Any]) -> sql.Composed:
    names = [n for n in image if n != "id" or image[n] is not None]
    return sql.SQL(_VIEW_UPDATE).format(
        columns=sql.SQL(", ").join(sql.Identifier(n) for n in names),
        values=sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(n)) for n in names))


def insert_job(conn: Any, state: str = "running", **columns: Any) -> int:
    """One job in ``state`` with the given ``awa.jobs`` columns; returns its id."""
    image = job_image(state, columns)
    if describe_layout_sync(conn).engine == QUEUE_STORAGE:
        return int(_first(conn.execute(QS_ARRANGE, {
            "job": image_json(image),
            "claimed_at": image["attempted_at"] or datetime.now(UTC)}).fetchone()))
    with conn.transaction():  # one commit: no worker claims the job while it is available
        job = CanonicalEngine().insert_batch_sync(conn, _enqueue_batch(image)).jobs[0]
        row = conn.execute(_view_update(image), {"job": image_json(image),
                                                 "id": job.id}).fetchone()
        if image.get("claimed_by") is not None:
            # The view's writes leave claimed_by alone (canonical records it at claim, a
            # step no engine call arranges): the one column set on the table itself.
            conn.execute(CANONICAL_CLAIMED_BY, {"by": image["claimed_by"], "id": job.id})
    return int(_first(row))


async def db_now(aconn: Any) -> datetime:
    """The server's ``now()`` (what the arranged times are counted from)."""
    now: datetime = _first(await (await aconn.execute(DB_NOW)).fetchone())
    return now


async def canonical_job(aconn: Any, state: str, **columns: Any) -> int:
    """``insert_job`` on the canonical engine, on an async connection."""
    image = job_image(state, columns, await db_now(aconn))
    async with aconn.transaction():  # one commit: no worker claims the job while available
        job = (await CanonicalEngine().insert_batch(aconn, _enqueue_batch(image))).jobs[0]
        cur = await aconn.execute(_view_update(image), {"job": image_json(image),
                                                        "id": job.id})
        row = await cur.fetchone()
    return int(_first(row))


async def queue_storage_job(aconn: Any, state: str, *, schema: str = "awa",
                            claimed_at: datetime | None = None, **columns: Any) -> int:
    """``insert_job`` on queue storage in ``schema``, on an async connection; an attempt's
    receipt claimed at ``claimed_at`` (default: its ``attempted_at``)."""
    now = await db_now(aconn)
    image = job_image(state, columns, now)
    cur = await aconn.execute(in_schema(QS_ARRANGE, schema), {
        "job": image_json(image), "claimed_at": claimed_at or image["attempted_at"] or now})
    return int(_first(await cur.fetchone()))


async def queue_storage_times(aconn: Any, job_id: int, *, schema: str = "awa",
                              heartbeat_at: datetime | None = None,
                              deadline_at: datetime | None = None,
                              claimed_at: datetime | None = None,
                              finalized_at: datetime | None = None) -> None:
    """Move a queue-storage attempt's lease times or a done entry's finalization."""
    cur = await aconn.execute(in_schema(QS_TIMES, schema), {
        "id": job_id, "heartbeat_at": heartbeat_at, "deadline_at": deadline_at,
        "claimed_at": claimed_at, "finalized_at": finalized_at})
    assert _first(await cur.fetchone()), f"job {job_id} has no lease or done entry"


def _values(row: Any) -> list[Any]:
    return list(row.values()) if isinstance(row, dict) else list(row)


def _first(row: Any) -> Any:
    assert row is not None
    return _values(row)[0]
