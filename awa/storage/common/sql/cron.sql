-- The engine-neutral core: stored cron schedules (awa/storage/common/cron.py),
-- by name, on the tables every layout shares and
-- the awa.jobs view.  A statement starts at a "-- name: <name>" line
-- (awa.statements.named_statements reads them).

-- name: upsert_cron_jobs
-- Declared schedules, upserted: last_enqueued_at and the pause state are kept, so a
-- redeploy neither re-fires a slot nor resumes a paused schedule.
INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, args, priority,
                           max_attempts, tags, metadata, missed_fire_policy)
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
       metadata, missed_fire_policy
  FROM jsonb_to_recordset(%(schedules)s::jsonb) AS t(
       name text, cron_expr text, timezone text, kind text, queue text, args jsonb,
       priority smallint, max_attempts smallint, tags text[], metadata jsonb,
       missed_fire_policy text)
ON CONFLICT (name) DO UPDATE
   SET cron_expr = EXCLUDED.cron_expr, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
       queue = EXCLUDED.queue, args = EXCLUDED.args, priority = EXCLUDED.priority,
       max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags,
       metadata = EXCLUDED.metadata, missed_fire_policy = EXCLUDED.missed_fire_policy,
       updated_at = now()
 WHERE (awa.cron_jobs.cron_expr, awa.cron_jobs.timezone, awa.cron_jobs.kind,
        awa.cron_jobs.queue, awa.cron_jobs.args, awa.cron_jobs.priority,
        awa.cron_jobs.max_attempts, awa.cron_jobs.tags, awa.cron_jobs.metadata,
        awa.cron_jobs.missed_fire_policy)
       IS DISTINCT FROM
       (EXCLUDED.cron_expr, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.args,
        EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags, EXCLUDED.metadata,
        EXCLUDED.missed_fire_policy)

-- name: list_cron_jobs
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs
 ORDER BY name

-- name: get_cron_job
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs
 WHERE name = %(name)s

-- name: delete_cron_job
DELETE FROM awa.cron_jobs WHERE name = %(name)s RETURNING name

-- name: pause_cron_job
UPDATE awa.cron_jobs
   SET paused_at = coalesce(paused_at, now()), paused_by = %(paused_by)s, updated_at = now()
 WHERE name = %(name)s
RETURNING name

-- name: resume_cron_job
UPDATE awa.cron_jobs
   SET paused_at = NULL, paused_by = NULL, updated_at = now()
 WHERE name = %(name)s
RETURNING name

-- name: select_active_cron_jobs
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
       metadata, missed_fire_policy, last_enqueued_at, created_at, now() AS db_now
  FROM awa.cron_jobs
 WHERE paused_at IS NULL
 ORDER BY name

-- name: advance_cron_job
-- The maintenance leader's compare-and-set, before its engine inserts the runs.
UPDATE awa.cron_jobs
   SET last_enqueued_at = %(slot)s, updated_at = now()
 WHERE name = %(name)s
   AND paused_at IS NULL
   AND last_enqueued_at IS NOT DISTINCT FROM %(previous)s
RETURNING name
