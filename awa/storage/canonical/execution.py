"""Hot-path SQL of the worker runtime on the canonical engine.

Every statement after the claim is guarded by ``(id, run_lease)`` and the
expected state, so a write for an attempt that was cancelled, rescued or
re-claimed meanwhile matches nothing (a stale write) instead of clobbering
the newer state.  Batches are arrays bound once and expanded with
``unnest``: one round trip per batch, never one per job.

Jobs moving between ``awa.jobs_hot`` and ``awa.scheduled_jobs`` (retry,
snooze) or into ``awa.dlq_entries`` are DELETEd and INSERTed in one
statement, keeping their id.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from awa import lifecycle
from awa.job import JOB_COLUMNS, Job, JobState
from awa.storage.common.claims import ClaimJsonbLoader, claim_select, job_from_claim
from awa.storage.common.collisions import apply_batch_or_each
from awa.storage.common.runtime_snapshot import RuntimeSnapshotWrites
from awa.storage.engine import AppliedBatch, AttemptWrite

log = logging.getLogger("awa.storage")

# One claim per dispatcher wake-up: up to %(limit)s rows in dispatch order,
# skipping rows other claimers hold and nothing at all on a paused queue.
CLAIM_JOBS = f"""
WITH picked AS (
    SELECT id FROM awa.jobs_hot
     WHERE queue = %s AND state = 'available'
       AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = %s AND m.paused)
     ORDER BY priority, run_at, id
     LIMIT %s
     FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs_hot j
   SET state = 'running',
       attempt = j.attempt + 1,
       run_lease = j.run_lease + 1,
       attempted_at = now(),
       heartbeat_at = now(),
       deadline_at = now() + %s * interval '1 millisecond',
       claimed_by = %s
  FROM picked
 WHERE j.id = picked.id AND j.state = 'available'
RETURNING {claim_select("j")}
"""

# Arrays of ids, leases, jsonb and uuids are %b placeholders (awa.db.BINARY_ARRAY_TYPES).

# One worker's heartbeat and completion batches run at once on two connections and can name
# the same jobs; each statement locked its rows as its join met them, so two statements
# could lock two rows in opposite orders and deadlock (tests/upgrade found them doing so).
# Now every batch write takes its rows' locks first, one probe per id in the arrays' order
# (``_in_id_order`` sorts them), whatever join the planner then picks.  ``OFFSET 0`` keeps
# the locking subquery whole: flattened into the UPDATE, its lateral probe ran in the order
# of whatever join fed it (a hash join probing with jobs_hot's scan of running rows), and a
# completion and a heartbeat of one worker still deadlocked (benchmarks/engine_switch.py, the
# server log naming both statements).
_BATCH = re.compile(r"unnest\((?P<args>[^()]*)\)\s+AS u\((?P<cols>[^()]*)\)")


def _locking(statement: str) -> str:
    """``statement`` with its ``unnest(...) AS u(...)`` batch locked row by row in order."""
    def wrap(m: re.Match[str]) -> str:
        return (f"(SELECT u.* FROM unnest({m.group('args')}) AS u({m.group('cols')})"
                " CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id"
                " FOR UPDATE) x OFFSET 0) AS u")
    locked, n = _BATCH.subn(wrap, statement)
    assert n == 1, statement
    return locked


# Progress and metadata buffered by the handler ride along with every write
# of the attempt: progress replaces (NULL keeps), metadata merges (NULL keeps).
_KEEP_PROGRESS = "COALESCE(u.progress, j.progress)"
_MERGE_METADATA = "CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END"
_APPEND_ERROR = ("CASE WHEN u.error IS NULL THEN j.errors"
                 " ELSE array_append(COALESCE(j.errors, '{}'), u.error) END")

# The common case: completed with nothing buffered.  Completion clears the
# progress (awa-pg 0.6.9); a failure or a retry keeps it.
COMPLETE_JOBS = _locking("""
UPDATE awa.jobs_hot j
   SET state = 'completed', finalized_at = now(), progress = NULL
  FROM unnest(%b::bigint[], %b::bigint[]) AS u(id, lease)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id
