-- The Rust-core side of `awa adopt` (awa/storage/rust_core/adopt.py): every statement it sends,
-- by name.  {stage} (the staging schema), {stash} (the stashed Rust schema), {s} (the Rust
-- core's active queue-storage schema), {dlq} (the schema of its dlq_entries) and {schema}
-- are schemas named at run time: an identifier cannot be a parameter, so a statement that
-- names one is composed with psycopg's sql.Identifier (adopt._q), and a literal brace in
-- it is written doubled ('{{}}' is sent as '{}').  Statements without them are sent as
-- written.  A statement starts at a "-- name: <name>" line (awa.statements.named_statements
-- reads them).

-- --- liveness and locks --------------------------------------------------------------------

-- name: live_runtimes
-- A Rust-core runtime that wrote its snapshot lately (within %(intervals)s of its own
-- snapshot interval).
SELECT instance_id::text AS instance_id, hostname, pid, shutting_down,
       EXTRACT(EPOCH FROM now() - last_seen_at)::float8 AS seen_s_ago,
       EXTRACT(EPOCH FROM last_seen_at + make_interval(
           secs => %(intervals)s * greatest(snapshot_interval_ms, 1) / 1000.0) - now()
       )::float8 AS gone_in_s
  FROM awa.runtime_instances
 WHERE last_seen_at > now() - make_interval(
           secs => %(intervals)s * greatest(snapshot_interval_ms, 1) / 1000.0)
 ORDER BY last_seen_at DESC

-- name: lock
-- The adoption lock (two `awa adopt` never interleave their phases), for the transaction.
SELECT pg_advisory_xact_lock(%(key)s)

-- name: lock_timeout
SET LOCAL lock_timeout = '5s'

-- name: lock_rust_tables
-- The tables a starting 0.6.9 runtime writes first: held until the stash commits, so none
-- starts between the liveness check and the rename.
LOCK TABLE awa.runtime_instances, awa.queue_meta, awa.job_unique_claims IN ACCESS EXCLUSIVE MODE

-- name: rust_qs_schema
SELECT awa.active_queue_storage_schema() AS s

-- name: schema_exists
SELECT to_regnamespace(%(name)s) IS NOT NULL AS present

-- name: relation_exists
SELECT to_regclass(%(name)s) IS NOT NULL AS present

-- --- staging tables (in order) -------------------------------------------------------------

-- name: create_staging_schema
CREATE SCHEMA {stage}

-- name: create_staging_jobs
-- Our column set (awa.jobs' columns) plus the table each row came from.
CREATE TABLE {stage}.jobs (
    id bigint PRIMARY KEY, kind text NOT NULL, queue text NOT NULL, args jsonb NOT NULL,
    state text NOT NULL, priority smallint NOT NULL, attempt smallint NOT NULL,
    max_attempts smallint NOT NULL, run_at timestamptz NOT NULL, heartbeat_at timestamptz,
    deadline_at timestamptz, attempted_at timestamptz, finalized_at timestamptz,
    created_at timestamptz NOT NULL, errors jsonb[], metadata jsonb NOT NULL,
    tags text[] NOT NULL, unique_key bytea, unique_states bit(8), callback_id uuid,
    callback_timeout_at timestamptz, callback_filter text, callback_on_complete text,
    callback_on_fail text, callback_transform text, run_lease bigint NOT NULL,
    progress jsonb, source text NOT NULL)

-- name: create_staging_dlq
CREATE TABLE {stage}.dlq (LIKE {stage}.jobs, dlq_reason text NOT NULL,
    dlq_at timestamptz NOT NULL, original_run_lease bigint NOT NULL, PRIMARY KEY (id))

-- name: create_staging_skipped
-- What is not moved, and why.
CREATE TABLE {stage}.skipped (state text NOT NULL, source text NOT NULL, n bigint NOT NULL,
    reason text NOT NULL)

-- name: create_staging_adoption
-- The adoption's own state (its phase, the stash, the engine, the next id).
CREATE TABLE {stage}.adoption (phase text NOT NULL, stash text NOT NULL,
    rust_queue_storage_schema text, engine text NOT NULL, next_id bigint NOT NULL,
    staged_at timestamptz NOT NULL DEFAULT now(), report jsonb)

-- --- staging the jobs ----------------------------------------------------------------------

-- name: stage_view
-- Every job of the Rust core's own awa.jobs view (its jobs_compat(): ready, deferred,
-- materialized leases, terminal and DLQ rows on queue storage; jobs_hot and scheduled_jobs
-- on canonical), DLQ rows left to stage_dlq ({dlq}: the schema of its dlq_entries).  A job
-- the view shows twice (an older terminal row beside a newer live one) is staged once, the
-- live row first. %(queue_storage)s: whether the Rust core runs queue storage (the source
-- tables' names).
INSERT INTO {stage}.jobs
SELECT v.id, v.kind, v.queue, v.args, v.state::text, v.priority, v.attempt, v.max_attempts,
       v.run_at, v.heartbeat_at, v.deadline_at, v.attempted_at, v.finalized_at, v.created_at,
       v.errors, coalesce(v.metadata, '{{}}'::jsonb), coalesce(v.tags, '{{}}'::text[]),
       v.unique_key, v.unique_states, v.callback_id, v.callback_timeout_at, v.callback_filter,
       v.callback_on_complete, v.callback_on_fail, v.callback_transform, v.run_lease,
       v.progress,
       CASE WHEN %(queue_storage)s THEN
            CASE WHEN v.state = 'available' THEN 'ready_entries'
                 WHEN v.state IN ('scheduled', 'retryable') THEN 'deferred_jobs'
                 WHEN v.state IN ('running', 'waiting_external') THEN 'leases'
                 ELSE 'done_entries' END
       ELSE CASE WHEN v.state IN ('scheduled', 'retryable') THEN 'scheduled_jobs'
                 ELSE 'jobs_hot' END END
  FROM awa.jobs v
 WHERE NOT EXISTS (SELECT 1 FROM {dlq}.dlq_entries d WHERE d.job_id = v.id)
 ORDER BY CASE WHEN v.finalized_at IS NULL THEN 0 ELSE 1 END, v.finalized_at DESC
ON CONFLICT (id) DO NOTHING

-- name: stage_view_without_dlq
-- stage_view where the Rust core has no DLQ table: every row is staged.
INSERT INTO {stage}.jobs
SELECT v.id, v.kind, v.queue, v.args, v.state::text, v.priority, v.attempt, v.max_attempts,
       v.run_at, v.heartbeat_at, v.deadline_at, v.attempted_at, v.finalized_at, v.created_at,
       v.errors, coalesce(v.metadata, '{{}}'::jsonb), coalesce(v.tags, '{{}}'::text[]),
       v.unique_key, v.unique_states, v.callback_id, v.callback_timeout_at, v.callback_filter,
       v.callback_on_complete, v.callback_on_fail, v.callback_transform, v.run_lease,
       v.progress,
       CASE WHEN %(queue_storage)s THEN
            CASE WHEN v.state = 'available' THEN 'ready_entries'
                 WHEN v.state IN ('scheduled', 'retryable') THEN 'deferred_jobs'
                 WHEN v.state IN ('running', 'waiting_external') THEN 'leases'
                 ELSE 'done_entries' END
       ELSE CASE WHEN v.state IN ('scheduled', 'retryable') THEN 'scheduled_jobs'
                 ELSE 'jobs_hot' END END
  FROM awa.jobs v
 ORDER BY CASE WHEN v.finalized_at IS NULL THEN 0 ELSE 1 END, v.finalized_at DESC
ON CONFLICT (id) DO NOTHING

-- name: count_view
-- How many rows stage_view reads (a job shown twice counts twice).
SELECT count(*) AS n FROM awa.jobs v
 WHERE NOT EXISTS (SELECT 1 FROM {dlq}.dlq_entries d WHERE d.job_id = v.id)

-- name: count_view_without_dlq
SELECT count(*) AS n FROM awa.jobs

-- name: stage_canonical_rows
-- On queue storage, rows still in the canonical tables (a database moved to queue storage
-- by 0.6.9's mixed transition before its canonical backlog drained): the view reads only
-- the active engine, so they are staged from the tables.
INSERT INTO {stage}.jobs
SELECT j.id, j.kind, j.queue, j.args, j.state::text, j.priority, j.attempt, j.max_attempts,
       j.run_at, j.heartbeat_at, j.deadline_at, j.attempted_at, j.finalized_at, j.created_at,
       j.errors, j.metadata, j.tags, j.unique_key, j.unique_states, j.callback_id,
       j.callback_timeout_at, j.callback_filter, j.callback_on_complete, j.callback_on_fail,
       j.callback_transform, j.run_lease, j.progress, j.source
  FROM (SELECT h.*, 'jobs_hot' AS source FROM awa.jobs_hot h
        UNION ALL
        SELECT d.*, 'scheduled_jobs' FROM awa.scheduled_jobs d) j
ON CONFLICT (id) DO NOTHING

-- name: stage_receipts
-- Open receipt claims (queue storage's unmaterialized running attempts), which the Rust
-- core's view leaves out: the guide's open-claim anti-join (not closed in place, no closure
-- row or closure batch names it, no lease materialized it -- the rule of the reader's
-- open_attempts, awa/storage/rust_core/sql/reads.sql), joined to the claimed ready entry
-- for kind, args and payload: staged when that entry is there; how many are not (the entry
-- already pruned: reported, not moved) is the statement's one row.
WITH open AS MATERIALIZED (
    SELECT c.job_id, c.queue, c.priority, c.attempt, c.max_attempts, c.run_lease, c.claimed_at,
           c.deadline_at, a.heartbeat_at, a.progress, r.job_id IS NOT NULL AS has_entry, r.kind,
           r.args, r.run_at, r.created_at, r.payload, r.unique_key, r.unique_states
      FROM {s}.lease_claims c
      LEFT JOIN {s}.ready_entries r
        ON r.ready_slot = c.ready_slot AND r.ready_generation = c.ready_generation
       AND r.queue = c.queue AND r.priority = c.priority AND r.enqueue_shard = c.enqueue_shard
       AND r.lane_seq = c.lane_seq
      LEFT JOIN {s}.attempt_state a ON a.job_id = c.job_id AND a.run_lease = c.run_lease
     WHERE c.closed_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closures cx
                        WHERE cx.claim_slot = c.claim_slot AND cx.job_id = c.job_id
                          AND cx.run_lease = c.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closure_batches cb
                        WHERE cb.receipt_ranges @> c.receipt_id)
       AND NOT EXISTS (SELECT 1 FROM {s}.leases l
                        WHERE l.job_id = c.job_id AND l.run_lease = c.run_lease)
), staged AS (
    INSERT INTO {stage}.jobs
    SELECT o.job_id, o.kind, o.queue, o.args, 'running', o.priority, o.attempt, o.max_attempts,
           o.run_at, coalesce(o.heartbeat_at, o.claimed_at), o.deadline_at, o.claimed_at, NULL,
           o.created_at,
           awa.queue_storage_payload_errors(o.payload) AS errors,
           coalesce(NULLIF(o.payload->'metadata', 'null'::jsonb), '{{}}'::jsonb) AS metadata,
           awa.queue_storage_payload_tags(o.payload) AS tags,
           o.unique_key, o.unique_states::bit(8), NULL, NULL, NULL, NULL, NULL, NULL, o.run_lease,
           coalesce(NULLIF(o.progress, 'null'::jsonb),
                    NULLIF(o.payload->'progress', 'null'::jsonb)),
           'lease_claims'
      FROM open o
     WHERE o.has_entry
    ON CONFLICT (id) DO NOTHING
)
SELECT count(*) FILTER (WHERE NOT has_entry) AS n FROM open

-- name: stage_compact
-- Compact receipt claims (0.6.9's zero-deadline claims: one lease_claim_batches row per
-- claim batch), open when no closure batch covers the receipt, no closure row names the
-- attempt and no lease materialized it.  Neither the Rust core's view nor its CLI lists
-- them.  Staged and counted as stage_receipts.
WITH open AS MATERIALIZED (
    SELECT i.job_id, b.queue, r.priority, i.attempt, i.max_attempts, i.run_lease,
           b.claimed_at, b.deadline_at, a.heartbeat_at, a.progress,
           r.job_id IS NOT NULL AS has_entry, r.kind, r.args, r.run_at, r.created_at, r.payload,
           r.unique_key, r.unique_states
      FROM {s}.lease_claim_batches b
     CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.receipt_ids, b.lane_seqs,
                               b.attempts, b.max_attempts)
           AS i(job_id, run_lease, receipt_id, lane_seq, attempt, max_attempts)
      LEFT JOIN {s}.ready_entries r
        ON r.ready_slot = b.ready_slot AND r.ready_generation = b.ready_generation
       AND r.queue = b.queue AND r.priority = b.priority AND r.enqueue_shard = b.enqueue_shard
       AND r.lane_seq = i.lane_seq
      LEFT JOIN {s}.attempt_state a ON a.job_id = i.job_id AND a.run_lease = i.run_lease
     WHERE NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closure_batches cb
                        WHERE cb.receipt_ranges @> i.receipt_id)
       AND NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closures cx
                        WHERE cx.job_id = i.job_id AND cx.run_lease = i.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.leases l
                        WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease)
), staged AS (
    INSERT INTO {stage}.jobs
    SELECT o.job_id, o.kind, o.queue, o.args, 'running', o.priority, o.attempt, o.max_attempts,
           o.run_at, coalesce(o.heartbeat_at, o.claimed_at), o.deadline_at, o.claimed_at, NULL,
           o.created_at,
           awa.queue_storage_payload_errors(o.payload) AS errors,
           coalesce(NULLIF(o.payload->'metadata', 'null'::jsonb), '{{}}'::jsonb) AS metadata,
           awa.queue_storage_payload_tags(o.payload) AS tags,
           o.unique_key, o.unique_states::bit(8), NULL, NULL, NULL, NULL, NULL, NULL, o.run_lease,
           coalesce(NULLIF(o.progress, 'null'::jsonb),
                    NULLIF(o.payload->'progress', 'null'::jsonb)),
           'lease_claim_batches'
      FROM open o
     WHERE o.has_entry
    ON CONFLICT (id) DO NOTHING
)
SELECT count(*) FILTER (WHERE NOT has_entry) AS n FROM open

