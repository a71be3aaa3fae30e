-- Canonical engine: the maintenance group (awa/storage/canonical/maintenance.py) by name. Each
-- statement follows its name line and is whole, as it is sent (awa.statements.named_statements
-- reads them, once, at import).
--
-- Moves between awa.jobs_hot and awa.scheduled_jobs (and into awa.dlq_entries) are one DELETE
-- ... RETURNING feeding an INSERT in the same statement, keeping the job's id. Batches travel
-- as unnest arrays so a whole batch is one statement.

-- name: select_stale_heartbeats
-- Rescue candidates, one statement per way an attempt ends without its handler: up to a batch
-- locked for the rest of the transaction, oldest first; then apply_rescue moves them all. SKIP
-- LOCKED: rows a completion is writing right now are left for the next tick.
SELECT id, run_lease, kind, queue, attempt, max_attempts
  FROM awa.jobs_hot
 WHERE state = 'running'
   AND heartbeat_at < now() - make_interval(secs => %(staleness_s)s)
 ORDER BY heartbeat_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: select_expired_deadlines
SELECT id, run_lease, kind, queue, attempt, max_attempts
  FROM awa.jobs_hot
 WHERE state = 'running'
   AND deadline_at < now()
 ORDER BY deadline_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: select_expired_callbacks
SELECT id, run_lease, kind, queue, attempt, max_attempts
  FROM awa.jobs_hot
 WHERE state = 'waiting_external'
   AND callback_timeout_at < now()
 ORDER BY callback_timeout_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: apply_rescue
-- Every rescued attempt is guarded by (id, run_lease) and the state it was found in: a
-- completion that won the race leaves nothing to rescue. Per row the action: retry
-- (scheduled_jobs as retryable), fail (in place) or dlq.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(actions)s::text[],
                         %(backoffs)s::float8[], %(errors)s::jsonb[], %(dlq_reasons)s::text[])
        AS t(id, run_lease, action, backoff_s, error, dlq_reason)
),
retry_src AS (
    DELETE FROM awa.jobs_hot j USING input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'retry'
    RETURNING j.*, now() + make_interval(secs => i.backoff_s) AS new_run_at, i.error AS new_error
),
retried AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress)
    SELECT r.id, r.kind, r.queue, r.args, 'retryable'::awa.job_state, r.priority, r.attempt,
           r.max_attempts, r.new_run_at, r.heartbeat_at, NULL, r.attempted_at, r.finalized_at,
           r.created_at, array_append(coalesce(r.errors, '{}'::jsonb[]), r.new_error),
           r.metadata, r.tags, r.unique_key, r.unique_states, NULL, NULL, NULL, NULL, NULL, NULL,
           r.run_lease, r.progress
      FROM retry_src r
    RETURNING id, run_lease, kind, queue
),
failed AS (
    UPDATE awa.jobs_hot j
       SET state = 'failed', finalized_at = now(), deadline_at = NULL,
           callback_timeout_at = NULL,
           errors = array_append(coalesce(j.errors, '{}'::jsonb[]), i.error)
      FROM input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'fail'
    RETURNING j.id, j.run_lease, j.kind, j.queue
),
dlq_src AS (
    DELETE FROM awa.jobs_hot j USING input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'dlq'
    RETURNING j.*, i.error AS new_error, i.dlq_reason AS new_dlq_reason
),
dead_lettered AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
           created_at, errors, metadata, tags, unique_key, unique_states, callback_id,
           callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
           callback_transform, run_lease, progress, dlq_reason, dlq_at, original_run_lease)
    SELECT d.id, d.kind, d.queue, d.args, 'failed'::awa.job_state, d.priority, d.attempt,
           d.max_attempts, d.run_at, d.heartbeat_at, NULL, d.attempted_at, now(), d.created_at,
           array_append(coalesce(d.errors, '{}'::jsonb[]), d.new_error), d.metadata, d.tags,
           d.unique_key, d.unique_states, d.callback_id, NULL, d.callback_filter,
           d.callback_on_complete, d.callback_on_fail, d.callback_transform, d.run_lease,
           d.progress, d.new_dlq_reason, now(), d.run_lease
      FROM dlq_src d
    RETURNING job_id AS id, run_lease, kind, queue, dlq_reason
)
SELECT 'retry' AS action, id, run_lease, kind, queue, NULL::text AS dlq_reason FROM retried
UNION ALL
SELECT 'fail', id, run_lease, kind, queue, NULL FROM failed
UNION ALL
SELECT 'dlq', id, run_lease, kind, queue, dlq_reason FROM dead_lettered

