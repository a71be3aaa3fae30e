-- Canonical engine: awa adopt's writes (awa/storage/canonical/adopt.py) by name. Each statement
-- follows its name line and is whole, as it is sent (awa.statements.named_statements reads
-- them, once, at import).
--
-- The staged Rust-core rows go into jobs_hot / scheduled_jobs with the insert trigger off (a
-- unique claim the core copies as the Rust core held it is neither taken twice nor refused).
-- {stage} is the staging schema, chosen at run time: adopt.py puts it in as a quoted identifier
-- (common.adopt.staged), the one name not written out. The column list and the select list are
-- common.adopt.COLUMNS and SELECT, written out.

-- name: disable_unique_claim_trigger_jobs_hot
-- The unique-claim trigger off while the jobs are written, then on again.
ALTER TABLE awa.jobs_hot DISABLE TRIGGER awa_unique_claim_ins

-- name: disable_unique_claim_trigger_scheduled_jobs
ALTER TABLE awa.scheduled_jobs DISABLE TRIGGER awa_unique_claim_ins

-- name: enable_unique_claim_trigger_jobs_hot
ALTER TABLE awa.jobs_hot ENABLE TRIGGER awa_unique_claim_ins

-- name: enable_unique_claim_trigger_scheduled_jobs
ALTER TABLE awa.scheduled_jobs ENABLE TRIGGER awa_unique_claim_ins

-- name: adopt_hot
-- A running attempt stays running with its last heartbeat (its claim time when it never beat),
-- so the heartbeat rescue takes it once that is stale.
INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
       heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
       unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
       callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
SELECT id, kind, queue, args, state::awa.job_state, priority, attempt, max_attempts, run_at,
       CASE WHEN state = 'running' THEN coalesce(heartbeat_at, attempted_at, now())
            ELSE heartbeat_at END,
       deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
       unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
       callback_on_fail, callback_transform, run_lease, progress
  FROM {stage}.jobs WHERE state NOT IN ('scheduled', 'retryable') ORDER BY id

-- name: adopt_deferred
INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, attempt, max_attempts,
       run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
       metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
       callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
       progress)
SELECT id, kind, queue, args, state::awa.job_state, priority, attempt, max_attempts, run_at,
       CASE WHEN state = 'running' THEN coalesce(heartbeat_at, attempted_at, now())
            ELSE heartbeat_at END,
       deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
       unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
       callback_on_fail, callback_transform, run_lease, progress
  FROM {stage}.jobs WHERE state IN ('scheduled', 'retryable') ORDER BY id

-- name: count_states
-- What was adopted, per state (and the DLQ).
SELECT state::text AS state, count(*) AS n FROM awa.jobs_hot GROUP BY state
UNION ALL
SELECT state::text, count(*) FROM awa.scheduled_jobs GROUP BY state
UNION ALL
SELECT 'dlq', count(*) FROM awa.dlq_entries HAVING count(*) > 0
