-- Canonical engine: the admin group's own statements (awa/storage/canonical/admin.py) by name:
-- cancel, retry, drain, the queue statistics, moves to and from the DLQ. Each statement follows
-- its name line and is whole, as it is sent (awa.statements.named_statements reads them, once,
-- at import). A job moving between awa.jobs_hot, awa.scheduled_jobs and awa.dlq_entries is
-- DELETEd and INSERTed in one statement, keeping its id. Filtered statements come one per
-- filter given (admin.FAILED_IDS / BULK_MOVE_FAILED_TO_DLQ pick them); "AND true" is the
-- no-filter form.

-- name: cancel_live
-- A live job cancelled in place; previous_state says whether a runtime is to be told.
UPDATE awa.jobs_hot j
   SET state = 'cancelled', finalized_at = now(), callback_timeout_at = NULL
  FROM (SELECT id, state AS previous_state FROM awa.jobs_hot WHERE id = %(id)s FOR UPDATE) old
 WHERE j.id = old.id AND j.state IN ('available', 'running', 'waiting_external')
RETURNING j.*, old.previous_state

-- name: cancel_deferred
-- A scheduled or retryable job cancelled: moved into jobs_hot as 'cancelled'.
WITH m AS (DELETE FROM awa.scheduled_jobs WHERE id = %(id)s RETURNING *)
INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
       heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
       unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
       callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
SELECT m.id AS id, m.kind, m.queue, m.args, 'cancelled' AS state, m.priority, m.attempt,
       m.max_attempts, m.run_at, m.heartbeat_at, m.deadline_at, m.attempted_at,
       now() AS finalized_at, m.created_at, m.errors, m.metadata, m.tags, m.unique_key,
       m.unique_states, m.callback_id, m.callback_timeout_at, m.callback_filter,
       m.callback_on_complete, m.callback_on_fail, m.callback_transform, m.run_lease,
       m.progress FROM m
RETURNING *

-- name: retry_job
-- A finished job, or one parked for a callback (as awa-pg 0.6.9: its callback is dropped and
-- the attempt it parked ends), runs again from attempt 0.
UPDATE awa.jobs_hot SET state = 'available', run_at = now(), attempt = 0, heartbeat_at = NULL,
       deadline_at = NULL, finalized_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
       callback_filter = NULL, callback_on_complete = NULL, callback_on_fail = NULL,
       callback_transform = NULL
 WHERE id = %(id)s AND state IN ('failed', 'cancelled', 'waiting_external')
RETURNING *

-- name: retry_failed_ids
-- retry_failed's batch: the failed jobs of failed_ids*, from attempt 0.
UPDATE awa.jobs_hot SET state = 'available', run_at = now(), attempt = 0, heartbeat_at = NULL,
       deadline_at = NULL, finalized_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
       callback_filter = NULL, callback_on_complete = NULL, callback_on_fail = NULL,
       callback_transform = NULL
 WHERE state = 'failed' AND id = ANY(%(ids)s::bigint[])
RETURNING *

-- name: failed_ids
-- The failed jobs retry_failed retries: every one, or of a kind, in a queue, or both (one
-- statement per filter given).
SELECT id FROM awa.jobs_hot WHERE state = 'failed' AND true ORDER BY id

-- name: failed_ids_of_kind
SELECT id FROM awa.jobs_hot WHERE state = 'failed' AND kind = %(kind)s ORDER BY id

-- name: failed_ids_in_queue
SELECT id FROM awa.jobs_hot WHERE state = 'failed' AND queue = %(queue)s ORDER BY id

-- name: failed_ids_of_kind_in_queue
SELECT id FROM awa.jobs_hot WHERE state = 'failed' AND kind = %(kind)s AND queue = %(queue)s
 ORDER BY id

-- name: discard_failed
DELETE FROM awa.jobs_hot WHERE state = 'failed' AND kind = %(kind)s

-- name: clean_runtime_instances
-- Test isolation (awa.testing, CLEAN_FOR_TESTS in this order): plain DELETEs, so concurrent
-- test workers only wait on rows.
DELETE FROM awa.runtime_instances

-- name: clean_jobs_hot
DELETE FROM awa.jobs_hot

-- name: clean_scheduled_jobs
DELETE FROM awa.scheduled_jobs

-- name: clean_job_unique_claims
DELETE FROM awa.job_unique_claims

-- name: clean_dlq_entries
DELETE FROM awa.dlq_entries

-- name: clean_queue_meta
DELETE FROM awa.queue_meta

