-- Canonical engine: the cron-admin group (awa/storage/canonical/cron_admin.py) by name. Each
-- statement follows its name line and is whole, as it is sent (awa.statements.named_statements
-- reads them, once, at import).

-- name: trigger_cron_job
-- A run of a stored schedule now, inserted into awa.jobs_hot.
INSERT INTO awa.jobs_hot (kind, queue, args, state, priority, max_attempts, metadata, tags)
SELECT kind, queue, args, 'available', priority, max_attempts,
       metadata || jsonb_build_object('cron_name', name, 'cron_triggered_at', now()), tags
  FROM awa.cron_jobs
 WHERE name = %(name)s
RETURNING *