-- name: stage_dlq
INSERT INTO {stage}.dlq
SELECT d.job_id, d.kind, d.queue, d.args, d.state::text, d.priority, d.attempt,
       d.max_attempts, d.run_at, NULL, NULL, d.attempted_at, d.finalized_at, d.created_at,
       awa.queue_storage_payload_errors(d.payload) AS errors,
       coalesce(NULLIF(d.payload->'metadata', 'null'::jsonb), '{{}}'::jsonb) AS metadata,
       awa.queue_storage_payload_tags(d.payload) AS tags,
       d.unique_key, d.unique_states::bit(8), NULL, NULL, NULL, NULL, NULL, NULL, d.run_lease,
       NULLIF(d.payload->'progress', 'null'::jsonb), 'dlq_entries', d.dlq_reason, d.dlq_at,
       d.original_run_lease
  FROM {dlq}.dlq_entries d

-- name: skip_old_completed
-- Completed history past our retention is not brought over (our cleanup would delete it on
-- its first pass).
WITH gone AS (
    DELETE FROM {stage}.jobs
     WHERE state = 'completed'
       AND finalized_at < now() - make_interval(secs => %(retention_s)s)
    RETURNING source)
INSERT INTO {stage}.skipped
SELECT 'completed', source, count(*), %(reason)s FROM gone GROUP BY source