""")

COMPLETE_JOBS_WITH_PROGRESS = _locking(f"""
UPDATE awa.jobs_hot j
   SET state = 'completed', finalized_at = now(), progress = NULL, metadata = {_MERGE_METADATA}
  FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[]) AS u(id, lease, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id
""")

# Terminal in place: failed (no DLQ) or cancelled by the handler's Cancel.
# Params: ids, leases, errors (jsonb, may be NULL), progress, meta, state.
FINALIZE_JOBS = _locking(f"""
UPDATE awa.jobs_hot j
   SET state = %s::awa.job_state, finalized_at = now(),
       errors = {_APPEND_ERROR},
       progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[], %b::jsonb[])
       AS u(id, lease, error, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id
""")

# Parking for a callback: additionally guarded by the callback id the
# handler registered, so a callback resolved early (or re-registered) wins.
# The attempt's deadline no longer applies (the callback timeout does).
PARK_JOBS = _locking(f"""
UPDATE awa.jobs_hot j
   SET state = 'waiting_external', deadline_at = NULL,
       progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%b::bigint[], %b::bigint[], %b::uuid[], %b::jsonb[], %b::jsonb[])
       AS u(id, lease, callback_id, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
   AND j.callback_id = u.callback_id
RETURNING j.id
""")


def _move_columns(overrides: dict[str, str]) -> str:
    return ", ".join(overrides.get(c, "m." + c) for c in JOB_COLUMNS)


_MOVED = _locking(f"""
WITH moved AS (
    DELETE FROM awa.jobs_hot j
     USING unnest(%b::bigint[], %b::bigint[], %s::float8[], %b::jsonb[], %b::jsonb[],
                  %b::jsonb[], %s::text[])
           AS u(id, lease, delay_s, error, progress, meta, reason)
     WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
    RETURNING j.*, u.delay_s AS u_delay_s, u.reason AS u_reason,
              {_KEEP_PROGRESS} AS u_progress, {_MERGE_METADATA} AS u_meta,
              {_APPEND_ERROR} AS u_errors
)
""")

_DEFERRED_OVERRIDES = {
    "run_at": "now() + m.u_delay_s * interval '1 second'",
    "heartbeat_at": "NULL", "deadline_at": "NULL", "finalized_at": "NULL",
    "errors": "m.u_errors", "progress": "m.u_progress", "metadata": "m.u_meta",
    "callback_id": "NULL", "callback_timeout_at": "NULL", "callback_filter": "NULL",
    "callback_on_complete": "NULL", "callback_on_fail": "NULL", "callback_transform": "NULL",
}

# Retry: jobs_hot -> scheduled_jobs as 'retryable' at now()+delay, the error
# appended, the attempt spent, finalized_at the time the attempt ended (as
# awa-pg 0.6.9).  Params: ids, leases, delays, errors, progress, meta, reasons (NULL).
RETRY_JOBS = _MOVED + f"""
INSERT INTO awa.scheduled_jobs ({", ".join(JOB_COLUMNS)})
SELECT {_move_columns({**_DEFERRED_OVERRIDES, "state": "'retryable'::awa.job_state",
                       "finalized_at": "now()"})}
  FROM moved m
RETURNING id
"""

# Snooze: jobs_hot -> scheduled_jobs as 'scheduled'; the attempt is given back.
SNOOZE_JOBS = _MOVED + f"""
INSERT INTO awa.scheduled_jobs ({", ".join(JOB_COLUMNS)})
SELECT {_move_columns({**_DEFERRED_OVERRIDES, "state": "'scheduled'::awa.job_state",
                       "attempt": "greatest(m.attempt - 1, 0)"})}
  FROM moved m
RETURNING id
"""

# Dead-letter: jobs_hot -> dlq_entries as failed, with the reason per row.
# Params as RETRY_JOBS plus the reasons (retry and snooze pass NULLs there).
DEAD_LETTER_JOBS = _MOVED + f"""
INSERT INTO awa.dlq_entries ({", ".join(c if c != "id" else "job_id" for c in JOB_COLUMNS)},
                             dlq_reason, dlq_at, original_run_lease)
SELECT {_move_columns({"state": "'failed'::awa.job_state", "finalized_at": "now()",
                       "errors": "m.u_errors", "progress": "m.u_progress",
                       "metadata": "m.u_meta"})},
       m.u_reason, now(), m.run_lease
  FROM moved m
RETURNING job_id
"""

# When a retry collides with a newer holder of the job's unique key, the
# superseded attempt is cancelled instead (row by row, the rare path).
# Params: ids, leases, errors.
CANCEL_SUPERSEDED = _locking("""
UPDATE awa.jobs_hot j
   SET state = 'cancelled', finalized_at = now(),
       errors = array_append(COALESCE(j.errors, '{}'), u.error)
  FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[]) AS u(id, lease, error)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id
