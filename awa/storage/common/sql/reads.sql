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
