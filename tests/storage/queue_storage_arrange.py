"""Arrangers for the queue-storage engine: rows in any state, written the way queue storage
keeps them (ready entries on lanes, receipts, leases, done and deferred rows).

Registered by ``tests/storage/conftest.py`` into ``test_maintenance.ARRANGERS`` and
``test_reads.ARRANGE`` for the queue-storage tests (the one-line entries the lead
may add there instead).
"""

from __future__ import annotations

from typing import Any

import psycopg

from awa.job import JOB_COLUMNS
from awa.storage.queue_storage.enqueue import APPEND_READY
from awa.storage.queue_storage.schema import in_schema

# One ready entry on its lane (attempt/run_lease as given); returns its ids.
_READY = """
WITH src AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, %(kind)s::text AS kind, %(queue)s::text AS queue,
           '{}'::jsonb AS args, %(priority)s::smallint AS priority,
           %(attempt)s::smallint AS attempt, %(max_attempts)s::smallint AS max_attempts,
           now() + make_interval(secs => %(run_at)s) AS run_at,
           CASE WHEN %(attempt)s > 0 THEN now() END AS attempted_at,
           now() - make_interval(secs => %(created_age)s) AS created_at,
           NULL::jsonb[] AS errors, '{}'::jsonb AS metadata, %(tags)s::text[] AS tags,
           %(uk)s::bytea AS unique_key, %(us)s::bit(8) AS unique_states,
           %(ready_lease)s::bigint AS run_lease, NULL::jsonb AS progress
)""" + APPEND_READY + """
SELECT id FROM ready"""
READY_IDS = ("SELECT ready_slot, ready_id, shard, lane_seq FROM awa.ready_entries "
             "WHERE job_id = %s")
RECEIPT = """
INSERT INTO awa.lease_claims (claim_slot, receipt_id, job_id, run_lease, queue, priority,
                              attempt, claimed_at, deadline_at, ready_slot, ready_id, shard,
                              lane_seq)
VALUES ((SELECT awa.qs_slot('claim')), nextval('awa.qs_receipt_id_seq'), %(id)s, %(lease)s,
        %(queue)s,
        %(priority)s, %(attempt)s, now() - make_interval(secs => %(claimed_age)s),
        now() + make_interval(secs => %(dl)s), %(ready_slot)s, %(ready_id)s, %(shard)s,
        %(lane_seq)s)
RETURNING claim_slot, receipt_id"""
MATERIALIZE = """
WITH c AS (
    INSERT INTO awa.lease_claim_closures (claim_slot, receipt_id, job_id, run_lease, outcome)
    VALUES (%(claim_slot)s, %(receipt_id)s, %(id)s, %(lease)s, 'materialized')
)
INSERT INTO awa.leases (lease_slot, job_id, run_lease, queue, state, attempt, claim_slot,
                        receipt_id, ready_slot, ready_id, claimed_at, heartbeat_at, deadline_at,
                        callback_id, callback_timeout_at)
VALUES ((SELECT awa.qs_slot('lease')), %(id)s, %(lease)s, %(queue)s, %(state)s::awa.job_state,
        %(attempt)s, %(claim_slot)s, %(receipt_id)s, %(ready_slot)s, %(ready_id)s, now(),
        now() - make_interval(secs => %(hb)s),
        CASE WHEN %(state)s::text = 'running' THEN now() + make_interval(secs => %(dl)s) END,
        CASE WHEN %(cb)s::float8 IS NOT NULL THEN gen_random_uuid() END,
        CASE WHEN %(cb)s::float8 IS NOT NULL
             THEN now() + make_interval(secs => %(cb)s::float8) END)"""
