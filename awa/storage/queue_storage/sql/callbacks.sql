-- Queue storage: the callbacks group's statements (awa/storage/queue_storage/callbacks.py),
-- by name.  A statement starts at a "-- name: <name>" line (awa.statements.named_statements
-- reads them); the layout's objects are spelled awa.<name> and moved by schema.in_schema.
-- Not here: materializing the attempt (execution.py's HEARTBEAT) and a callback's
-- resolution (execution.py's RESOLVE_CALLBACKS), the hot path's.

-- name: register_callback
-- The callback taken by the attempt's lease (materialized first by HEARTBEAT, the one way
-- a receipt becomes a lease).
UPDATE awa.leases SET
           callback_id = %(callback_id)s,
           callback_timeout_at = now() + make_interval(secs => %(timeout)s),
           callback_filter = %(filter)s, callback_on_complete = %(on_complete)s,
           callback_on_fail = %(on_fail)s, callback_transform = %(transform)s
 WHERE job_id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
RETURNING job_id

-- name: park_for_wait
-- Parked: the attempt's deadline no longer applies, the callback timeout does.
UPDATE awa.leases SET state = 'waiting_external', deadline_at = NULL
 WHERE job_id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
   AND callback_id = %(callback_id)s
RETURNING job_id

-- name: open_lease
-- The open attempt holding a callback id.
SELECT job_id, run_lease, attempt FROM awa.leases
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')

-- name: lock_open_lease
-- open_lease, locked.
SELECT job_id, run_lease, attempt FROM awa.leases
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
   FOR UPDATE

-- name: job
SELECT * FROM awa.jobs WHERE id = %(id)s

-- name: poll_wait
SELECT state::text AS state, run_lease, callback_id, metadata -> %(key)s::text AS result
  FROM awa.jobs WHERE id = %(job_id)s AND state NOT IN ('scheduled', 'retryable')

-- name: find_callback
SELECT job_id AS id, state::text AS state FROM awa.leases WHERE callback_id = %(callback_id)s
UNION ALL
SELECT id, state::text FROM awa.done_entries WHERE callback_id = %(callback_id)s
LIMIT 1

-- name: resume_external
WITH hit AS (
    UPDATE awa.leases
       SET state = 'running', heartbeat_at = now(), callback_id = NULL,
           callback_timeout_at = NULL, callback_filter = NULL, callback_on_complete = NULL,
           callback_on_fail = NULL, callback_transform = NULL
     WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
    RETURNING job_id, run_lease
), st AS (
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, metadata)
    SELECT job_id, run_lease, jsonb_build_object(%(key)s::text, %(result)s::jsonb) FROM hit
    ON CONFLICT (job_id, run_lease) DO UPDATE
       SET metadata = s.metadata || EXCLUDED.metadata, updated_at = now()
)
SELECT job_id, pg_notify(%(channel)s, job_id::text) FROM hit

-- name: heartbeat_callback
UPDATE awa.leases SET callback_timeout_at = now() + make_interval(secs => %(timeout)s)
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING job_id