-- name: skip
-- One line of what is not moved.
INSERT INTO {stage}.skipped VALUES (%(state)s, %(source)s, %(n)s, %(reason)s)

-- --- the shared tables, staged whole -------------------------------------------------------

-- name: stage_unique_claims
-- The unique claims of staged jobs.
CREATE TABLE {stage}.unique_claims AS
SELECT c.unique_key, c.job_id FROM awa.job_unique_claims c
 WHERE EXISTS (SELECT 1 FROM {stage}.jobs j WHERE j.id = c.job_id)
    OR EXISTS (SELECT 1 FROM {stage}.dlq d WHERE d.id = c.job_id)

-- name: stage_cron_jobs
CREATE TABLE {stage}.cron_jobs AS
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs

-- name: stage_queue_meta
CREATE TABLE {stage}.queue_meta AS
SELECT queue, paused, paused_at, paused_by, enqueue_shards FROM awa.queue_meta

-- name: stage_queue_descriptors
CREATE TABLE {stage}.queue_descriptors AS
SELECT queue, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
       last_seen_at, created_at, updated_at, sync_interval_ms FROM awa.queue_descriptors

-- name: stage_job_kind_descriptors
CREATE TABLE {stage}.job_kind_descriptors AS
SELECT kind, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
       last_seen_at, created_at, updated_at, sync_interval_ms FROM awa.job_kind_descriptors

