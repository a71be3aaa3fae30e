-- The engine-neutral core: the ops reads every engine serves alike (awa/storage/common/reads.py),
-- by name, on the tables every layout shares and
-- the awa.jobs view.  A statement starts at a "-- name: <name>" line
-- (awa.statements.named_statements reads them).

-- name: dlq_depths_by_queue
-- DLQ depth per queue: a loose index scan over its queues, each counted up to %(cap)s.
WITH RECURSIVE qs AS (
    (SELECT queue FROM awa.dlq_entries ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM qs p CROSS JOIN LATERAL (
        SELECT d.queue FROM awa.dlq_entries d WHERE d.queue > p.queue
         ORDER BY d.queue LIMIT 1) n
)
SELECT qs.queue,
       (SELECT count(*) FROM (SELECT 1 FROM awa.dlq_entries d
         WHERE d.queue = qs.queue LIMIT %(cap)s) c) AS n
  FROM (SELECT queue FROM qs LIMIT %(max_queues)s) qs

-- name: dlq_depths
SELECT queue, dlq_reason, count(*) AS depth, max(dlq_at) AS newest,
       count(*) FILTER (WHERE dlq_at > now() - make_interval(secs => %(recent)s)) AS recent
FROM awa.dlq_entries
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
GROUP BY queue, dlq_reason
ORDER BY depth DESC

-- name: runtime_instances
-- The seed's runtime health query, plus what liveness and the screens need.
SELECT instance_id, hostname, pid, version, started_at, last_seen_at, snapshot_interval_ms,
       healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive,
       leader, shutting_down, queues,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8 AS last_seen_age_s,
       EXTRACT(EPOCH FROM (now() - started_at))::float8 AS uptime_s,
       -- What its code speaks (migration 0007), read through the row's JSON so the same
       -- statement serves a schema from before the columns: NULL there.
       (to_jsonb(ri) ->> 'schema_version')::int AS schema_version,
       (to_jsonb(ri) ->> 'layout_version')::int AS layout_version
  FROM awa.runtime_instances ri
 ORDER BY leader DESC, last_seen_at DESC
 LIMIT %(limit)s

-- name: unique_holders
-- Who holds each unique key, and in what state.
SELECT c.unique_key, c.job_id, h.state::text AS state,
       EXISTS (SELECT 1 FROM awa.dlq_entries d WHERE d.job_id = c.job_id) AS in_dlq
  FROM awa.job_unique_claims c LEFT JOIN awa.jobs h ON h.id = c.job_id
 WHERE c.unique_key = ANY(%(keys)s::bytea[])

-- name: job_record
-- The job, or its DLQ entry with dlq_reason set: by primary key either way.  claimed_by
-- (migration 0004) is read through the row's JSON so the same statement serves a layout
-- without the column: NULL there.
SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
       deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
       unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
       callback_on_fail, callback_transform, run_lease, progress, NULL::text AS dlq_reason,
       NULL::timestamptz AS dlq_at, to_jsonb(t) ->> 'claimed_by' AS claimed_by
  FROM awa.jobs t WHERE id = %(id)s
UNION ALL
SELECT job_id AS id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
       heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
       unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
       callback_on_complete, callback_on_fail, callback_transform, run_lease, progress, dlq_reason,
       dlq_at, NULL::text FROM awa.dlq_entries WHERE job_id = %(id)s
LIMIT 1

-- name: job_record_capped
-- The same, with args, metadata, errors and progress fetched only when their JSON text is
-- at most %(cap)s characters; otherwise their first %(cap)s characters and their size.
SELECT r.id, r.kind, r.queue,
       CASE WHEN x.args_bytes <= %(cap)s THEN r.args END AS args,
       CASE WHEN x.args_bytes > %(cap)s THEN left(x.args_text, %(cap)s) END AS args_head,
       x.args_bytes,
       r.state, r.priority, r.attempt, r.max_attempts, r.run_at, r.heartbeat_at,
       r.deadline_at, r.attempted_at, r.finalized_at, r.created_at,
       CASE WHEN x.errors_bytes <= %(cap)s THEN r.errors END AS errors,
       CASE WHEN x.errors_bytes > %(cap)s THEN left(x.errors_text, %(cap)s) END AS errors_head,
       x.errors_bytes,
       CASE WHEN x.metadata_bytes <= %(cap)s THEN r.metadata END AS metadata,
       CASE WHEN x.metadata_bytes > %(cap)s THEN left(x.metadata_text, %(cap)s) END AS metadata_head,
       x.metadata_bytes,
       r.tags, r.unique_key, r.unique_states, r.callback_id, r.callback_timeout_at,
       r.callback_filter, r.callback_on_complete, r.callback_on_fail, r.callback_transform,
       r.run_lease,
       CASE WHEN x.progress_bytes <= %(cap)s THEN r.progress END AS progress,
       CASE WHEN x.progress_bytes > %(cap)s THEN left(x.progress_text, %(cap)s) END AS progress_head,
       x.progress_bytes,
       r.dlq_reason, r.dlq_at, r.claimed_by
  FROM (SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
               deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
               unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
               callback_on_fail, callback_transform, run_lease, progress, NULL::text AS dlq_reason,
               NULL::timestamptz AS dlq_at, to_jsonb(t) ->> 'claimed_by' AS claimed_by
          FROM awa.jobs t WHERE id = %(id)s
        UNION ALL
        SELECT job_id AS id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
               heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
               unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
               callback_on_complete, callback_on_fail, callback_transform, run_lease, progress, dlq_reason,
               dlq_at, NULL::text FROM awa.dlq_entries WHERE job_id = %(id)s
        LIMIT 1) r
 CROSS JOIN LATERAL (SELECT r.args::text AS args_text,
                            r.metadata::text AS metadata_text,
                            array_to_json(r.errors)::text AS errors_text,
                            r.progress::text AS progress_text) y
 CROSS JOIN LATERAL (SELECT y.args_text, coalesce(octet_length(y.args_text), 0) AS args_bytes,
                            y.metadata_text, coalesce(octet_length(y.metadata_text), 0) AS metadata_bytes,
                            y.errors_text, coalesce(octet_length(y.errors_text), 0) AS errors_bytes,
                            y.progress_text, coalesce(octet_length(y.progress_text), 0) AS progress_bytes) x

-- name: dlq_by_queue
-- DLQ pages: the index that serves the most selective given filter (queue, else kind, else
-- none), newest first; the rest are applied within the newest %(window)s entries.
SELECT * FROM (
    SELECT job_id, kind, queue, dlq_reason, dlq_at, attempt, max_attempts,
           errors[array_upper(errors, 1)]->>'error' AS last_error FROM awa.dlq_entries
     WHERE queue = %(queue)s
       AND (%(before_at)s::timestamptz IS NULL OR (dlq_at, job_id) < (%(before_at)s,
              %(before_id)s))
     ORDER BY dlq_at DESC, job_id DESC LIMIT %(window)s) w
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (%(reason)s::text IS NULL OR dlq_reason = %(reason)s)
 ORDER BY dlq_at DESC, job_id DESC
 LIMIT %(page)s

-- name: dlq_by_kind
SELECT * FROM (
    SELECT job_id, kind, queue, dlq_reason, dlq_at, attempt, max_attempts,
           errors[array_upper(errors, 1)]->>'error' AS last_error FROM awa.dlq_entries
     WHERE kind = %(kind)s
       AND (%(before_at)s::timestamptz IS NULL OR (dlq_at, job_id) < (%(before_at)s,
              %(before_id)s))
     ORDER BY dlq_at DESC, job_id DESC LIMIT %(window)s) w
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (%(reason)s::text IS NULL OR dlq_reason = %(reason)s)
 ORDER BY dlq_at DESC, job_id DESC
 LIMIT %(page)s

-- name: dlq_newest
SELECT * FROM (
    SELECT job_id, kind, queue, dlq_reason, dlq_at, attempt, max_attempts,
           errors[array_upper(errors, 1)]->>'error' AS last_error FROM awa.dlq_entries
     WHERE true
       AND (%(before_at)s::timestamptz IS NULL OR (dlq_at, job_id) < (%(before_at)s,
              %(before_id)s))
     ORDER BY dlq_at DESC, job_id DESC LIMIT %(window)s) w
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (%(reason)s::text IS NULL OR dlq_reason = %(reason)s)
 ORDER BY dlq_at DESC, job_id DESC
 LIMIT %(page)s

-- name: descriptors
SELECT 'queue' AS type, queue AS key, descriptor_hash, last_seen_at,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8 AS age_s
FROM awa.queue_descriptors
UNION ALL
SELECT 'kind', kind, descriptor_hash, last_seen_at,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8
FROM awa.job_kind_descriptors
ORDER BY 1, 2

-- name: runtime_descriptor_hashes
SELECT instance_id, descriptor_hashes FROM awa.runtime_instances

-- name: bitmap_scans_off
-- Bitmap scans off for one statement (the kind counts' walk of completions newest first),
-- the caller's setting restored after it (bitmap_scans_back).
SELECT current_setting('enable_bitmapscan') AS was, set_config('enable_bitmapscan', 'off', true)

-- name: bitmap_scans_back
SELECT set_config('enable_bitmapscan', %(was)s, true)

-- name: window_start
-- The created-per-minute series' window.
SELECT now() - make_interval(mins => %(minutes)s) AS since

-- --- running attempts, wedges, repeated errors: on each engine's relation of job rows ------

-- name: running_on_jobs_hot
-- Running attempts on canonical's hot table (awa.jobs_hot), bounded (the seed's canonical
-- running-jobs query: the partial heartbeat index). claimed_by (migration 0004) is read
-- through the row's JSON so the same statement serves a layout without the column (the
-- Rust-core awa 0.6's canonical tables, read by awa.storage.rust_core): NULL there.  The
-- rows are few.
SELECT id, kind, queue, attempt, max_attempts, run_lease, priority,
       attempted_at, heartbeat_at, deadline_at, tags,
       to_jsonb(t) ->> 'claimed_by' AS claimed_by,
       EXTRACT(EPOCH FROM (now() - heartbeat_at))::float8 AS heartbeat_age_s,
       EXTRACT(EPOCH FROM (deadline_at - now()))::float8 AS deadline_remaining_s,
       EXTRACT(EPOCH FROM (now() - attempted_at))::float8 AS running_for_s
  FROM awa.jobs_hot t
 WHERE state = 'running'
   AND (%(started_before)s::timestamptz IS NULL OR attempted_at IS NULL
        OR attempted_at <= %(started_before)s)
 ORDER BY heartbeat_at
 LIMIT %(limit)s

-- name: running_by_id_on_jobs_hot
-- The running attempts of the jobs %(ids)s on canonical's hot table (awa.jobs_hot).
SELECT id, kind, queue, attempt, max_attempts, run_lease, priority,
       attempted_at, heartbeat_at, deadline_at, tags,
       to_jsonb(t) ->> 'claimed_by' AS claimed_by,
       EXTRACT(EPOCH FROM (now() - heartbeat_at))::float8 AS heartbeat_age_s,
       EXTRACT(EPOCH FROM (deadline_at - now()))::float8 AS deadline_remaining_s,
       EXTRACT(EPOCH FROM (now() - attempted_at))::float8 AS running_for_s
  FROM awa.jobs_hot t
 WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running'
 ORDER BY heartbeat_at
 LIMIT %(limit)s

-- name: running_counts_on_jobs_hot
-- Running attempts per queue on canonical's hot table (awa.jobs_hot) (walks
-- idx_jobs_hot_running_heartbeat on the hot table: only running rows are touched).
SELECT queue, count(*) AS running,
       max(EXTRACT(EPOCH FROM (now() - heartbeat_at)))::float8 AS oldest_heartbeat_s,
       count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => %(staleness)s)) AS stale,
       count(*) FILTER (WHERE deadline_at < now()) AS overdue