-- name: cancel_running_as_duplicate
-- The unique-claim wedge: the attempt's way back into a claiming state is taken by a newer
-- holder of its key. The old attempt becomes cancelled evidence (outside the default mask), the
-- newer holder keeps the claim.
UPDATE awa.jobs_hot
   SET state = 'cancelled', finalized_at = now(), deadline_at = NULL,
       callback_timeout_at = NULL,
       errors = array_append(coalesce(errors, '{}'::jsonb[]), %(error)s::jsonb)
 WHERE id = %(id)s AND run_lease = %(run_lease)s AND state = %(state)s::awa.job_state
RETURNING id, run_lease, kind, queue

-- name: select_due_ids
-- Promotion, two statements per batch: lock the due rows of unpaused queues, then move them;
-- the insert trigger on jobs_hot sends NOTIFY "awa:<queue>" at commit. Locking first is what
-- lets a collision degrade row by row over the same rows.
SELECT s.id, s.attempt
  FROM awa.scheduled_jobs s
 WHERE s.run_at <= now()
   AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = s.queue AND m.paused)
 ORDER BY s.run_at, s.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: promote_ids
WITH moved AS (
    DELETE FROM awa.scheduled_jobs s WHERE s.id = ANY(%(ids)s::bigint[]) AND s.run_at <= now()
    RETURNING s.*
)
INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
       heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
       unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
       callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
SELECT moved.id, moved.kind, moved.queue, moved.args, 'available'::awa.job_state, moved.priority,
       moved.attempt, moved.max_attempts, moved.run_at, moved.heartbeat_at, moved.deadline_at,
       moved.attempted_at, moved.finalized_at, moved.created_at, moved.errors, moved.metadata,
       moved.tags, moved.unique_key, moved.unique_states, moved.callback_id,
       moved.callback_timeout_at, moved.callback_filter, moved.callback_on_complete,
       moved.callback_on_fail, moved.callback_transform, moved.run_lease, moved.progress
  FROM moved
RETURNING id, kind, queue

-- name: cancel_deferred_as_duplicate
-- A due job whose unique key a newer job holds: cancelled instead of promoted.
WITH moved AS (
    DELETE FROM awa.scheduled_jobs s WHERE s.id = %(id)s
    RETURNING s.*
)
INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
       heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
       unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
       callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
SELECT moved.id, moved.kind, moved.queue, moved.args, 'cancelled'::awa.job_state, moved.priority,
       moved.attempt, moved.max_attempts, moved.run_at, moved.heartbeat_at, moved.deadline_at,
       moved.attempted_at, now(), moved.created_at, array_append(coalesce(moved.errors,
       '{}'::jsonb[]), %(error)s::jsonb), moved.metadata, moved.tags, moved.unique_key,
       moved.unique_states, moved.callback_id, moved.callback_timeout_at, moved.callback_filter,
       moved.callback_on_complete, moved.callback_on_fail, moved.callback_transform,
       moved.run_lease, moved.progress
  FROM moved
RETURNING id, run_lease, kind, queue

-- name: delete_finalized_default
-- Retention: one bounded batch of this engine's finished jobs, in the queues without a
-- retention of their own (the shared tables' deletes are the core's; the shape is
-- common.maintenance.delete_batch, the conditions FINALIZED_AGED and NOT_OVERRIDDEN).
DELETE FROM awa.jobs_hot
 WHERE id IN (
    SELECT id FROM awa.jobs_hot
     WHERE state = %(state)s::awa.job_state
       AND finalized_at < now() - make_interval(secs => %(age_s)s)
       AND queue <> ALL(%(excluded_queues)s::text[])
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED)

-- name: delete_finalized_queue
-- The same for one queue with its own retention (IN_QUEUE).
DELETE FROM awa.jobs_hot
 WHERE id IN (
    SELECT id FROM awa.jobs_hot
     WHERE state = %(state)s::awa.job_state
       AND finalized_at < now() - make_interval(secs => %(age_s)s)
       AND queue = %(queue)s
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED)

-- name: age_priorities
-- Priority aging: a waiting job's effective priority is its original one minus one step per
-- aging interval waited (1 is the most urgent). The original is recorded in metadata the first
-- time the job is aged, so aging is idempotent.
WITH settings AS (
    SELECT * FROM unnest(%(queues)s::text[], %(intervals_ms)s::bigint[]) AS t(queue, interval_ms)
),
waiting AS (
    SELECT j.id, j.priority,
           coalesce((j.metadata ->> %(meta_key)s)::int, j.priority) AS original,
           extract(epoch FROM now() - j.run_at) * 1000
               / nullif(coalesce(s.interval_ms, %(default_interval_ms)s::bigint), 0) AS steps
      FROM awa.jobs_hot j
      LEFT JOIN settings s ON s.queue = j.queue
     WHERE j.state = 'available'
       AND j.priority > 1
       AND j.run_at <= now() - make_interval(secs => %(min_interval_s)s)
),
aged AS (
    SELECT w.id, w.original, greatest(1, w.original - floor(w.steps)::int) AS new_priority
      FROM waiting w
     WHERE w.steps IS NOT NULL AND w.steps > 0
       AND greatest(1, w.original - floor(w.steps)::int) < w.priority
     LIMIT %(limit)s
),
locked AS (
    SELECT j.id FROM awa.jobs_hot j JOIN aged a USING (id)
     WHERE j.state = 'available'
       FOR UPDATE OF j SKIP LOCKED
)
UPDATE awa.jobs_hot j
   SET priority = a.new_priority,
       metadata = j.metadata || jsonb_build_object(%(meta_key)s::text, a.original)
  FROM aged a JOIN locked USING (id)
 WHERE j.id = a.id
