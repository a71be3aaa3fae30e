-- Canonical engine: the change a durable batch operation makes
-- (awa/storage/canonical/batch_operations.py) by name, one statement per table: available jobs
-- in jobs_hot, scheduled ones in scheduled_jobs. Each statement follows its name line and is
-- whole, as it is sent (awa.statements.named_statements reads them, once, at import).
--
-- The change is made on the canonical tables directly (not through the awa.jobs view, whose
-- INSTEAD OF trigger writes back the row it read: a claim committed in between would be
-- overwritten). A direct UPDATE re-checks its WHERE on the row it locks, so a job a claim took
-- meanwhile is left alone; claimers skip the rows it holds (SKIP LOCKED). The metadata keys are
-- common.batch_operations.ORIGINAL_PRIORITY_KEY and ORIGINAL_QUEUE_KEY.

-- name: set_priority_available
-- set_priority; the original priority is recorded the first time.
UPDATE awa.jobs_hot j
   SET priority = %(priority)s::smallint,
       metadata = CASE WHEN j.metadata ? '_awa_original_priority' THEN j.metadata
                       ELSE j.metadata || jsonb_build_object('_awa_original_priority',
                                                             j.priority) END
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'available'
   AND j.priority <> %(priority)s::smallint
RETURNING j.id

-- name: set_priority_scheduled
UPDATE awa.scheduled_jobs j
   SET priority = %(priority)s::smallint,
       metadata = CASE WHEN j.metadata ? '_awa_original_priority' THEN j.metadata
                       ELSE j.metadata || jsonb_build_object('_awa_original_priority',
                                                             j.priority) END
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'scheduled'
   AND j.priority <> %(priority)s::smallint
RETURNING j.id

-- name: move_queue_available
-- move_queue (and the priority, when given); the originals are recorded the first time.
UPDATE awa.jobs_hot j
   SET queue = %(queue)s::text,
       priority = COALESCE(%(priority)s::smallint, j.priority),
       metadata = j.metadata
           || CASE WHEN j.metadata ? '_awa_original_queue' OR j.queue = %(queue)s::text
                   THEN '{}'::jsonb
                   ELSE jsonb_build_object('_awa_original_queue', j.queue) END
           || CASE WHEN %(priority)s::smallint IS NULL OR j.priority = %(priority)s::smallint
                        OR j.metadata ? '_awa_original_priority'
                   THEN '{}'::jsonb
                   ELSE jsonb_build_object('_awa_original_priority', j.priority) END
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'available'
   AND (j.queue <> %(queue)s::text
        OR (%(priority)s::smallint IS NOT NULL AND j.priority <> %(priority)s::smallint))
RETURNING j.id

-- name: move_queue_scheduled
UPDATE awa.scheduled_jobs j
   SET queue = %(queue)s::text,
       priority = COALESCE(%(priority)s::smallint, j.priority),
       metadata = j.metadata
           || CASE WHEN j.metadata ? '_awa_original_queue' OR j.queue = %(queue)s::text
                   THEN '{}'::jsonb
                   ELSE jsonb_build_object('_awa_original_queue', j.queue) END
           || CASE WHEN %(priority)s::smallint IS NULL OR j.priority = %(priority)s::smallint
                        OR j.metadata ? '_awa_original_priority'
                   THEN '{}'::jsonb
                   ELSE jsonb_build_object('_awa_original_priority', j.priority) END
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'scheduled'
   AND (j.queue <> %(queue)s::text
        OR (%(priority)s::smallint IS NOT NULL AND j.priority <> %(priority)s::smallint))
RETURNING j.id
