-- Canonical engine: the callbacks group (awa/storage/canonical/callbacks.py) by name. Each
-- statement follows its name line and is whole, as it is sent (awa.statements.named_statements
-- reads them, once, at import).
--
-- A callback lives on its job's row in awa.jobs_hot (callback_* columns). Every resolution
-- matches callback_id AND an open state (running or waiting_external) in one statement, so a
-- second or late resolution matches nothing. Resume and retry clear the callback columns (the
-- callback is spent); complete and fail keep them as a record.

-- name: register_callback
UPDATE awa.jobs_hot
   SET callback_id = %(callback_id)s,
       callback_timeout_at = now() + make_interval(secs => %(timeout)s),
       callback_filter = %(filter)s,
       callback_on_complete = %(on_complete)s,
       callback_on_fail = %(on_fail)s,
       callback_transform = %(transform)s
 WHERE id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
RETURNING id

-- name: park_for_wait
-- Parked: the attempt's deadline no longer applies, the callback timeout does.
UPDATE awa.jobs_hot SET state = 'waiting_external', deadline_at = NULL
 WHERE id = %(job_id)s AND run_lease = %(run_lease)s AND state = 'running'
   AND callback_id = %(callback_id)s
RETURNING id

-- name: poll_wait
SELECT state::text AS state, run_lease, callback_id, metadata -> %(key)s::text AS result
  FROM awa.jobs_hot WHERE id = %(job_id)s

-- name: complete_external
UPDATE awa.jobs_hot
   SET state = 'completed', finalized_at = now(), callback_timeout_at = NULL, progress = NULL,
       metadata = metadata || jsonb_build_object(%(key)s::text, %(result)s::jsonb)
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *

-- name: fail_external
UPDATE awa.jobs_hot
   SET state = 'failed', finalized_at = now(), callback_timeout_at = NULL,
       errors = array_append(COALESCE(errors, '{}'::jsonb[]),
                             %(entry)s::jsonb || jsonb_build_object('attempt', attempt))
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *

-- name: retry_external
UPDATE awa.jobs_hot
   SET state = 'available', attempt = 0, run_at = now(), heartbeat_at = NULL,
       deadline_at = NULL, finalized_at = NULL,
       callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
       callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *

-- name: notify_queue
-- An in-place update to 'available' is not an INSERT (whose trigger notifies), so the queue's
-- dispatchers are woken explicitly (at commit) after retry_external.
SELECT pg_notify(%s, '')

-- name: resume_external
WITH resolved AS (
    UPDATE awa.jobs_hot
       SET state = 'running', heartbeat_at = now(),
           metadata = metadata || jsonb_build_object(%(key)s::text, %(result)s::jsonb),
           callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
           callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
     WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
    RETURNING *)
SELECT resolved.*, pg_notify(%(channel)s, resolved.id::text) FROM resolved

-- name: heartbeat_callback
UPDATE awa.jobs_hot
   SET callback_timeout_at = now() + make_interval(secs => %(timeout)s)
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
RETURNING *

-- name: lock_open_callback
SELECT * FROM awa.jobs_hot
 WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
   FOR UPDATE

-- name: find_callback
SELECT id, state::text AS state FROM awa.jobs_hot WHERE callback_id = %(callback_id)s