-- name: unique_claims_left
-- Unique claims of jobs that are not moved.
SELECT count(*) AS n FROM awa.job_unique_claims c
 WHERE NOT EXISTS (SELECT 1 FROM {stage}.unique_claims s
                    WHERE s.unique_key = c.unique_key AND s.job_id = c.job_id)

-- name: count_runtime_instances
-- Rust-core tables with rows that have no counterpart here (reported, never moved).
SELECT count(*) AS n FROM awa.runtime_instances

-- name: count_batch_operations
SELECT count(*) AS n FROM awa.batch_operations

-- name: last_value_of_jobs_id_seq
-- The Rust core's id sequences (either name), for the next id.
SELECT last_value AS n FROM awa.jobs_id_seq

-- name: last_value_of_job_id_seq
SELECT last_value AS n FROM awa.job_id_seq

-- name: max_staged_id
SELECT greatest((SELECT max(id) FROM {stage}.jobs), (SELECT max(id) FROM {stage}.dlq),
                %(floor)s)::bigint AS n

-- name: record
INSERT INTO {stage}.adoption (phase, stash, rust_queue_storage_schema, engine, next_id)
VALUES ('staged', %(stash)s, %(qs)s, %(engine)s, %(next_id)s)

-- name: stash_schema
ALTER SCHEMA awa RENAME TO {stash}