-- name: drain_queue
-- Everything of the queue not being run right now, callback waits too (awa-pg 0.6.9).
WITH live AS (
    UPDATE awa.jobs_hot SET state = 'cancelled', finalized_at = now(), callback_timeout_at = NULL
     WHERE state IN ('available', 'waiting_external') AND queue = %(queue)s
    RETURNING kind
), m AS (
    DELETE FROM awa.scheduled_jobs
     WHERE state IN ('scheduled', 'retryable') AND queue = %(queue)s
    RETURNING *
), moved AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts,
           run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
           metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform,
           run_lease, progress)
    SELECT m.id AS id, m.kind, m.queue, m.args, 'cancelled' AS state, m.priority, m.attempt,
           m.max_attempts, m.run_at, m.heartbeat_at, m.deadline_at, m.attempted_at,
           now() AS finalized_at, m.created_at, m.errors, m.metadata, m.tags, m.unique_key,
           m.unique_states, m.callback_id, m.callback_timeout_at, m.callback_filter,
           m.callback_on_complete, m.callback_on_fail, m.callback_transform, m.run_lease,
           m.progress FROM m
    RETURNING kind
)
SELECT kind, %(queue)s AS queue, count(*) AS drained
  FROM (SELECT kind FROM live UNION ALL SELECT kind FROM moved) AS cancelled
 GROUP BY kind

-- name: queue_stats
-- Each branch is served by an index: (state, queue, id) on both tables, the finalized index for
-- the last hour's completions, the claim index for lag. The counts are
-- common.tables.CANONICAL_DEPTH_COUNTS, the rows common.admin.QUEUE_STATS_ROWS, written out.
WITH counts AS (
    SELECT queue, state, count(*) AS n FROM awa.jobs_hot
     WHERE state IN ('available', 'running', 'waiting_external', 'failed')
     GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*) FROM awa.scheduled_jobs
     WHERE state IN ('scheduled', 'retryable')
     GROUP BY queue, state
), completed AS (
    SELECT queue, count(*) AS n FROM awa.jobs_hot
     WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'
     GROUP BY queue
), lag AS (
    SELECT queue, EXTRACT(EPOCH FROM now() - min(run_at))::float8 AS seconds
      FROM awa.jobs_hot WHERE state = 'available' GROUP BY queue
), queues AS (
    SELECT queue FROM counts UNION SELECT queue FROM completed
    UNION SELECT queue FROM awa.queue_meta
)
SELECT q.queue,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'available'), 0)::bigint AS available,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'running'), 0)::bigint AS running,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'failed'), 0)::bigint AS failed,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'scheduled'), 0)::bigint AS scheduled,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'retryable'), 0)::bigint AS retryable,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'waiting_external'), 0)::bigint
           AS waiting_external,
       COALESCE(max(d.n), 0)::bigint AS completed_last_hour,
       CASE WHEN max(l.seconds) IS NOT NULL THEN GREATEST(max(l.seconds), 0) END AS lag_seconds,
       COALESCE(bool_or(m.paused), false) AS paused
  FROM queues q
  LEFT JOIN counts c ON c.queue = q.queue
  LEFT JOIN completed d ON d.queue = q.queue
  LEFT JOIN lag l ON l.queue = q.queue
  LEFT JOIN awa.queue_meta m ON m.queue = q.queue
 GROUP BY q.queue
 ORDER BY q.queue

-- name: retry_from_dlq
-- A redriven job keeps its id and run_lease (so a stale write of an old attempt still cannot
-- match) and starts with a fresh attempt budget; available now, or scheduled for a later
-- run_at.
WITH m AS (DELETE FROM awa.dlq_entries WHERE job_id = %(id)s RETURNING *),
hot AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts,
           run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
           metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform,
           run_lease, progress)
    SELECT m.job_id AS id, m.kind, COALESCE(%(queue)s, m.queue) AS queue, m.args,
           'available' AS state, COALESCE(%(priority)s::smallint, m.priority) AS priority,
           0 AS attempt, m.max_attempts, COALESCE(%(run_at)s::timestamptz, now()) AS run_at,
           NULL AS heartbeat_at, NULL AS deadline_at, m.attempted_at, NULL AS finalized_at,
           m.created_at, m.errors, m.metadata, m.tags, m.unique_key, m.unique_states,
           NULL AS callback_id, NULL AS callback_timeout_at, NULL AS callback_filter,
           NULL AS callback_on_complete, NULL AS callback_on_fail, NULL AS callback_transform,
           m.original_run_lease AS run_lease, m.progress FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) <= now()
    RETURNING *
), later AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress)
    SELECT m.job_id AS id, m.kind, COALESCE(%(queue)s, m.queue) AS queue, m.args,
           'scheduled' AS state, COALESCE(%(priority)s::smallint, m.priority) AS priority,
           0 AS attempt, m.max_attempts, COALESCE(%(run_at)s::timestamptz, now()) AS run_at,
           NULL AS heartbeat_at, NULL AS deadline_at, m.attempted_at, NULL AS finalized_at,
           m.created_at, m.errors, m.metadata, m.tags, m.unique_key, m.unique_states,
           NULL AS callback_id, NULL AS callback_timeout_at, NULL AS callback_filter,
           NULL AS callback_on_complete, NULL AS callback_on_fail, NULL AS callback_transform,
           m.original_run_lease AS run_lease, m.progress FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) > now()
    RETURNING *
)
SELECT * FROM hot UNION ALL SELECT * FROM later

