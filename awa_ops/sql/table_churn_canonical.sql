-- The guide's table-churn query over the canonical engine's queue tables.
SELECT
    relname,
    n_live_tup,
    n_dead_tup,
    vacuum_count,
    autovacuum_count,
    last_vacuum,
    last_autovacuum
FROM pg_stat_user_tables
WHERE schemaname = '<schema>'
  AND (
      relname = 'jobs_hot'
      OR relname = 'scheduled_jobs'
      OR relname = 'job_unique_claims'
      OR relname = 'dlq_entries'
      OR relname = 'runtime_instances'
  )
ORDER BY n_dead_tup DESC, relname;