FROM awa.jobs_hot
WHERE state = 'running' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
GROUP BY queue ORDER BY queue

-- name: cancelled_while_running_on_jobs_hot
-- Cancelled while running, deadline not yet passed, on canonical's hot table
-- (awa.jobs_hot): the handler may still hold its slot until it checks is_cancelled()
-- (idx_jobs_hot_finalized on the hot table).
SELECT id AS job_id, kind, queue, attempt, run_lease, heartbeat_at, finalized_at, deadline_at,
       EXTRACT(EPOCH FROM (now() - finalized_at))::float8 AS cancelled_age_s,
       heartbeat_at > finalized_at AS heartbeat_after_cancel
FROM awa.jobs_hot
WHERE state = 'cancelled'
  AND finalized_at > now() - make_interval(secs => %(window)s)
  AND attempted_at IS NOT NULL
  AND deadline_at > now()
  AND heartbeat_at >= finalized_at - make_interval(secs => %(staleness)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY finalized_at
LIMIT %(limit)s

-- name: wedged_claims_on_jobs_hot
-- The guide's wedge (a running job whose unique key another job holds), per queue, on
-- canonical's hot table (awa.jobs_hot).
SELECT j.queue, count(*) AS wedged
  FROM awa.jobs_hot j
  JOIN awa.job_unique_claims c ON c.unique_key = j.unique_key AND c.job_id <> j.id
 WHERE j.state = 'running'
 GROUP BY j.queue

-- name: superseded_on_jobs_hot
-- The same running attempts one by one, with the holder's state (the guide's wedge query),
-- on canonical's hot table (awa.jobs_hot).
SELECT j.id AS stuck_job, j.kind, j.queue, j.unique_key, c.job_id AS claim_holder,
       h.state::text AS holder_state
  FROM awa.jobs_hot j
  JOIN awa.job_unique_claims c ON c.unique_key = j.unique_key AND c.job_id <> j.id
  LEFT JOIN awa.jobs h ON h.id = c.job_id
 WHERE j.state = 'running' AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
 ORDER BY j.id
 LIMIT %(limit)s