DEFERRED = """
INSERT INTO awa.deferred_jobs (kind, queue, args, state, attempt, max_attempts, run_lease,
                               priority, attempted_at, run_at, unique_key, unique_states, tags,
                               created_at)
VALUES (%(kind)s, %(queue)s, '{}', %(state)s::awa.job_state, %(attempt)s, %(max_attempts)s,
        %(lease)s, %(priority)s, CASE WHEN %(attempt)s > 0 THEN now() END,
        now() + make_interval(secs => %(run_at)s), %(uk)s, %(us)s::bit(8), %(tags)s::text[],
        now() - make_interval(secs => %(created_age)s))
RETURNING id"""
DONE = """
INSERT INTO awa.done_entries (ready_slot, """ + ", ".join(JOB_COLUMNS) + """)
SELECT (SELECT awa.qs_slot('queue')), """ + ", ".join({
    "id": "nextval('awa.jobs_id_seq')", "kind": "%(kind)s", "queue": "%(queue)s",
    "args": "'{}'", "state": "%(state)s::awa.job_state", "priority": "%(priority)s",
    "attempt": "%(attempt)s", "max_attempts": "%(max_attempts)s",
    "run_at": "now() + make_interval(secs => %(run_at)s)",
    "attempted_at": "CASE WHEN %(attempt)s > 0 THEN now() END",
    "finalized_at": "now() - make_interval(secs => COALESCE(%(fin)s::float8, 0))",
    "created_at": "now() - make_interval(secs => %(created_age)s)",
    "metadata": "'{}'", "tags": "%(tags)s::text[]", "unique_key": "%(uk)s",
    "unique_states": "%(us)s::bit(8)", "run_lease": "%(lease)s"}.get(c, "NULL")
    for c in JOB_COLUMNS) + """
RETURNING id"""
CLAIM_UNIQUE = """
INSERT INTO awa.job_unique_claims (unique_key, job_id)
SELECT %(uk)s, %(id)s WHERE awa.qs_in_mask(%(us)s::bit(8), %(state)s::awa.job_state)"""


class QueueStorageJobs:
    """Jobs in any state, as queue storage stores them."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], schema: str = "awa") -> None:
        self.conn = conn
        self.schema = schema

    async def _one(self, sql: str, params: Any) -> dict[str, Any]:
        cur = await self.conn.execute(in_schema(sql, self.schema), params)
        row = await cur.fetchone()
        assert row is not None
        return dict(row)

    async def make(self, *, state: str, kind: str, queue: str, attempt: int, max_attempts: int,
                   run_lease: int, priority: int, heartbeat_age_s: float = 0.0,
                   deadline_in_s: float = 300.0, run_at_offset_s: float = 0.0,
                   finalized_age_s: float | None = None, unique_key: bytes | None = None,
                   unique_states: str | None = None, callback_timeout_in_s: float | None = None,
                   created_age_s: float = 0.0, tags: list[str] | None = None,
                   claimed_age_s: float | None = None) -> int:
        p: dict[str, Any] = {
            "kind": kind, "queue": queue, "state": state, "attempt": attempt,
            "max_attempts": max_attempts, "lease": run_lease, "priority": priority,
            "hb": heartbeat_age_s, "dl": deadline_in_s, "run_at": run_at_offset_s,
            "fin": finalized_age_s, "uk": unique_key, "us": unique_states,
            "cb": callback_timeout_in_s, "created_age": created_age_s, "tags": tags or [],
            "ready_lease": run_lease}
        if state in ("scheduled", "retryable"):
            job_id = int((await self._one(DEFERRED, p))["id"])
        elif state in ("completed", "failed", "cancelled"):
            job_id = int((await self._one(DONE, p))["id"])
        elif state == "available":
            job_id = int((await self._one(_READY, p))["id"])
        else:
            running = {**p, "ready_lease": max(run_lease - 1, 0),
                       "attempt": max(attempt - 1, 0)}
            job_id = int((await self._one(_READY, running))["id"])
            ready = await self._one(READY_IDS, (job_id,))
            receipt = await self._one(RECEIPT, {
                **p, "id": job_id, **ready,
                "claimed_age": heartbeat_age_s if claimed_age_s is None else claimed_age_s})
            await self.conn.execute(in_schema(MATERIALIZE, self.schema),
                                    {**p, "id": job_id, **ready, **receipt})
        if unique_key is not None:
            await self.conn.execute(in_schema(CLAIM_UNIQUE, self.schema), {**p, "id": job_id})
        return job_id


def maintenance_arranger(base: type, schema: str) -> type:
    """``test_maintenance``'s arranger with jobs written the queue-storage way."""

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


AGE_LEASE = """
UPDATE awa.leases SET
       heartbeat_at = coalesce(now() - make_interval(secs => %s), heartbeat_at),
       deadline_at = coalesce(now() + make_interval(secs => %s), deadline_at),
       claimed_at = coalesce(now() - make_interval(secs => %s), claimed_at)
 WHERE job_id = %s"""
CANCELLED_AGO = """
UPDATE awa.done_entries SET finalized_at = now() - make_interval(secs => %s) WHERE id = %s"""


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
            await self.conn.execute(in_schema(AGE_LEASE, schema),
                                    (heartbeat_age_s, deadline_in_s, running_for_s, job_id))

        async def cancel_running(self, job_id: int, *, ago_s: float) -> None:
            assert await engine.cancel(self.conn, job_id) is not None
            await self.conn.execute(in_schema(CANCELLED_AGO, schema), (ago_s, job_id))

    return QueueStorageReadsArrange
