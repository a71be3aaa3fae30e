"""Canonical engine: the callbacks group of the Engine protocol.

A callback lives on its job's row in ``awa.jobs_hot`` (``callback_*``
columns).  Every resolution matches ``callback_id`` AND an open state
(``running`` or ``waiting_external``) in one statement, so a second or late
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
from awa.storage.common.fetch import fetch_one
from awa.storage.engine import (
    CALLBACK_RESULT_KEY,
    CALLBACK_RESUME_CHANNEL,
    CallbackHolder,
    CallbackSpec,
    CallbackWait,
)

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

# Parked: the attempt's deadline no longer applies, the callback timeout does.
PARK_FOR_WAIT = """
UPDATE awa.jobs_hot SET state = 'waiting_external', deadline_at = NULL
 WHERE id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
   AND callback_id = %(callback_id)s
RETURNING id"""

POLL_WAIT = """
SELECT state::text AS state, run_lease, callback_id, metadata -> %(key)s::text AS result
  FROM awa.jobs_hot WHERE id = %(job_id)s"""

COMPLETE_EXTERNAL = """
UPDATE awa.jobs_hot
   SET state = 'completed', finalized_at = now(), callback_timeout_at = NULL, progress = NULL,
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

# An in-place update to 'available' is not an INSERT (whose trigger notifies),
# so the queue's dispatchers are woken explicitly (at commit).
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