-- name: repeated_errors_on_jobs_hot
-- The newest DLQ entries only (idx_dlq_entries_dlq_at), and recent failed jobs of
-- canonical's hot table (awa.jobs_hot) for queues without a DLQ (idx_jobs_hot_finalized).
-- Per job: its last error and how many of its attempts failed with that same message.
WITH recent AS (
    (SELECT job_id, kind, queue, errors, 'dlq' AS place, dlq_at AS at FROM awa.dlq_entries
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY dlq_at DESC LIMIT %(sample)s)
    UNION ALL
    (SELECT id, kind, queue, errors, 'failed', finalized_at FROM awa.jobs_hot
     WHERE state = 'failed' AND finalized_at IS NOT NULL
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY finalized_at DESC LIMIT %(sample)s)
), last_errors AS (
    SELECT job_id, kind, queue, place, at,
           left(errors[array_upper(errors, 1)]->>'error', 300) AS message,
           (SELECT count(*) FROM unnest(errors) e
            WHERE e->>'error' = errors[array_upper(errors, 1)]->>'error') AS same_attempts
    FROM recent
    WHERE errors IS NOT NULL AND cardinality(errors) > 0
)
SELECT kind, queue, message, count(*) AS jobs, max(same_attempts) AS max_repeats_in_one_job,
       (array_agg(job_id ORDER BY job_id DESC))[1:5] AS sample_job_ids,
       array_agg(DISTINCT place) AS places, min(at) AS first_seen, max(at) AS last_seen
