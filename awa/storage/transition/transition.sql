-- The live switch of engines (awa/storage/transition): every statement it sends, by name.
-- A section starts with a "-- name: <name>" line; awa.storage.transition.sql.load reads them.

-- name: has_table
SELECT to_regclass('awa.storage_transition') IS NOT NULL AS present

-- name: read_state
SELECT state, prepared_engine, prepared_schema, transition_epoch, details, entered_at,
       updated_at, finalized_at,
       extract(epoch FROM now() - entered_at)::float8 AS in_state_s
  FROM awa.storage_transition

-- name: lock_state
SELECT state, prepared_engine, prepared_schema, transition_epoch, details, entered_at,
       updated_at, finalized_at,
       extract(epoch FROM now() - entered_at)::float8 AS in_state_s
  FROM awa.storage_transition FOR UPDATE

-- name: set_state
UPDATE awa.storage_transition
   SET state = %(state)s,
       prepared_engine = %(prepared_engine)s,
       prepared_schema = %(prepared_schema)s,
       transition_epoch = transition_epoch + 1,
       details = details || %(details)s::jsonb,
       entered_at = now(),
       updated_at = now(),
       finalized_at = CASE WHEN %(state)s = 'active' THEN now() ELSE NULL END

-- name: activate_if_canonical
UPDATE awa.storage_transition
   SET state = 'active', prepared_engine = 'queue_storage', prepared_schema = %(schema)s,
       transition_epoch = transition_epoch + 1, entered_at = now(), updated_at = now(),
       finalized_at = now()
 WHERE state = 'canonical'

-- name: canonical_backlog
SELECT (SELECT count(*) FROM awa.jobs_hot WHERE state = 'available') AS available,
       (SELECT count(*) FROM awa.jobs_hot WHERE state = 'running') AS running,
       (SELECT count(*) FROM awa.jobs_hot WHERE state = 'waiting_external') AS waiting_external,
       (SELECT count(*) FROM awa.scheduled_jobs WHERE state = 'scheduled') AS scheduled,
       (SELECT count(*) FROM awa.scheduled_jobs WHERE state = 'retryable') AS retryable

-- name: lock_canonical
LOCK TABLE awa.jobs_hot, awa.scheduled_jobs IN SHARE MODE

-- name: queue_storage_backlog
-- The queue-storage layout's awa.jobs view covers both engines' tables; its live jobs less
-- canonical's, in one snapshot, are queue storage's.
SELECT (SELECT count(*) FROM awa.jobs
         WHERE state IN ('available', 'running', 'waiting_external', 'scheduled', 'retryable'))
     - (SELECT count(*) FROM awa.jobs_hot
         WHERE state IN ('available', 'running', 'waiting_external'))
     - (SELECT count(*) FROM awa.scheduled_jobs) AS backlog

-- name: lock_queue_storage
LOCK TABLE awa.ready_entries, awa.deferred_jobs IN SHARE MODE

-- name: queue_storage_ready
SELECT to_regclass(%(ring_state)s) IS NOT NULL
   AND to_regprocedure('awa.qs_layout_version()') IS NOT NULL AS ready

-- name: live_capabilities
-- Live runtimes (the ops rule: a snapshot within OPS_RUNTIME_LIVE_FACTOR of its own interval,
-- never under OPS_RUNTIME_LIVE_MIN_S) by what they can do in a transition: a release before
-- the transition (schema version below it) is "canonical", it knows one engine only.
SELECT CASE WHEN coalesce(schema_version, 0) < %(aware)s THEN 'canonical'
            WHEN transition_role = 'canonical_drain' THEN 'canonical_drain_only'
            ELSE 'queue_storage' END AS capability,
       coalesce(transition_role, 'auto') AS role,
       hostname, pid, version
  FROM awa.runtime_instances
 WHERE last_seen_at > now() - make_interval(secs => greatest(
           %(factor)s * snapshot_interval_ms / 1000.0, %(min_s)s))
   AND NOT shutting_down
 ORDER BY hostname, pid

-- name: record_role
UPDATE awa.runtime_instances SET transition_role = %(role)s
 WHERE instance_id = %(instance_id)s AND transition_role IS DISTINCT FROM %(role)s

-- name: unname_others_than_queue_storage
-- What queue storage's install does (jobs_view.sql): the backend names its schema, and
-- awa.active_queue_storage_schema() from now on says queue storage serves the database.
DELETE FROM awa.runtime_storage_backends WHERE backend <> 'queue_storage'

-- name: name_queue_storage
INSERT INTO awa.runtime_storage_backends (backend, schema_name)
VALUES ('queue_storage', %(schema)s)
ON CONFLICT (backend) DO UPDATE SET schema_name = EXCLUDED.schema_name, updated_at = now()

-- name: unname_others_than_canonical
DELETE FROM awa.runtime_storage_backends WHERE backend <> 'canonical'

-- name: name_canonical
INSERT INTO awa.runtime_storage_backends (backend, schema_name)
VALUES ('canonical', 'awa')
ON CONFLICT (backend) DO UPDATE SET updated_at = now()
