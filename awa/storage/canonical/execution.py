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

from awa.job import JOB_COLUMNS

# Columns the claim hands to the executor, in this order (tuple rows).
CLAIM_COLUMNS = (
    "id", "kind", "queue", "args", "priority", "attempt", "max_attempts", "run_at",
    "deadline_at", "attempted_at", "created_at", "errors", "metadata", "tags",
    "run_lease", "progress",
)

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
       deadline_at = now() + %s * interval '1 millisecond'
  FROM picked
 WHERE j.id = picked.id AND j.state = 'available'
RETURNING {", ".join("j." + c for c in CLAIM_COLUMNS)}
"""

# Progress and metadata buffered by the handler ride along with every write
# of the attempt: progress replaces (NULL keeps), metadata merges (NULL keeps).
_KEEP_PROGRESS = "COALESCE(u.progress, j.progress)"
_MERGE_METADATA = "CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END"
_APPEND_ERROR = "CASE WHEN u.error IS NULL THEN j.errors ELSE array_append(COALESCE(j.errors, '{}'), u.error) END"

# The common case: completed with nothing buffered.
COMPLETE_JOBS = """
UPDATE awa.jobs_hot j
   SET state = 'completed', finalized_at = now()
  FROM unnest(%s::bigint[], %s::bigint[]) AS u(id, lease)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id
"""

COMPLETE_JOBS_WITH_PROGRESS = f"""
UPDATE awa.jobs_hot j
   SET state = 'completed', finalized_at = now(),
       progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[], %s::jsonb[]) AS u(id, lease, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id
"""

# Terminal in place: failed (no DLQ) or cancelled by the handler's Cancel.
# Params: ids, leases, errors (jsonb, may be NULL), progress, meta, state.
FINALIZE_JOBS = f"""
UPDATE awa.jobs_hot j
   SET state = %s::awa.job_state, finalized_at = now(),
       errors = {_APPEND_ERROR},
       progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[], %s::jsonb[], %s::jsonb[])
       AS u(id, lease, error, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id
"""

# Parking for a callback: additionally guarded by the callback id the
# handler registered, so a callback resolved early (or re-registered) wins.
PARK_JOBS = f"""
UPDATE awa.jobs_hot j
   SET state = 'waiting_external',
       progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%s::bigint[], %s::bigint[], %s::uuid[], %s::jsonb[], %s::jsonb[])
       AS u(id, lease, callback_id, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
   AND j.callback_id = u.callback_id
RETURNING j.id
"""


def _move_columns(overrides: dict[str, str]) -> str:
    return ", ".join(overrides.get(c, "m." + c) for c in JOB_COLUMNS)


_MOVED = """
WITH moved AS (
    DELETE FROM awa.jobs_hot j
     USING unnest(%s::bigint[], %s::bigint[], %s::float8[], %s::jsonb[], %s::jsonb[],
                  %s::jsonb[], %s::text[])
           AS u(id, lease, delay_s, error, progress, meta, reason)
     WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
    RETURNING j.*, u.delay_s AS u_delay_s, u.reason AS u_reason,
              {keep_progress} AS u_progress, {merge_meta} AS u_meta, {append_error} AS u_errors
)
""".format(keep_progress=_KEEP_PROGRESS, merge_meta=_MERGE_METADATA, append_error=_APPEND_ERROR)

_DEFERRED_OVERRIDES = {
    "run_at": "now() + m.u_delay_s * interval '1 second'",
    "heartbeat_at": "NULL", "deadline_at": "NULL", "finalized_at": "NULL",
    "errors": "m.u_errors", "progress": "m.u_progress", "metadata": "m.u_meta",
    "callback_id": "NULL", "callback_timeout_at": "NULL", "callback_filter": "NULL",
    "callback_on_complete": "NULL", "callback_on_fail": "NULL", "callback_transform": "NULL",
}

# Retry: jobs_hot -> scheduled_jobs as 'retryable' at now()+delay, the error
# appended, the attempt spent.  Params: ids, leases, delays, errors, progress,
# meta, reasons (NULL).
RETRY_JOBS = _MOVED + f"""
INSERT INTO awa.scheduled_jobs ({", ".join(JOB_COLUMNS)})
SELECT {_move_columns({**_DEFERRED_OVERRIDES, "state": "'retryable'::awa.job_state"})}
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
CANCEL_SUPERSEDED = """
UPDATE awa.jobs_hot
   SET state = 'cancelled', finalized_at = now(),
       errors = array_append(COALESCE(errors, '{}'), %s::jsonb)
 WHERE id = %s AND run_lease = %s AND state = 'running'
RETURNING id
"""

# One heartbeat per interval for every attempt this process runs, carrying
# the buffered progress and metadata.  Rows that do not match are no longer
# ours (cancelled, rescued): the runtime flips their cancel flags.
HEARTBEAT_JOBS = f"""
UPDATE awa.jobs_hot j
   SET heartbeat_at = now(),
       progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[], %s::jsonb[])
       AS u(id, lease, progress, meta)
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state IN ('running', 'waiting_external')
RETURNING j.id
"""

# job.flush_progress(): the handler asked for its progress to be durable now.
FLUSH_PROGRESS = f"""
UPDATE awa.jobs_hot j
   SET progress = {_KEEP_PROGRESS}, metadata = {_MERGE_METADATA}
  FROM (SELECT %s::bigint AS id, %s::bigint AS lease, %s::jsonb AS progress, %s::jsonb AS meta) u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state IN ('running', 'waiting_external')
RETURNING j.id
"""

# Dispatcher health numbers: available rows per queue (index-backed).
AVAILABLE_COUNTS = """
SELECT queue, count(*) FROM awa.jobs_hot
 WHERE state = 'available' AND queue = ANY(%s::text[])
 GROUP BY queue
"""

# Runtime snapshot (every snapshot interval, and at start and shutdown).
UPSERT_RUNTIME_INSTANCE = """
INSERT INTO awa.runtime_instances (
    instance_id, hostname, pid, version, started_at, last_seen_at, snapshot_interval_ms,
    healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive,
    leader, shutting_down, global_max_workers, queues)
VALUES (%s, %s, %s, %s, %s, now(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (instance_id) DO UPDATE SET
    last_seen_at = now(),
    snapshot_interval_ms = EXCLUDED.snapshot_interval_ms,
    healthy = EXCLUDED.healthy,
    postgres_connected = EXCLUDED.postgres_connected,
    poll_loop_alive = EXCLUDED.poll_loop_alive,
    heartbeat_alive = EXCLUDED.heartbeat_alive,
    maintenance_alive = EXCLUDED.maintenance_alive,
    leader = EXCLUDED.leader,
    shutting_down = EXCLUDED.shutting_down,
    global_max_workers = EXCLUDED.global_max_workers,
    queues = EXCLUDED.queues
"""


class CanonicalExecution:
    """The execution group of the Engine protocol on the canonical engine."""
