"""Queue storage: the callbacks group.

A callback lives on its attempt's ``leases`` row: registering one
materializes the attempt (its receipt closed ``materialized``) if the first
heartbeat has not already.  Resolutions match ``callback_id`` and an open
lease state (running, waiting_external) in one guarded statement.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa.storage.canonical.callbacks import CanonicalCallbacks
from awa.storage.engine import CallbackSpec

_CALLBACK_SET = """
           callback_id = %(callback_id)s,
           callback_timeout_at = now() + make_interval(secs => %(timeout)s),
           callback_filter = %(filter)s, callback_on_complete = %(on_complete)s,
           callback_on_fail = %(on_fail)s, callback_transform = %(transform)s"""

REGISTER_CALLBACK = """
WITH att AS MATERIALIZED (
    SELECT c.* FROM awa.lease_claims c
     WHERE c.job_id = %(job_id)s AND c.run_lease = %(run_lease)s
), mat AS (
    INSERT INTO awa.lease_claim_closures (claim_slot, receipt_id, job_id, run_lease, outcome)
    SELECT claim_slot, receipt_id, job_id, run_lease, 'materialized' FROM att
    ON CONFLICT (claim_slot, job_id, run_lease) DO NOTHING
    RETURNING job_id, run_lease
), fresh AS (
    INSERT INTO awa.leases (lease_slot, job_id, run_lease, queue, state, attempt, claim_slot,
                            receipt_id, ready_slot, ready_id, claimed_at, heartbeat_at,
                            deadline_at, callback_id, callback_timeout_at, callback_filter,
                            callback_on_complete, callback_on_fail, callback_transform)
    SELECT awa.qs_slot('lease'), a.job_id, a.run_lease, a.queue, 'running', a.attempt,
           a.claim_slot, a.receipt_id, a.ready_slot, a.ready_id, a.claimed_at, now(),
           a.deadline_at, %(callback_id)s, now() + make_interval(secs => %(timeout)s),
           %(filter)s, %(on_complete)s, %(on_fail)s, %(transform)s
      FROM att a JOIN mat m ON m.job_id = a.job_id AND m.run_lease = a.run_lease
    RETURNING job_id
), upd AS (
    UPDATE awa.leases SET""" + _CALLBACK_SET + """
     WHERE job_id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
    RETURNING job_id
)
SELECT job_id FROM fresh UNION ALL SELECT job_id FROM upd"""

PARK_FOR_WAIT = """
UPDATE awa.leases SET state = 'waiting_external'
 WHERE job_id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
   AND callback_id = %(callback_id)s
RETURNING job_id"""


async def _one(conn: psycopg.AsyncConnection[Any], query: str,
               params: dict[str, Any]) -> dict[str, Any] | None:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchone()


class QueueStorageCallbacks(CanonicalCallbacks):
    """The callbacks group on queue storage (resolutions: step 3, not yet)."""

    async def register_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, spec: CallbackSpec) -> bool:
        params = {
            "callback_id": spec.callback_id, "timeout": spec.timeout_s, "filter": spec.filter,
            "on_complete": spec.on_complete, "on_fail": spec.on_fail,
            "transform": spec.transform, "job_id": job_id, "run_lease": run_lease}
        row = await _one(conn, REGISTER_CALLBACK, params)
        if row is None:
            # A concurrent heartbeat may have just materialized the attempt (its
            # lease invisible to that snapshot): once more, with a fresh one.
            row = await _one(conn, REGISTER_CALLBACK, params)
        return row is not None

    async def park_for_callback(self, conn: psycopg.AsyncConnection[Any], job_id: int,
                                run_lease: int, callback_id: uuid.UUID) -> bool:
        row = await _one(conn, PARK_FOR_WAIT, {
            "job_id": job_id, "run_lease": run_lease, "callback_id": callback_id})
        return row is not None
