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
      relname = 'attempt_state'
      OR relname = 'deferred_jobs'
      OR relname = 'dlq_entries'
      OR relname LIKE 'ready_segments_%'
      OR relname LIKE 'ready_entries%'
      OR relname LIKE 'ready_tombstones%'
      OR relname LIKE 'done_entries%'
      OR relname LIKE 'queue_terminal_count_deltas%'
      OR relname LIKE 'leases%'
  )
ORDER BY n_dead_tup DESC, relname;