RETURNING j.id

-- name: insert_cron_runs
-- A schedule's due slots as jobs, in the transaction that advanced it (cron CAS).
INSERT INTO awa.jobs_hot (kind, queue, args, state, priority, max_attempts, run_at,
                          metadata, tags)
SELECT %(kind)s, %(queue)s, %(args)s::jsonb, 'available', %(priority)s, %(max_attempts)s,
       slot, %(metadata)s::jsonb || jsonb_build_object('cron_name', %(name)s::text,
                                                       'cron_slot', slot),
       %(tags)s::text[]
  FROM unnest(%(slots)s::timestamptz[]) AS slot
RETURNING *

-- name: queue_depths
-- THE queue-depth read. Which (state, queue) pairs exist comes from a loose index scan of each
-- table's (state, queue, id) index, one probe per pair and only for the depth states, so
-- terminal history is never walked; each pair is then counted (up to %(cap)s; LIMIT NULL counts
-- all). Lag: the oldest available job of each queue, one probe per priority of the claim index.
WITH RECURSIVE hot AS (
    SELECT s.state, (SELECT min(h.queue) FROM awa.jobs_hot h WHERE h.state = s.state) AS queue
      FROM unnest(%(hot_states)s::awa.job_state[]) AS s(state)
    UNION ALL
    SELECT p.state, (SELECT min(h.queue) FROM awa.jobs_hot h
                      WHERE h.state = p.state AND h.queue > p.queue)
      FROM hot p WHERE p.queue IS NOT NULL
), deferred AS (
    SELECT s.state, (SELECT min(d.queue) FROM awa.scheduled_jobs d WHERE d.state = s.state)
           AS queue
      FROM unnest(%(deferred_states)s::awa.job_state[]) AS s(state)
    UNION ALL
    SELECT p.state, (SELECT min(d.queue) FROM awa.scheduled_jobs d
                      WHERE d.state = p.state AND d.queue > p.queue)
      FROM deferred p WHERE p.queue IS NOT NULL
), dlq AS (
    SELECT (SELECT min(e.queue) FROM awa.dlq_entries e) AS queue
    UNION ALL
    SELECT (SELECT min(e.queue) FROM awa.dlq_entries e WHERE e.queue > p.queue)
      FROM dlq p WHERE p.queue IS NOT NULL
)
SELECT p.queue, p.state::text AS state,
       (SELECT count(*) FROM (SELECT 1 FROM awa.jobs_hot h
         WHERE h.state = p.state AND h.queue = p.queue LIMIT %(cap)s) c) AS n,
       CASE WHEN p.state = 'available' THEN
           (SELECT min(o.run_at) FROM unnest(%(priorities)s::smallint[]) AS pr(priority)
              CROSS JOIN LATERAL (
                  SELECT h.run_at FROM awa.jobs_hot h
                   WHERE h.state = 'available' AND h.queue = p.queue
                     AND h.priority = pr.priority
                   ORDER BY h.run_at LIMIT 1) o)
       END AS oldest_available_at,
       now() AS db_now
  FROM hot p WHERE p.queue IS NOT NULL
UNION ALL
SELECT p.queue, p.state::text,
       (SELECT count(*) FROM (SELECT 1 FROM awa.scheduled_jobs d
         WHERE d.state = p.state AND d.queue = p.queue LIMIT %(cap)s) c),
       NULL, now()
  FROM deferred p WHERE p.queue IS NOT NULL
UNION ALL
SELECT p.queue, NULL,
       (SELECT count(*) FROM (SELECT 1 FROM awa.dlq_entries e
         WHERE e.queue = p.queue LIMIT %(cap)s) c),
       NULL, now()
  FROM dlq p WHERE p.queue IS NOT NULL

-- name: index_probes_only
-- The planner cannot cost queue_depths well: a recursive CTE is guessed at hundreds of rows,
-- each with a count subplan, which puts the plan far above jit_above_cost (JIT compilation then
-- takes ~1 s for a read of milliseconds); and a pair's state is an outer reference, so its rows
-- are estimated at a third of the table and a sequential scan with a LIMIT looks cheap -- while
-- those rows sit behind the whole terminal history. The read is index probes by design, so for
-- its own transaction it says so.
SELECT set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true)
