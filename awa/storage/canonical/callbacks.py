"""Canonical engine: the callbacks group of the Engine protocol.

A callback lives on its job's row in ``awa.jobs_hot`` (``callback_*``
columns).  Every resolution matches ``callback_id`` AND an open state
(``running`` or ``waiting_external``) in one statement (``sql/callbacks.sql``), so a second or late
resolution matches nothing and there is never a double transition.  Resume
and retry clear the callback columns (the callback is spent); complete and
fail keep them as a record.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa import config
from awa.job import Job
from awa.statements import named_statements
from awa.storage.common.fetch import fetch_one
from awa.storage.engine import (
    CALLBACK_RESULT_KEY,
    CALLBACK_RESUME_CHANNEL,
    CallbackHolder,
    CallbackSpec,
    CallbackWait,
)

_SQL = named_statements("awa.storage.canonical", "sql/callbacks.sql")
REGISTER_CALLBACK = _SQL["register_callback"]
PARK_FOR_WAIT = _SQL["park_for_wait"]
POLL_WAIT = _SQL["poll_wait"]
COMPLETE_EXTERNAL = _SQL["complete_external"]
FAIL_EXTERNAL = _SQL["fail_external"]
RETRY_EXTERNAL = _SQL["retry_external"]
NOTIFY_QUEUE = _SQL["notify_queue"]
RESUME_EXTERNAL = _SQL["resume_external"]
HEARTBEAT_CALLBACK = _SQL["heartbeat_callback"]
LOCK_OPEN_CALLBACK = _SQL["lock_open_callback"]
FIND_CALLBACK = _SQL["find_callback"]


async def _job(conn: psycopg.AsyncConnection[Any], query: str,
               params: dict[str, Any]) -> Job[Any] | None:
    row = await fetch_one(conn, query, params)
    return None if row is None else Job.from_row(row)


class CanonicalCallbacks:
    """The callbacks group of the Engine protocol on the canonical engine.

    Methods run on the caller's connection and inside its
    transaction, if any.
    """

    async def register_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, spec: CallbackSpec) -> bool:
        row = await fetch_one(conn, REGISTER_CALLBACK, {
            "callback_id": spec.callback_id, "timeout": spec.timeout_s, "filter": spec.filter,
            "on_complete": spec.on_complete, "on_fail": spec.on_fail,
            "transform": spec.transform, "job_id": job_id, "run_lease": run_lease})
        return row is not None

    async def park_for_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, callback_id: uuid.UUID) -> bool:
        row = await fetch_one(conn, PARK_FOR_WAIT, {
            "job_id": job_id, "run_lease": run_lease, "callback_id": callback_id})
        return row is not None

    async def poll_callback_wait(self, conn: psycopg.AsyncConnection[Any],
                                 job_id: int) -> CallbackWait | None:
        row = await fetch_one(conn, POLL_WAIT, {"job_id": job_id, "key": CALLBACK_RESULT_KEY})
        if row is None:
            return None
        return CallbackWait(state=row["state"], run_lease=row["run_lease"],
                            callback_id=row["callback_id"], result=row["result"])

    async def complete_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                                result: Any) -> Job[Any] | None:
        return await _job(conn, COMPLETE_EXTERNAL, {
            "callback_id": callback_id, "key": CALLBACK_RESULT_KEY, "result": Jsonb(result)})

    async def fail_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                            error: dict[str, Any]) -> Job[Any] | None:
        return await _job(conn, FAIL_EXTERNAL,
                               {"callback_id": callback_id, "entry": Jsonb(error)})

    async def retry_external(self, conn: psycopg.AsyncConnection[Any],
                             callback_id: uuid.UUID) -> Job[Any] | None:
        job = await _job(conn, RETRY_EXTERNAL, {"callback_id": callback_id})
        if job is not None:
            await conn.execute(NOTIFY_QUEUE, (config.NOTIFY_CHANNEL_PREFIX + job.queue,))
        return job

    async def resume_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                              result: Any) -> Job[Any] | None:
        return await _job(conn, RESUME_EXTERNAL, {
            "callback_id": callback_id, "key": CALLBACK_RESULT_KEY, "result": Jsonb(result),
            "channel": CALLBACK_RESUME_CHANNEL})

    async def heartbeat_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID, timeout_s: float) -> Job[Any] | None:
        return await _job(conn, HEARTBEAT_CALLBACK,
                               {"callback_id": callback_id, "timeout": timeout_s})

    async def lock_open_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID) -> Job[Any] | None:
        return await _job(conn, LOCK_OPEN_CALLBACK, {"callback_id": callback_id})

    async def find_callback(self, conn: psycopg.AsyncConnection[Any],
                            callback_id: uuid.UUID) -> CallbackHolder | None:
        row = await fetch_one(conn, FIND_CALLBACK, {"callback_id": callback_id})
        return None if row is None else CallbackHolder(job_id=row["id"], state=row["state"])
