-- The engine-neutral core of durable batch operations (awa/storage/common/batch_operations.py):
-- the operation and its items (awa.batch_operations / awa.batch_operation_items, migration
-- 0005) and matching through the awa.jobs view.  The column lists are JOB_COLUMNS
-- (awa.job) and BATCH_OPERATION_COLUMNS (awa.storage.engine), written out: the rows become
-- Job and BatchOperation by those names.  A statement starts at a "-- name: <name>" line
-- (awa.statements.named_statements reads them).

-- --- matching, through the awa.jobs view ---------------------------------------------------

-- name: preview_count
-- How many jobs the filter matches.  Only available and scheduled jobs are ever matched;
-- every filter field is a parameter that is NULL when unset (common.batch_operations
-- .filter_params), the same in preview_sample, max_eligible_id and scan_page.
SELECT count(*) AS n FROM awa.jobs j
 WHERE j.state IN ('available', 'scheduled')
   AND (%(state)s::text IS NULL OR j.state::text = %(state)s::text)
   AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
   AND (%(tag)s::text IS NULL OR j.tags @> ARRAY[%(tag)s::text])
   AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
   AND (%(created_at_gte)s::timestamptz IS NULL
        OR j.created_at >= %(created_at_gte)s::timestamptz)
   AND (%(created_at_lt)s::timestamptz IS NULL OR j.created_at < %(created_at_lt)s::timestamptz)

-- name: preview_sample
-- The first %(limit)s jobs the filter matches, by id.
SELECT j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt, j.max_attempts,
       j.run_at, j.heartbeat_at, j.deadline_at, j.attempted_at, j.finalized_at, j.created_at,
       j.errors, j.metadata, j.tags, j.unique_key, j.unique_states, j.callback_id,
       j.callback_timeout_at, j.callback_filter, j.callback_on_complete, j.callback_on_fail,
       j.callback_transform, j.run_lease, j.progress
  FROM awa.jobs j
 WHERE j.state IN ('available', 'scheduled')
   AND (%(state)s::text IS NULL OR j.state::text = %(state)s::text)
   AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
   AND (%(tag)s::text IS NULL OR j.tags @> ARRAY[%(tag)s::text])
   AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
   AND (%(created_at_gte)s::timestamptz IS NULL
        OR j.created_at >= %(created_at_gte)s::timestamptz)
   AND (%(created_at_lt)s::timestamptz IS NULL OR j.created_at < %(created_at_lt)s::timestamptz)
 ORDER BY j.id LIMIT %(limit)s

-- name: max_eligible_id
-- The highest id the filter matches: the scan's upper bound, fixed at its start.
SELECT max(j.id) AS max_id FROM awa.jobs j
 WHERE j.state IN ('available', 'scheduled')
   AND (%(state)s::text IS NULL OR j.state::text = %(state)s::text)
   AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
   AND (%(tag)s::text IS NULL OR j.tags @> ARRAY[%(tag)s::text])
   AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
   AND (%(created_at_gte)s::timestamptz IS NULL
        OR j.created_at >= %(created_at_gte)s::timestamptz)
   AND (%(created_at_lt)s::timestamptz IS NULL OR j.created_at < %(created_at_lt)s::timestamptz)

-- name: scan_page
-- The next page of matching ids (above %(after)s, up to %(upto)s), recorded as items.
WITH page AS (
    SELECT j.id FROM awa.jobs j
     WHERE j.state IN ('available', 'scheduled')
       AND (%(state)s::text IS NULL OR j.state::text = %(state)s::text)
       AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
       AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
       AND (%(tag)s::text IS NULL OR j.tags @> ARRAY[%(tag)s::text])
       AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
       AND (%(created_at_gte)s::timestamptz IS NULL
            OR j.created_at >= %(created_at_gte)s::timestamptz)
       AND (%(created_at_lt)s::timestamptz IS NULL OR j.created_at < %(created_at_lt)s::timestamptz)
       AND j.id > %(after)s AND j.id <= %(upto)s
     ORDER BY j.id LIMIT %(page)s
)
INSERT INTO awa.batch_operation_items (operation_id, job_id)
SELECT %(op)s, id FROM page
ON CONFLICT DO NOTHING
RETURNING job_id

-- --- the operation -------------------------------------------------------------------------

-- name: insert_op
INSERT INTO awa.batch_operations (id, op_kind, filter, spec, submitted_by)
VALUES (%(id)s, %(op_kind)s, %(filter)s, %(spec)s, %(submitted_by)s)
RETURNING id, op_kind, filter, spec, state, submitted_by, submitted_at, started_at,
       finalized_at, cursor, total_matched, processed, skipped, errored, last_error,
       runner_instance, retention_until, updated_at

-- name: list_ops
SELECT id, op_kind, filter, spec, state, submitted_by, submitted_at, started_at, finalized_at,
       cursor, total_matched, processed, skipped, errored, last_error, runner_instance,
       retention_until, updated_at
  FROM awa.batch_operations
 WHERE (%(state)s::text IS NULL OR state = %(state)s)
 ORDER BY submitted_at DESC LIMIT %(limit)s

