-- Queue storage: `awa adopt`'s statements (awa/storage/queue_storage/adopt.py), by name.
-- A statement starts at a "-- name: <name>" line (awa.statements.named_statements reads
-- them).  {stage} is the staging schema, an identifier adopt.py fills in as every adopter
-- does (awa.storage.common.adopt.staged); adoption lays queue storage out in schema awa.

-- name: attempt_queues
-- Queues holding running / waiting attempts, each placed and claimed before anything
-- else of that queue is placed (so the claim takes exactly those).
SELECT queue, array_agg(id ORDER BY id) AS ids FROM {stage}.jobs
 WHERE state IN ('running', 'waiting_external') GROUP BY queue ORDER BY queue

-- name: place_for_claim
-- A staged attempt placed as the available job its claim then takes.
SELECT awa.qs_place(jsonb_populate_record(NULL::awa.jobs, to_jsonb(s) - 'source' || jsonb_build_object(
    'state', 'available', 'attempt', s.attempt - 1, 'run_lease', s.run_lease - 1,
    'heartbeat_at', NULL, 'deadline_at', NULL, 'callback_id', NULL,
    'callback_timeout_at', NULL))) FROM {stage}.jobs s WHERE s.id = ANY(%(ids)s) ORDER BY s.id

-- name: restore_attempt
-- The same attempt, as the Rust core left it: last heartbeat, deadline, state, callback.
UPDATE awa.jobs j
   SET state = s.state::awa.job_state, heartbeat_at = s.heartbeat_at,
       deadline_at = coalesce(s.deadline_at, j.deadline_at), callback_id = s.callback_id,
       callback_timeout_at = s.callback_timeout_at, callback_filter = s.callback_filter,
       callback_on_complete = s.callback_on_complete, callback_on_fail = s.callback_on_fail,
       callback_transform = s.callback_transform, progress = s.progress,
       metadata = s.metadata
  FROM {stage}.jobs s
 WHERE j.id = s.id AND s.id = ANY(%(ids)s)

-- name: place_rest
-- Every other staged job, as it is.
SELECT awa.qs_place(jsonb_populate_record(NULL::awa.jobs, to_jsonb(s) - 'source'))
  FROM {stage}.jobs s WHERE s.state NOT IN ('running', 'waiting_external') ORDER BY s.id

-- name: count_states
SELECT state::text AS state, count(*) AS n FROM awa.jobs GROUP BY state
UNION ALL
SELECT 'dlq', count(*) FROM awa.dlq_entries HAVING count(*) > 0