FROM last_errors
GROUP BY kind, queue, message
ORDER BY count(*) DESC, max(same_attempts) DESC
LIMIT %(limit)s

-- name: running_on_jobs
-- Running attempts on queue storage's awa.jobs view, bounded: as running_on_jobs_hot.
SELECT id, kind, queue, attempt, max_attempts, run_lease, priority,
       attempted_at, heartbeat_at, deadline_at, tags,
       to_jsonb(t) ->> 'claimed_by' AS claimed_by,
       EXTRACT(EPOCH FROM (now() - heartbeat_at))::float8 AS heartbeat_age_s,
       EXTRACT(EPOCH FROM (deadline_at - now()))::float8 AS deadline_remaining_s,
       EXTRACT(EPOCH FROM (now() - attempted_at))::float8 AS running_for_s
  FROM awa.jobs t
 WHERE state = 'running'
   AND (%(started_before)s::timestamptz IS NULL OR attempted_at IS NULL
        OR attempted_at <= %(started_before)s)
 ORDER BY heartbeat_at
 LIMIT %(limit)s

-- name: running_by_id_on_jobs
-- The running attempts of the jobs %(ids)s on queue storage's awa.jobs view.
SELECT id, kind, queue, attempt, max_attempts, run_lease, priority,
       attempted_at, heartbeat_at, deadline_at, tags,
       to_jsonb(t) ->> 'claimed_by' AS claimed_by,
       EXTRACT(EPOCH FROM (now() - heartbeat_at))::float8 AS heartbeat_age_s,
       EXTRACT(EPOCH FROM (deadline_at - now()))::float8 AS deadline_remaining_s,
       EXTRACT(EPOCH FROM (now() - attempted_at))::float8 AS running_for_s
  FROM awa.jobs t
 WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running'
 ORDER BY heartbeat_at
 LIMIT %(limit)s

