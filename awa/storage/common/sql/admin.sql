-- The engine-neutral core: job lookups, queue pause and the DLQ's reads (awa/storage/common/admin.py),
-- by name, on the tables every layout shares and
-- the awa.jobs view.  A statement starts at a "-- name: <name>" line
-- (awa.statements.named_statements reads them).

-- name: get_job
-- A job (through awa.jobs), or its DLQ entry.
SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
       deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
       unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
       callback_on_fail, callback_transform, run_lease, progress, NULL::text AS dlq_reason,
       NULL::timestamptz AS dlq_at
  FROM awa.jobs WHERE id = %(id)s
UNION ALL
SELECT job_id AS id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
       heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
       unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
       callback_on_complete, callback_on_fail, callback_transform, run_lease, progress, dlq_reason,
       dlq_at FROM awa.dlq_entries WHERE job_id = %(id)s
LIMIT 1

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: pause_queue
-- Queue pause and resume (awa.queue_meta).
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by)
VALUES (%(queue)s, true, now(), %(paused_by)s)
ON CONFLICT (queue)
DO UPDATE SET paused = true, paused_at = now(), paused_by = EXCLUDED.paused_by

-- name: resume_queue
INSERT INTO awa.queue_meta (queue, paused) VALUES (%(queue)s, false)
ON CONFLICT (queue) DO UPDATE SET paused = false, paused_at = NULL, paused_by = NULL

-- name: dlq_depth
SELECT count(*) AS n FROM awa.dlq_entries

-- name: dlq_depth_by_queue
SELECT queue, count(*) AS n FROM awa.dlq_entries GROUP BY queue ORDER BY queue

-- name: get_dlq
SELECT * FROM awa.dlq_entries WHERE job_id = %(id)s

-- name: purge_dlq_job
DELETE FROM awa.dlq_entries WHERE job_id = %(id)s

-- --- queue statistics ----------------------------------------------------------------------

-- name: canonical_depth_counts
-- Depth per (queue, state) in the canonical tables, each state counted in its table
-- (awa.storage.common.tables: lifecycle.DEPTH_STATES split by table, written out here and
-- checked by tests/storage/test_common_statements.py): a branch of both engines' queue
-- statistics (queue storage counts these tables too, empty on a database it laid out).
-- Served by the (state, queue, id) index of each table.
SELECT queue, state, count(*) AS n FROM awa.jobs_hot
 WHERE state IN ('available', 'running', 'waiting_external', 'failed')
 GROUP BY queue, state
UNION ALL
SELECT queue, state, count(*) FROM awa.scheduled_jobs
 WHERE state IN ('scheduled', 'retryable')
 GROUP BY queue, state
