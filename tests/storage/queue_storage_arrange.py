"""Arrangers for the queue-storage engine: jobs in any state, placed by the engine's own
``awa.qs_arrange_job`` (ready entries on lanes, receipts, leases, done and deferred rows, as
``tests/support/arrange.py`` says) and aged by ``awa.qs_arrange_times``.

Registered by ``tests/storage/conftest.py`` into ``test_maintenance.ARRANGERS`` and
``test_reads.ARRANGE`` for the queue-storage tests (the one-line entries the lead
may add there instead).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from support.arrange import aged_columns, db_now, queue_storage_job, queue_storage_times


class QueueStorageJobs:
    """Jobs in any state, as queue storage stores them."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], schema: str = "awa") -> None:
        self.conn = conn
        self.schema = schema

    async def make(self, *, state: str, kind: str, queue: str, attempt: int, max_attempts: int,
                   run_lease: int, priority: int, heartbeat_age_s: float = 0.0,
                   deadline_in_s: float = 300.0, run_at_offset_s: float = 0.0,
                   finalized_age_s: float | None = None, unique_key: bytes | None = None,
                   unique_states: str | None = None, callback_timeout_in_s: float | None = None,
                   created_age_s: float = 0.0, tags: list[str] | None = None,
                   claimed_age_s: float | None = None) -> int:
        now = await db_now(self.conn)
        columns = aged_columns(
            now, state=state, kind=kind, queue=queue, attempt=attempt,
            max_attempts=max_attempts, run_lease=run_lease, priority=priority,
            heartbeat_age_s=heartbeat_age_s, deadline_in_s=deadline_in_s,
            run_at_offset_s=run_at_offset_s, finalized_age_s=finalized_age_s,
            unique_key=unique_key, unique_states=unique_states,
            callback_timeout_in_s=callback_timeout_in_s, created_age_s=created_age_s,
            tags=tags)
        # The attempt's receipt: claimed as long ago as its heartbeat unless told.
        claimed_ago = heartbeat_age_s if claimed_age_s is None else claimed_age_s
        return await queue_storage_job(self.conn, state, schema=self.schema,
                                       claimed_at=now - timedelta(seconds=claimed_ago),
                                       **columns)


def maintenance_arranger(base: type, schema: str) -> type:
    """``test_maintenance``'s arranger with jobs placed the queue-storage way."""

    class QueueStorageMaintenanceArrange(base):
        async def job(self, *, state: str = "running", kind: str = "work",
                      queue: str = "maint", attempt: int = 1, max_attempts: int = 5,
                      run_lease: int = 1, priority: int = 2, heartbeat_age_s: float = 0.0,
                      deadline_in_s: float = 300.0, run_at_offset_s: float = 0.0,
                      finalized_age_s: float | None = None, unique_key: bytes | None = None,
                      unique_states: str | None = None,
                      callback_timeout_in_s: float | None = None) -> int:
            return await QueueStorageJobs(self.conn, schema).make(
                state=state, kind=kind, queue=queue, attempt=attempt,
                max_attempts=max_attempts, run_lease=run_lease, priority=priority,
                heartbeat_age_s=heartbeat_age_s, deadline_in_s=deadline_in_s,
                run_at_offset_s=run_at_offset_s, finalized_age_s=finalized_age_s,
                unique_key=unique_key, unique_states=unique_states,
                callback_timeout_in_s=callback_timeout_in_s)

    return QueueStorageMaintenanceArrange


def reads_arranger(base: type, schema: str) -> type:
    """``test_reads``' arranger with jobs enqueued, claimed and aged the queue-storage way."""
    from awa.storage.engine import AttemptWrite
    from awa.storage.queue_storage import load

    engine = load(schema)

    class QueueStorageReadsArrange(base):
        async def enqueue(self, kind: str = "k", queue: str = "q", *, state: str = "available",
                          age_s: float = 0.0, run_in_s: float | None = None, priority: int = 2,
                          unique_key: bytes | None = None, unique_states: str | None = None,
                          tags: list[str] | None = None) -> int:
            running = state in ("running", "waiting_external")
            return await QueueStorageJobs(self.conn, schema).make(
                state=state, kind=kind, queue=queue, attempt=1 if running else 0,
                max_attempts=25, run_lease=1 if running else 0, priority=priority,
                run_at_offset_s=run_in_s if run_in_s is not None else -age_s,
                created_age_s=age_s, unique_key=unique_key,
                unique_states=unique_states if unique_key else None, tags=tags,
                finalized_age_s=0.0)

        async def claim(self, queue: str = "q", n: int = 1) -> list[int]:
            return [j.id for j in await engine.claim_batch(self.conn, queue, n, 300_000)]

        async def age(self, job_id: int, *, heartbeat_age_s: float | None = None,
                      deadline_in_s: float | None = None,
                      running_for_s: float | None = None) -> None:
            job = await engine.get_job(self.conn, job_id)
            assert job is not None
            await engine.heartbeat_batch(self.conn, [AttemptWrite(job_id, job.run_lease)])
            now = await db_now(self.conn)

            def ago(seconds: float | None) -> Any:
                return None if seconds is None else now - timedelta(seconds=seconds)

            await queue_storage_times(
                self.conn, job_id, schema=schema, heartbeat_at=ago(heartbeat_age_s),
                deadline_at=ago(None if deadline_in_s is None else -deadline_in_s),
                claimed_at=ago(running_for_s))

        async def cancel_running(self, job_id: int, *, ago_s: float) -> None:
            assert await engine.cancel(self.conn, job_id) is not None
            now = await db_now(self.conn)
            await queue_storage_times(self.conn, job_id, schema=schema,
                                      finalized_at=now - timedelta(seconds=ago_s))

    return QueueStorageReadsArrange
