-- The REST API's queue and kind descriptors: every stored field, and how old each is.
SELECT 'queue' AS type, queue AS key, display_name, description, owner, docs_url, tags, extra,
       descriptor_hash, last_seen_at, sync_interval_ms,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8 AS age_s
  FROM awa.queue_descriptors
UNION ALL
SELECT 'kind', kind, display_name, description, owner, docs_url, tags, extra,
       descriptor_hash, last_seen_at, sync_interval_ms,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8
  FROM awa.job_kind_descriptors
ORDER BY 1, 2;