-- --- after staging -------------------------------------------------------------------------

-- name: adoption
SELECT phase, stash, rust_queue_storage_schema, engine, next_id, report FROM {stage}.adoption

-- name: set_phase
UPDATE {stage}.adoption SET phase = %(phase)s, report = coalesce(%(report)s, report)

-- name: staged_by_state
SELECT state, source, count(*) AS n FROM {stage}.jobs GROUP BY state, source
UNION ALL
SELECT 'dlq', source, count(*) FROM {stage}.dlq GROUP BY source
ORDER BY 1, 2

-- name: staged_count_unique_claims
SELECT count(*) AS n FROM {stage}.unique_claims

-- name: staged_count_cron_jobs
SELECT count(*) AS n FROM {stage}.cron_jobs

-- name: staged_count_queue_meta
SELECT count(*) AS n FROM {stage}.queue_meta

-- name: staged_count_queue_descriptors
SELECT count(*) AS n FROM {stage}.queue_descriptors

-- name: staged_count_job_kind_descriptors
SELECT count(*) AS n FROM {stage}.job_kind_descriptors

-- name: skipped
SELECT state, source, n, reason FROM {stage}.skipped WHERE n > 0 ORDER BY state, source

-- --- abort and finalize --------------------------------------------------------------------

-- name: drop_ours
DROP SCHEMA awa CASCADE

-- name: restore_stash
ALTER SCHEMA {stash} RENAME TO awa

-- name: drop_schema
-- {schema}: the stash, the staging schema, or the Rust core's queue-storage schema.
DROP SCHEMA {schema} CASCADE