""")

# One heartbeat per interval for every attempt this process runs, carrying
# the buffered progress and metadata.  Rows that do not match are no longer
# ours (cancelled, rescued): the runtime flips their cancel flags.
HEARTBEAT_JOBS = _locking(f"""
UPDATE awa.jobs_hot j
   SET heartbeat_at = now(),
       progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[])
       AS u(id, lease, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state IN ('running', 'waiting_external')
RETURNING j.id
""")

# job.flush_progress(): the handler asked for its progress to be durable now.
FLUSH_PROGRESS = _locking(f"""
UPDATE awa.jobs_hot j
   SET progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[])
       AS u(id, lease, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state IN ('running', 'waiting_external')
RETURNING j.id
""")

# Dispatcher health numbers: available rows per queue (index-backed).
AVAILABLE_COUNTS = """
SELECT queue, count(*) FROM awa.jobs_hot
 WHERE state = 'available' AND queue = ANY(%s::text[])
 GROUP BY queue
"""



def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


async def _ids(conn: psycopg.AsyncConnection[Any], query: LiteralString,
               params: Sequence[Any]) -> list[int]:
    """Run a guarded write on a tuple-row cursor (the hot path never builds dict rows)
    and return the ids it touched."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(query, params)
    return [row[0] for row in await cur.fetchall()]


def _in_id_order(attempts: Sequence[AttemptWrite]) -> list[AttemptWrite]:
    """A batch sorted by job id.  One worker's heartbeat and completion batches run at once on
    two connections and can name the same jobs: each statement locks its rows as it joins
    them in the arrays' order (one index probe per id), so sorted arrays lock in one order
    and the two never deadlock (tests/upgrade found them doing so)."""
    return sorted(attempts, key=lambda a: a.id)


def _buffered(attempts: Sequence[AttemptWrite]) -> tuple[list[Jsonb | None], list[Jsonb | None]]:
    return ([None if a.progress is None else Jsonb(a.progress) for a in attempts],
            [None if a.metadata is None else Jsonb(a.metadata) for a in attempts])


def _move_params(attempts: Sequence[AttemptWrite]) -> tuple[Any, ...]:
    progress, meta = _buffered(attempts)
    return ([a.id for a in attempts], [a.run_lease for a in attempts],
            [a.delay_s for a in attempts], [_jsonb(a.error) for a in attempts],
            progress, meta, [a.reason for a in attempts])


def _finalize_params(state: JobState, attempts: Sequence[AttemptWrite]) -> tuple[Any, ...]:
    progress, meta = _buffered(attempts)
    return (state.value, [a.id for a in attempts], [a.run_lease for a in attempts],
            [_jsonb(a.error) for a in attempts], progress, meta)


def _progress_params(attempts: Sequence[AttemptWrite]) -> tuple[Any, ...]:
    progress, meta = _buffered(attempts)
    return ([a.id for a in attempts], [a.run_lease for a in attempts], progress, meta)


class CanonicalExecution(RuntimeSnapshotWrites):
    """The execution group of the Engine protocol on the canonical engine."""

    async def claim_batch(self, conn: psycopg.AsyncConnection[Any], queue: str, limit: int,
                          deadline_ms: int | None, instance_id: uuid.UUID | None = None,
                          aging_interval_ms: int = 0) -> list[Job[Any]]:
        cur = conn.cursor(row_factory=tuple_row)
        cur.adapters.register_loader("jsonb", ClaimJsonbLoader)
        await cur.execute(CLAIM_JOBS, (queue, queue, limit, deadline_ms, instance_id))
        return [job_from_claim(row) for row in await cur.fetchall()]

    async def warm_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # No queue has the empty name; a limit of 0 claims nothing, an empty batch ends nothing.
        await conn.execute(CLAIM_JOBS, ("", "", 0, 0, None))
        await _ids(conn, COMPLETE_JOBS, ([], []))

    async def complete_batch(self, conn: psycopg.AsyncConnection[Any],
                             attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        ids = [a.id for a in attempts]
        leases = [a.run_lease for a in attempts]
        if any(a.progress is not None or a.metadata is not None for a in attempts):
            progress, meta = _buffered(attempts)
            return AppliedBatch(await _ids(conn, COMPLETE_JOBS_WITH_PROGRESS,
                                           (ids, leases, progress, meta)))
        return AppliedBatch(await _ids(conn, COMPLETE_JOBS, (ids, leases)))

    async def retry_batch(self, conn: psycopg.AsyncConnection[Any],
                          attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, RETRY_JOBS, attempts, "retry")

    async def snooze_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, SNOOZE_JOBS, attempts, "snooze")

    async def dead_letter_batch(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, DEAD_LETTER_JOBS, attempts, "dead-letter")

    async def cancel_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        return AppliedBatch(await _ids(conn, FINALIZE_JOBS,
                                       _finalize_params(JobState.Cancelled, attempts)))

    async def fail_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        return AppliedBatch(await _ids(conn, FINALIZE_JOBS,
                                       _finalize_params(JobState.Failed, attempts)))

    async def park_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        progress, meta = _buffered(attempts)
        return AppliedBatch(await _ids(conn, PARK_JOBS, (
            [a.id for a in attempts], [a.run_lease for a in attempts],
            [a.callback_id for a in attempts], progress, meta)))

    async def cancel_superseded(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        attempts = _in_id_order(attempts)
        errors = [Jsonb(lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, a.attempt))
                  for a in attempts]
        return await _ids(conn, CANCEL_SUPERSEDED,
                          ([a.id for a in attempts], [a.run_lease for a in attempts], errors))

    async def heartbeat_batch(self, conn: psycopg.AsyncConnection[Any],
                              attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        attempts = _in_id_order(attempts)
        return await _ids(conn, HEARTBEAT_JOBS, _progress_params(attempts))

    async def flush_progress_batch(self, conn: psycopg.AsyncConnection[Any],
                                   attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        attempts = _in_id_order(attempts)
        return await _ids(conn, FLUSH_PROGRESS, _progress_params(attempts))

    async def available_counts(self, conn: psycopg.AsyncConnection[Any],
                               queues: Sequence[str]) -> dict[str, int]:
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(AVAILABLE_COUNTS, (list(queues),))
        return {queue: int(n) for queue, n in await cur.fetchall()}

    async def _move(self, conn: psycopg.AsyncConnection[Any], statement: LiteralString,
                    attempts: Sequence[AttemptWrite], what: str) -> AppliedBatch:
        """A move out of ``jobs_hot`` (retry, snooze, dead-letter): one statement, and
        on a unique collision the shared fallback (row by row, the superseded
        attempt cancelled) so one wedged row never stops the rest."""
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        if conn.autocommit:
            # The common case in one round trip: a lone statement is atomic by
            # itself; the fallback's transaction is only paid when it collides.
            try:
                return AppliedBatch(await _ids(conn, statement, _move_params(attempts)))
            except psycopg.errors.UniqueViolation:
                pass

        async def batch(items: Sequence[AttemptWrite]) -> list[int]:
            return await _ids(conn, statement, _move_params(items))

        async def supersede(item: AttemptWrite) -> list[int]:
            return await self.cancel_superseded(conn, [item])

        outcome = await apply_batch_or_each(conn, attempts, batch=batch, on_collision=supersede,
                                            what=f"{what} of {len(attempts)} job(s)")
        for job_id in outcome.superseded:
            log.info("job %s: %s collided with a newer unique job; cancelled", job_id, what)
        return AppliedBatch(outcome.applied, outcome.superseded)