-- name: running_counts_on_jobs
-- Running attempts per queue on queue storage's awa.jobs view (walks
-- idx_jobs_hot_running_heartbeat on the hot table: only running rows are touched).
SELECT queue, count(*) AS running,
       max(EXTRACT(EPOCH FROM (now() - heartbeat_at)))::float8 AS oldest_heartbeat_s,
       count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => %(staleness)s)) AS stale,
       count(*) FILTER (WHERE deadline_at < now()) AS overdue
FROM awa.jobs
WHERE state = 'running' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
GROUP BY queue ORDER BY queue

-- name: cancelled_while_running_on_jobs
-- Cancelled while running, deadline not yet passed, on queue storage's awa.jobs view: the
-- handler may still hold its slot until it checks is_cancelled() (idx_jobs_hot_finalized on
-- the hot table).
SELECT id AS job_id, kind, queue, attempt, run_lease, heartbeat_at, finalized_at, deadline_at,
       EXTRACT(EPOCH FROM (now() - finalized_at))::float8 AS cancelled_age_s,
       heartbeat_at > finalized_at AS heartbeat_after_cancel
FROM awa.jobs
WHERE state = 'cancelled'
  AND finalized_at > now() - make_interval(secs => %(window)s)
  AND attempted_at IS NOT NULL
  AND deadline_at > now()
  AND heartbeat_at >= finalized_at - make_interval(secs => %(staleness)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY finalized_at
LIMIT %(limit)s

-- name: wedged_claims_on_jobs
-- The guide's wedge (a running job whose unique key another job holds), per queue, on queue
-- storage's awa.jobs view.
SELECT j.queue, count(*) AS wedged
  FROM awa.jobs j
  JOIN awa.job_unique_claims c ON c.unique_key = j.unique_key AND c.job_id <> j.id
 WHERE j.state = 'running'
 GROUP BY j.queue

-- name: superseded_on_jobs
-- The same running attempts one by one, with the holder's state (the guide's wedge query),
-- on queue storage's awa.jobs view.
SELECT j.id AS stuck_job, j.kind, j.queue, j.unique_key, c.job_id AS claim_holder,
       h.state::text AS holder_state
  FROM awa.jobs j
  JOIN awa.job_unique_claims c ON c.unique_key = j.unique_key AND c.job_id <> j.id
  LEFT JOIN awa.jobs h ON h.id = c.job_id
 WHERE j.state = 'running' AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
 ORDER BY j.id
 LIMIT %(limit)s

-- name: repeated_errors_on_jobs
-- The newest DLQ entries only (idx_dlq_entries_dlq_at), and recent failed jobs of queue
-- storage's awa.jobs view for queues without a DLQ (idx_jobs_hot_finalized).  Per job: its
-- last error and how many of its attempts failed with that same message.
WITH recent AS (
    (SELECT job_id, kind, queue, errors, 'dlq' AS place, dlq_at AS at FROM awa.dlq_entries
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY dlq_at DESC LIMIT %(sample)s)
    UNION ALL
    (SELECT id, kind, queue, errors, 'failed', finalized_at FROM awa.jobs
     WHERE state = 'failed' AND finalized_at IS NOT NULL
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY finalized_at DESC LIMIT %(sample)s)
), last_errors AS (
    SELECT job_id, kind, queue, place, at,
           left(errors[array_upper(errors, 1)]->>'error', 300) AS message,
           (SELECT count(*) FROM unnest(errors) e
            WHERE e->>'error' = errors[array_upper(errors, 1)]->>'error') AS same_attempts
    FROM recent
    WHERE errors IS NOT NULL AND cardinality(errors) > 0
)
SELECT kind, queue, message, count(*) AS jobs, max(same_attempts) AS max_repeats_in_one_job,
       (array_agg(job_id ORDER BY job_id DESC))[1:5] AS sample_job_ids,
       array_agg(DISTINCT place) AS places, min(at) AS first_seen, max(at) AS last_seen
FROM last_errors
GROUP BY kind, queue, message
ORDER BY count(*) DESC, max(same_attempts) DESC
LIMIT %(limit)s

-- --- the canonical tables' kind counts and recent completions ------------------------------

-- name: hot_recently_completed
-- The queues of awa.jobs_hot that completed a job within the last %(within)s seconds
-- (idx_jobs_hot_state_queue, idx_jobs_hot_finalized): a loose index scan over the distinct
-- queues of completed rows (the first %(limit)s by name), then one probe per queue for a
-- completion inside the window (LIMIT 1 keeps it a probe: as a semi-join the planner reads
-- every completion of the window instead).
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT w.queue FROM (SELECT queue FROM walk LIMIT %(limit)s) w
 CROSS JOIN LATERAL (
       SELECT 1 FROM awa.jobs_hot t
        WHERE t.state = 'completed' AND t.queue = w.queue
          AND t.finalized_at > now() - make_interval(secs => %(within)s)
        LIMIT 1) r