-- name: get_op
SELECT id, op_kind, filter, spec, state, submitted_by, submitted_at, started_at, finalized_at,
       cursor, total_matched, processed, skipped, errored, last_error, runner_instance,
       retention_until, updated_at
  FROM awa.batch_operations WHERE id = %(id)s

-- name: cancel_op
UPDATE awa.batch_operations SET state = 'cancelling', updated_at = clock_timestamp()
 WHERE id = %(id)s AND state IN ('pending', 'scanning', 'running')
RETURNING id, op_kind, filter, spec, state, submitted_by, submitted_at, started_at,
       finalized_at, cursor, total_matched, processed, skipped, errored, last_error,
       runner_instance, retention_until, updated_at

-- name: next_active
-- The oldest active operation, locked for this tick (another runner skips it).
SELECT id, op_kind, filter, spec, state, submitted_by, submitted_at, started_at, finalized_at,
       cursor, total_matched, processed, skipped, errored, last_error, runner_instance,
       retention_until, updated_at
  FROM awa.batch_operations
 WHERE state IN ('pending', 'scanning', 'running', 'cancelling')
 ORDER BY submitted_at LIMIT 1
 FOR UPDATE SKIP LOCKED

-- name: start_scan
-- pending -> scanning, with the scan's cursor.
UPDATE awa.batch_operations
   SET state = 'scanning', started_at = COALESCE(started_at, clock_timestamp()),
       runner_instance = %(runner)s, cursor = %(cursor)s, updated_at = clock_timestamp()
 WHERE id = %(id)s AND state = 'pending'

-- name: scan_cursor
UPDATE awa.batch_operations SET cursor = %(cursor)s, runner_instance = %(runner)s,
       updated_at = clock_timestamp()
 WHERE id = %(id)s

-- name: scanned
-- scanning -> running: every matching id is an item.
UPDATE awa.batch_operations
   SET state = 'running', updated_at = clock_timestamp(),
       total_matched = (SELECT count(*) FROM awa.batch_operation_items
                         WHERE operation_id = %(id)s)
 WHERE id = %(id)s AND state = 'scanning'

-- name: analyze_items
-- Once the scan has recorded its items, the planner learns how many there are: with the
-- statistics of an items table analysed before they existed, each chunk's mark_items took
-- every pending item of the operation through the pending index (100k items: about 100 ms a
-- chunk against 0.6 ms) instead of probing its ids.  Once per operation; a sample.
ANALYZE awa.batch_operation_items

-- --- items, run by each engine's batch_apply_chunk -----------------------------------------

-- name: pending_items
-- Chunks take items in job_id order, one runner at a time (the operation's row lock), so
-- none is pending below the last chunk's highest id (cursor.applied_through): the scan
-- starts there instead of walking every item done so far (their dead entries in the pending
-- index, not yet vacuumed, would make each chunk dearer than the last).
SELECT job_id FROM awa.batch_operation_items
 WHERE operation_id = %(id)s AND state = 'pending' AND job_id > %(after)s
 ORDER BY job_id LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED

-- name: mark_items
-- A chunk's items: processed when the engine changed the job, else skipped.
UPDATE awa.batch_operation_items
   SET state = CASE WHEN job_id = ANY(%(changed)s::bigint[]) THEN 'processed' ELSE 'skipped' END,
       processed_at = clock_timestamp()
 WHERE operation_id = %(id)s AND job_id = ANY(%(ids)s::bigint[]) AND state = 'pending'

-- name: mark_errored
UPDATE awa.batch_operation_items SET state = 'errored', error = %(error)s,
       processed_at = clock_timestamp()
 WHERE operation_id = %(id)s AND job_id = %(job_id)s

-- name: bump
-- The operation's counters after a chunk, and how far it applied.
UPDATE awa.batch_operations
   SET processed = processed + %(processed)s, skipped = skipped + %(skipped)s,
       errored = errored + %(errored)s, last_error = COALESCE(%(error)s, last_error),
       cursor = COALESCE(cursor, '{}'::jsonb)
                || jsonb_build_object('applied_through', %(through)s::bigint),
       updated_at = clock_timestamp()
 WHERE id = %(id)s

-- name: skip_pending
-- A cancelled operation: its pending items are skipped.
WITH s AS (
    UPDATE awa.batch_operation_items SET state = 'skipped', processed_at = clock_timestamp()
     WHERE operation_id = %(id)s AND state = 'pending'
    RETURNING 1
)
UPDATE awa.batch_operations SET skipped = skipped + (SELECT count(*) FROM s)
 WHERE id = %(id)s

-- name: finish
UPDATE awa.batch_operations
   SET state = %(state)s, finalized_at = clock_timestamp(), updated_at = clock_timestamp(),
       retention_until = clock_timestamp() + make_interval(secs => %(retention_days)s * 86400),
       total_matched = COALESCE(total_matched, (SELECT count(*) FROM awa.batch_operation_items
                                                WHERE operation_id = %(id)s))
 WHERE id = %(id)s
RETURNING id, op_kind, filter, spec, state, submitted_by, submitted_at, started_at,
       finalized_at, cursor, total_matched, processed, skipped, errored, last_error,
       runner_instance, retention_until, updated_at
