"""Queue storage: the callbacks group.

A callback lives on its attempt's ``leases`` row: registering one
materializes the attempt through ``awa.qs_heartbeat`` (its receipt closed
``materialized``, under the closure guard of ``execution``), the one way a
receipt becomes a lease, if the first heartbeat has not already.
A resolution finds the open lease (running, waiting_external) holding
``callback_id`` and ends its attempt through the installed
``awa.qs_resolve_callbacks`` (``awa.qs_end_attempts``, sql/execution.sql).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa.job import Job
from awa.storage.engine import (
    CALLBACK_RESULT_KEY,
    CALLBACK_RESUME_CHANNEL,
    AttemptWrite,
    CallbackHolder,
    CallbackSpec,
    CallbackWait,
)
from awa.storage.queue_storage.execution import HEARTBEAT, RESOLVE_CALLBACKS, finish
from awa.storage.queue_storage.procedures import named
from awa.storage.queue_storage.schema import InSchema

REGISTER_CALLBACK = named("callbacks.sql", "register_callback")
PARK_FOR_WAIT = named("callbacks.sql", "park_for_wait")
OPEN = ("running", "waiting_external")
OPEN_LEASE = named("callbacks.sql", "open_lease")
LOCK_OPEN_LEASE = named("callbacks.sql", "lock_open_lease")
JOB = named("callbacks.sql", "job")
POLL_WAIT = named("callbacks.sql", "poll_wait")
FIND_CALLBACK = named("callbacks.sql", "find_callback")
RESUME_EXTERNAL = named("callbacks.sql", "resume_external")
HEARTBEAT_CALLBACK = named("callbacks.sql", "heartbeat_callback")

class QueueStorageCallbacks(InSchema):
    """The callbacks group on queue storage."""

    async def _job(self, conn: psycopg.AsyncConnection[Any],
                   job_id: int | None) -> Job[Any] | None:
        if job_id is None:
            return None
        row = await self._row(conn, JOB, {"id": job_id})
        return None if row is None else Job.from_row(row)

    async def _end(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                   to_state: str, meta: dict[str, Any] | None = None,
                   error: dict[str, Any] | None = None) -> Job[Any] | None:
        """End the open attempt holding ``callback_id`` as ``to_state`` (available: a fresh
        start) through ``awa.qs_resolve_callbacks``; the job is read back in the same
        transaction, so it shows this write, not what a worker did with the job right after
        it committed (a retried job claimed again)."""
        async with conn.transaction():
            held = await self._row(conn, OPEN_LEASE, {"callback_id": callback_id})
            if held is None:
                return None
            entry = None if error is None else {**error, "attempt": held["attempt"]}
            write = AttemptWrite(held["job_id"], held["run_lease"], metadata=meta, error=entry)
            done = await finish(conn, self.schema, RESOLVE_CALLBACKS, [write], to_state,
                                to_state, from_states=OPEN)
            return await self._job(conn, done[0] if done else None)

    async def register_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, spec: CallbackSpec) -> bool:
        params = {
            "callback_id": spec.callback_id, "timeout": spec.timeout_s, "filter": spec.filter,
            "on_complete": spec.on_complete, "on_fail": spec.on_fail,
            "transform": spec.transform, "job_id": job_id, "run_lease": run_lease}
        # A receipt becomes a lease as a heartbeat makes it one (a lease it already has is
        # only refreshed; another closer's win is waited out by ``finish``); the next
        # statement's snapshot sees the lease.
        await finish(conn, self.schema, HEARTBEAT, [AttemptWrite(job_id, run_lease)],
                     "materialized", None)
        return await self._row(conn, REGISTER_CALLBACK, params) is not None

    async def park_for_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, callback_id: uuid.UUID) -> bool:
        row = await self._row(conn, PARK_FOR_WAIT, {
            "job_id": job_id, "run_lease": run_lease, "callback_id": callback_id})
        return row is not None

    async def poll_callback_wait(self, conn: psycopg.AsyncConnection[Any],
                                 job_id: int) -> CallbackWait | None:
        row = await self._row(conn, POLL_WAIT, {"job_id": job_id, "key": CALLBACK_RESULT_KEY})
        if row is None:
            return None
        return CallbackWait(state=row["state"], run_lease=row["run_lease"],
                            callback_id=row["callback_id"], result=row["result"])

    async def complete_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                                result: Any) -> Job[Any] | None:
        return await self._end(conn, callback_id, "completed",
                               meta={CALLBACK_RESULT_KEY: result})

    async def fail_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                            error: dict[str, Any]) -> Job[Any] | None:
        return await self._end(conn, callback_id, "failed", error=error)

    async def retry_external(self, conn: psycopg.AsyncConnection[Any],
                             callback_id: uuid.UUID) -> Job[Any] | None:
        return await self._end(conn, callback_id, "available")

    async def resume_external(self, conn: psycopg.AsyncConnection[Any], callback_id: uuid.UUID,
                              result: Any) -> Job[Any] | None:
        # One transaction: the resumed handler is notified at commit, so the job read back
        # is the running one this wrote, not the one it may have completed since.
        async with conn.transaction():
            row = await self._row(conn, RESUME_EXTERNAL, {
                "callback_id": callback_id, "key": CALLBACK_RESULT_KEY, "result": Jsonb(result),
                "channel": CALLBACK_RESUME_CHANNEL})
            return await self._job(conn, None if row is None else row["job_id"])

    async def heartbeat_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID, timeout_s: float) -> Job[Any] | None:
        row = await self._row(conn, HEARTBEAT_CALLBACK,
                              {"callback_id": callback_id, "timeout": timeout_s})
        return await self._job(conn, None if row is None else row["job_id"])

    async def lock_open_callback(self, conn: psycopg.AsyncConnection[Any],
                                 callback_id: uuid.UUID) -> Job[Any] | None:
        row = await self._row(conn, LOCK_OPEN_LEASE, {"callback_id": callback_id})
        return await self._job(conn, None if row is None else row["job_id"])

    async def find_callback(self, conn: psycopg.AsyncConnection[Any],
                            callback_id: uuid.UUID) -> CallbackHolder | None:
        row = await self._row(conn, FIND_CALLBACK, {"callback_id": callback_id})
        return None if row is None else CallbackHolder(job_id=row["id"], state=row["state"])