-- name: retry_from_dlq_ids
-- retry_from_dlq for a batch of entries (bulk_retry_from_dlq).
WITH m AS (DELETE FROM awa.dlq_entries WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING *),
hot AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts,
           run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
           metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform,
           run_lease, progress)
    SELECT m.job_id AS id, m.kind, COALESCE(%(queue)s, m.queue) AS queue, m.args,
           'available' AS state, COALESCE(%(priority)s::smallint, m.priority) AS priority,
           0 AS attempt, m.max_attempts, COALESCE(%(run_at)s::timestamptz, now()) AS run_at,
           NULL AS heartbeat_at, NULL AS deadline_at, m.attempted_at, NULL AS finalized_at,
           m.created_at, m.errors, m.metadata, m.tags, m.unique_key, m.unique_states,
           NULL AS callback_id, NULL AS callback_timeout_at, NULL AS callback_filter,
           NULL AS callback_on_complete, NULL AS callback_on_fail, NULL AS callback_transform,
           m.original_run_lease AS run_lease, m.progress FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) <= now()
    RETURNING *
), later AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress)
    SELECT m.job_id AS id, m.kind, COALESCE(%(queue)s, m.queue) AS queue, m.args,
           'scheduled' AS state, COALESCE(%(priority)s::smallint, m.priority) AS priority,
           0 AS attempt, m.max_attempts, COALESCE(%(run_at)s::timestamptz, now()) AS run_at,
           NULL AS heartbeat_at, NULL AS deadline_at, m.attempted_at, NULL AS finalized_at,
           m.created_at, m.errors, m.metadata, m.tags, m.unique_key, m.unique_states,
           NULL AS callback_id, NULL AS callback_timeout_at, NULL AS callback_filter,
           NULL AS callback_on_complete, NULL AS callback_on_fail, NULL AS callback_transform,
           m.original_run_lease AS run_lease, m.progress FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) > now()
    RETURNING *
)
SELECT * FROM hot UNION ALL SELECT * FROM later

-- name: move_failed_to_dlq
-- A failed job moved to the DLQ with the reason given.
WITH m AS (DELETE FROM awa.jobs_hot WHERE state = 'failed' AND id = %(id)s RETURNING *),
moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
           unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
           callback_on_complete, callback_on_fail, callback_transform, run_lease, progress,
           %(reason)s, now(), run_lease FROM m
    RETURNING *
)
SELECT * FROM moved

-- name: bulk_move_failed_to_dlq
-- Failed jobs moved to the DLQ, counted per kind and queue: every one, or of a kind, in a
-- queue, or both.
WITH m AS (DELETE FROM awa.jobs_hot WHERE state = 'failed' AND true RETURNING *),
moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
           unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
           callback_on_complete, callback_on_fail, callback_transform, run_lease, progress,
           %(reason)s, now(), run_lease FROM m
    RETURNING *
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue

-- name: bulk_move_failed_to_dlq_of_kind
WITH m AS (DELETE FROM awa.jobs_hot WHERE state = 'failed' AND kind = %(kind)s RETURNING *),
moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
           unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
           callback_on_complete, callback_on_fail, callback_transform, run_lease, progress,
           %(reason)s, now(), run_lease FROM m
    RETURNING *
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue

-- name: bulk_move_failed_to_dlq_in_queue
WITH m AS (DELETE FROM awa.jobs_hot WHERE state = 'failed' AND queue = %(queue)s RETURNING *),
moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
           unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
           callback_on_complete, callback_on_fail, callback_transform, run_lease, progress,
           %(reason)s, now(), run_lease FROM m
    RETURNING *
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue

-- name: bulk_move_failed_to_dlq_of_kind_in_queue
WITH m AS (DELETE FROM awa.jobs_hot
             WHERE state = 'failed' AND kind = %(kind)s AND queue = %(queue)s RETURNING *),
moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
           unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
           callback_on_complete, callback_on_fail, callback_transform, run_lease, progress,
           %(reason)s, now(), run_lease FROM m
    RETURNING *
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue
