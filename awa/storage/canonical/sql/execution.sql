-- Canonical engine: the worker runtime's hot path (awa/storage/canonical/execution.py), by
-- name.  A statement starts at a "-- name: <name>" line (awa.statements.named_statements
-- reads them); read once, at import.
--
-- Every statement after the claim is guarded by (id, run_lease) and the expected state, so a
-- write for an attempt that was cancelled, rescued or re-claimed meanwhile matches nothing.
-- Batches are arrays bound once (%b: awa.db.BINARY_ARRAY_TYPES) and expanded with unnest:
-- one round trip per batch.
--
-- Row locks in id order: one worker's heartbeat and completion batches run at once on two
-- connections and can name the same jobs; each statement locked its rows as its join met
-- them, so two statements could lock two rows in opposite orders and deadlock (tests/upgrade
-- found them doing so).  So every batch write reads its batch as
--   (SELECT u.* FROM unnest(...) AS u(...) CROSS JOIN LATERAL
--        (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x OFFSET 0) AS u
-- taking its rows' locks first, one probe per id in the arrays' order (execution._in_id_order
-- sorts them), whatever join the planner then picks.  OFFSET 0 keeps that subquery whole:
-- flattened into the UPDATE, its lateral probe ran in the order of whatever join fed it (a
-- hash join probing with jobs_hot's scan of running rows), and a completion and a heartbeat
-- of one worker still deadlocked (benchmarks/engine_switch.py, the server log naming both).
--
-- Progress and metadata buffered by the handler ride along with every write of the attempt:
-- progress replaces (COALESCE(u.progress, j.progress): NULL keeps), metadata merges (NULL
-- keeps), an error is appended (NULL appends none).

-- name: claim_jobs
-- One claim per dispatcher wake-up: up to a limit of rows in dispatch order, skipping rows
-- other claimers hold and nothing at all on a paused queue.  Params: queue, queue, limit,
-- deadline (ms), claimer.  The columns returned are common.claims.claim_select("j").
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
RETURNING j.id, j.kind, j.queue, j.args::text AS args, j.priority, j.attempt, j.max_attempts,
          j.run_at, j.deadline_at, j.attempted_at, j.created_at, j.errors, j.metadata, j.tags,
          j.run_lease, j.progress

-- name: complete_jobs
-- The common case: completed with nothing buffered.  Completion clears the progress
-- (awa-pg 0.6.9); a failure or a retry keeps it.  Params: ids, leases.
UPDATE awa.jobs_hot j
   SET state = 'completed', finalized_at = now(), progress = NULL
  FROM (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[]) AS u(id, lease)
         CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
        OFFSET 0) AS u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id

-- name: complete_jobs_with_progress
-- Params: ids, leases, progress, metadata.
UPDATE awa.jobs_hot j
   SET state = 'completed', finalized_at = now(), progress = NULL,
       metadata = CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END
  FROM (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[])
                        AS u(id, lease, progress, meta)
         CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
        OFFSET 0) AS u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id

-- name: finalize_jobs
-- Terminal in place: failed (no DLQ) or cancelled by the handler's Cancel.
-- Params: state, ids, leases, errors (jsonb, may be NULL), progress, metadata.
UPDATE awa.jobs_hot j
   SET state = %s::awa.job_state, finalized_at = now(),
       errors = CASE WHEN u.error IS NULL THEN j.errors
                     ELSE array_append(COALESCE(j.errors, '{}'), u.error) END,
       progress = COALESCE(u.progress, j.progress),
       metadata = CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END
  FROM (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[],
                               %b::jsonb[])
                        AS u(id, lease, error, progress, meta)
         CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
        OFFSET 0) AS u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id

-- name: park_jobs
-- Parking for a callback: additionally guarded by the callback id the handler registered, so
-- a callback resolved early (or re-registered) wins.  The attempt's deadline no longer
-- applies (the callback timeout does).  Params: ids, leases, callback ids, progress, metadata.
UPDATE awa.jobs_hot j
   SET state = 'waiting_external', deadline_at = NULL,
       progress = COALESCE(u.progress, j.progress),
       metadata = CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END
  FROM (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %b::uuid[], %b::jsonb[],
                               %b::jsonb[])
                        AS u(id, lease, callback_id, progress, meta)
         CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
        OFFSET 0) AS u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
   AND j.callback_id = u.callback_id
RETURNING j.id

-- name: retry_jobs
-- Retry: jobs_hot -> scheduled_jobs as 'retryable' at now()+delay, the error appended, the
-- attempt spent, finalized_at the time the attempt ended (as awa-pg 0.6.9).  One statement,
-- keeping the id.  Params: ids, leases, delays, errors, progress, metadata, reasons (NULL).
WITH moved AS (
    DELETE FROM awa.jobs_hot j
     USING (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %s::float8[], %b::jsonb[],
                                   %b::jsonb[], %b::jsonb[], %s::text[])
                            AS u(id, lease, delay_s, error, progress, meta, reason)
             CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
            OFFSET 0) AS u
     WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
    RETURNING j.*, u.delay_s AS u_delay_s, u.reason AS u_reason,
              COALESCE(u.progress, j.progress) AS u_progress,
              CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END AS u_meta,
              CASE WHEN u.error IS NULL THEN j.errors
                   ELSE array_append(COALESCE(j.errors, '{}'), u.error) END AS u_errors
)
INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, attempt, max_attempts,
                                run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
                                created_at, errors, metadata, tags, unique_key, unique_states,
                                callback_id, callback_timeout_at, callback_filter,
                                callback_on_complete, callback_on_fail, callback_transform,
                                run_lease, progress)
SELECT m.id, m.kind, m.queue, m.args, 'retryable'::awa.job_state, m.priority, m.attempt,
       m.max_attempts, now() + m.u_delay_s * interval '1 second', NULL, NULL, m.attempted_at,
       now(), m.created_at, m.u_errors, m.u_meta, m.tags, m.unique_key, m.unique_states,
       NULL, NULL, NULL, NULL, NULL, NULL, m.run_lease, m.u_progress
  FROM moved m
RETURNING id

-- name: snooze_jobs
-- Snooze: jobs_hot -> scheduled_jobs as 'scheduled'; the attempt is given back.  Params as
-- retry_jobs.
WITH moved AS (
    DELETE FROM awa.jobs_hot j
     USING (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %s::float8[], %b::jsonb[],
                                   %b::jsonb[], %b::jsonb[], %s::text[])
                            AS u(id, lease, delay_s, error, progress, meta, reason)
             CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
            OFFSET 0) AS u
     WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
    RETURNING j.*, u.delay_s AS u_delay_s, u.reason AS u_reason,
              COALESCE(u.progress, j.progress) AS u_progress,
              CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END AS u_meta,
              CASE WHEN u.error IS NULL THEN j.errors
                   ELSE array_append(COALESCE(j.errors, '{}'), u.error) END AS u_errors
)
INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, attempt, max_attempts,
                                run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
                                created_at, errors, metadata, tags, unique_key, unique_states,
                                callback_id, callback_timeout_at, callback_filter,
                                callback_on_complete, callback_on_fail, callback_transform,
                                run_lease, progress)
SELECT m.id, m.kind, m.queue, m.args, 'scheduled'::awa.job_state, m.priority,
       greatest(m.attempt - 1, 0), m.max_attempts, now() + m.u_delay_s * interval '1 second',
       NULL, NULL, m.attempted_at, NULL, m.created_at, m.u_errors, m.u_meta, m.tags,
       m.unique_key, m.unique_states, NULL, NULL, NULL, NULL, NULL, NULL, m.run_lease,
       m.u_progress
  FROM moved m
RETURNING id

-- name: dead_letter_jobs
-- Dead-letter: jobs_hot -> dlq_entries as failed, with the reason per row.  Params as
-- retry_jobs, the reasons given (retry and snooze pass NULLs there).
WITH moved AS (
    DELETE FROM awa.jobs_hot j
     USING (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %s::float8[], %b::jsonb[],
                                   %b::jsonb[], %b::jsonb[], %s::text[])
                            AS u(id, lease, delay_s, error, progress, meta, reason)
             CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
            OFFSET 0) AS u
     WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
    RETURNING j.*, u.delay_s AS u_delay_s, u.reason AS u_reason,
              COALESCE(u.progress, j.progress) AS u_progress,
              CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END AS u_meta,
              CASE WHEN u.error IS NULL THEN j.errors
                   ELSE array_append(COALESCE(j.errors, '{}'), u.error) END AS u_errors
)
INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt, max_attempts,
                             run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
                             created_at, errors, metadata, tags, unique_key, unique_states,
                             callback_id, callback_timeout_at, callback_filter,
                             callback_on_complete, callback_on_fail, callback_transform,
                             run_lease, progress,
                             dlq_reason, dlq_at, original_run_lease)
SELECT m.id, m.kind, m.queue, m.args, 'failed'::awa.job_state, m.priority, m.attempt,
       m.max_attempts, m.run_at, m.heartbeat_at, m.deadline_at, m.attempted_at, now(),
       m.created_at, m.u_errors, m.u_meta, m.tags, m.unique_key, m.unique_states, m.callback_id,
       m.callback_timeout_at, m.callback_filter, m.callback_on_complete, m.callback_on_fail,
       m.callback_transform, m.run_lease, m.u_progress,
       m.u_reason, now(), m.run_lease
  FROM moved m
RETURNING job_id

-- name: cancel_superseded
-- When a retry collides with a newer holder of the job's unique key, the superseded attempt
-- is cancelled instead (row by row, the rare path).  Params: ids, leases, errors.
UPDATE awa.jobs_hot j
   SET state = 'cancelled', finalized_at = now(),
       errors = array_append(COALESCE(j.errors, '{}'), u.error)
  FROM (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[]) AS u(id, lease, error)
         CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
        OFFSET 0) AS u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state = 'running'
RETURNING j.id

-- name: heartbeat_jobs
-- One heartbeat per interval for every attempt this process runs, carrying the buffered
-- progress and metadata.  Rows that do not match are no longer ours (cancelled, rescued):
-- the runtime flips their cancel flags.  Params: ids, leases, progress, metadata.
UPDATE awa.jobs_hot j
   SET heartbeat_at = now(),
       progress = COALESCE(u.progress, j.progress),
       metadata = CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END
  FROM (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[])
                        AS u(id, lease, progress, meta)
         CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
        OFFSET 0) AS u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state IN ('running', 'waiting_external')
RETURNING j.id

-- name: flush_progress
-- job.flush_progress(): the handler asked for its progress to be durable now.  Params as
-- heartbeat_jobs.
UPDATE awa.jobs_hot j
   SET progress = COALESCE(u.progress, j.progress),
       metadata = CASE WHEN u.meta IS NULL THEN j.metadata ELSE j.metadata || u.meta END
  FROM (SELECT u.* FROM unnest(%b::bigint[], %b::bigint[], %b::jsonb[], %b::jsonb[])
                        AS u(id, lease, progress, meta)
         CROSS JOIN LATERAL (SELECT 1 FROM awa.jobs_hot x WHERE x.id = u.id FOR UPDATE) x
        OFFSET 0) AS u
 WHERE j.id = u.id AND j.run_lease = u.lease AND j.state IN ('running', 'waiting_external')
RETURNING j.id

-- name: available_counts
-- Dispatcher health numbers: available rows per queue (index-backed).  Params: queues.
SELECT queue, count(*) FROM awa.jobs_hot
 WHERE state = 'available' AND queue = ANY(%s::text[])
 GROUP BY queue
