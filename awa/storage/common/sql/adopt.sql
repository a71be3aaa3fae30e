-- The engine-neutral core of `awa adopt` (awa/storage/common/adopt.py): the staged Rust-core
-- rows of the tables every layout shares.  {stage} is the staging schema, composed as an
-- identifier at run time (psycopg sql.Identifier, adopt.staged), so a literal brace is
-- written doubled.  A statement starts at a "-- name: <name>" line
-- (awa.statements.named_statements reads them).

-- name: adopt_dlq
-- The staged DLQ, ids kept, into awa.dlq_entries (a running attempt keeps its last
-- heartbeat, its claim time when it never beat).
INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt, max_attempts,
                             run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
                             created_at, errors, metadata, tags, unique_key, unique_states,
                             callback_id, callback_timeout_at, callback_filter,
                             callback_on_complete, callback_on_fail, callback_transform,
                             run_lease, progress, dlq_reason, dlq_at, original_run_lease)
SELECT id, kind, queue, args, state::awa.job_state, priority, attempt, max_attempts, run_at,
       CASE WHEN state = 'running' THEN coalesce(heartbeat_at, attempted_at, now())
            ELSE heartbeat_at END,
       deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
       unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
       callback_on_fail, callback_transform, run_lease, progress, dlq_reason, dlq_at,
       original_run_lease
  FROM {stage}.dlq
 ORDER BY id

-- name: adopt_unique_claims
-- Unique claims, copied as the Rust core held them.
INSERT INTO awa.job_unique_claims (unique_key, job_id)
SELECT unique_key, job_id FROM {stage}.unique_claims
ON CONFLICT DO NOTHING

-- name: adopt_cron
INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, args, priority, max_attempts,
                           tags, metadata, missed_fire_policy, last_enqueued_at, paused_at,
                           paused_by, created_at, updated_at)
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM {stage}.cron_jobs
ON CONFLICT (name) DO NOTHING

-- name: adopt_queue_meta
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by, enqueue_shards)
SELECT queue, paused, paused_at, paused_by, enqueue_shards FROM {stage}.queue_meta
ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, paused_at = excluded.paused_at,
    paused_by = excluded.paused_by, enqueue_shards = excluded.enqueue_shards

-- name: adopt_queue_descriptors
INSERT INTO awa.queue_descriptors (queue, display_name, description, owner, docs_url, tags,
                                   extra, descriptor_hash, last_seen_at, created_at, updated_at,
                                   sync_interval_ms)
SELECT queue, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
       last_seen_at, created_at, updated_at, sync_interval_ms FROM {stage}.queue_descriptors
ON CONFLICT (queue) DO NOTHING

-- name: adopt_job_kind_descriptors
INSERT INTO awa.job_kind_descriptors (kind, display_name, description, owner, docs_url, tags,
                                      extra, descriptor_hash, last_seen_at, created_at, updated_at,
                                      sync_interval_ms)
SELECT kind, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
       last_seen_at, created_at, updated_at, sync_interval_ms FROM {stage}.job_kind_descriptors
ON CONFLICT (kind) DO NOTHING

-- name: set_sequence
-- The id sequence continues past every id the Rust core handed out.
SELECT setval('awa.jobs_id_seq', %(next_id)s, true)

-- name: count_tables
-- The shared tables' rows, to check an adoption.
SELECT (SELECT count(*) FROM awa.job_unique_claims) AS unique_claims,
       (SELECT count(*) FROM awa.cron_jobs) AS cron_jobs,
       (SELECT count(*) FROM awa.queue_meta) AS queue_meta,
       (SELECT count(*) FROM awa.queue_descriptors) AS queue_descriptors,
       (SELECT count(*) FROM awa.job_kind_descriptors) AS job_kind_descriptors