-- name: canonical_kind_counts
-- The canonical tables' part of every engine's kind counts: rows of (kind, queue, n,
-- recent, capped).  Each part reads at most %(cap)s rows, by index, and says capped (for
-- every kind it read) when it reached the cap: its counts are then lower bounds.  The hot
-- table's unfinished and failed/cancelled rows (%(hot_states)s) and the deferred table
-- (%(deferred_states)s) by their (kind, state) index: a loose index scan over the kinds
-- (one probe each, at most %(max_kinds)s), then each kind's rows; the hot table's
-- completions by its (state, queue, finalized_at) index: a loose index scan over its
-- completed queues (at most %(max_kinds)s), then each queue's completions, newest first.
-- Sent with bitmap scans off (reads.without_bitmap_scans): a bitmap scan reads every
-- completion of a queue to sort them instead of stopping at the cap.
SELECT * FROM (
    WITH RECURSIVE kinds AS (
        (SELECT t.kind FROM awa.jobs_hot t WHERE true ORDER BY t.kind LIMIT 1)
        UNION ALL
        SELECT n.kind FROM kinds p CROSS JOIN LATERAL (
            SELECT t.kind FROM awa.jobs_hot t WHERE t.kind > p.kind ORDER BY t.kind LIMIT 1) n
    )
    SELECT r.kind, r.queue, count(*) AS n, 0::bigint AS recent,
           sum(count(*)) OVER () >= %(cap)s AS capped
      FROM (SELECT k.kind, r.queue FROM (SELECT kind FROM kinds LIMIT %(max_kinds)s) k
             CROSS JOIN LATERAL (
                   SELECT t.queue FROM awa.jobs_hot t
                    WHERE t.kind = k.kind AND t.state = ANY(%(hot_states)s::awa.job_state[])
                    LIMIT %(cap)s) r
             LIMIT %(cap)s) r
     GROUP BY r.kind, r.queue
) hot
UNION ALL
SELECT * FROM (
    WITH RECURSIVE kinds AS (
        (SELECT t.kind FROM awa.scheduled_jobs t WHERE true ORDER BY t.kind LIMIT 1)
        UNION ALL
        SELECT n.kind FROM kinds p CROSS JOIN LATERAL (
            SELECT t.kind FROM awa.scheduled_jobs t WHERE t.kind > p.kind ORDER BY t.kind LIMIT 1) n
    )
    SELECT r.kind, r.queue, count(*) AS n, 0::bigint AS recent,
           sum(count(*)) OVER () >= %(cap)s AS capped
      FROM (SELECT k.kind, r.queue FROM (SELECT kind FROM kinds LIMIT %(max_kinds)s) k
             CROSS JOIN LATERAL (
                   SELECT t.queue FROM awa.scheduled_jobs t
                    WHERE t.kind = k.kind AND t.state = ANY(%(deferred_states)s::awa.job_state[])
                    LIMIT %(cap)s) r
             LIMIT %(cap)s) r
     GROUP BY r.kind, r.queue
) deferred
UNION ALL
SELECT * FROM (
    WITH RECURSIVE walk AS (
        (SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
        UNION ALL
        SELECT n.queue FROM walk p CROSS JOIN LATERAL (
            SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' AND t.queue > p.queue
             ORDER BY t.queue LIMIT 1) n
    )
    SELECT r.kind, r.queue, count(*) AS n,
           count(*) FILTER (WHERE r.finalized_at > now() - interval '1 hour') AS recent,
           sum(count(*)) OVER () >= %(cap)s AS capped
      FROM (SELECT r.kind, w.queue, r.finalized_at
              FROM (SELECT queue FROM walk LIMIT %(max_kinds)s) w
             CROSS JOIN LATERAL (
                   SELECT t.kind, t.finalized_at FROM awa.jobs_hot t
                    WHERE t.state = 'completed' AND t.queue = w.queue
                      AND t.finalized_at IS NOT NULL
                    ORDER BY t.finalized_at DESC LIMIT %(cap)s) r
             LIMIT %(cap)s) r
     GROUP BY r.kind, r.queue
) hot_completed
