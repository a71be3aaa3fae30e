-- The engine-neutral core: retention and descriptors (awa/storage/common/maintenance.py),
-- by name, on the tables every layout shares and
-- the awa.jobs view.  A statement starts at a "-- name: <name>" line
-- (awa.statements.named_statements reads them).

-- name: delete_dlq_default
-- Retention: one bounded batch each; the caller loops a bounded number of times.
-- Per-queue overrides run as their own statements; the default statement skips the
-- overridden queues.
DELETE FROM awa.dlq_entries
 WHERE job_id IN (
    SELECT job_id FROM awa.dlq_entries
     WHERE dlq_at < now() - make_interval(secs => %(age_s)s) AND queue <>
            ALL(%(excluded_queues)s::text[])
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED)
RETURNING queue

-- name: delete_dlq_queue
DELETE FROM awa.dlq_entries
 WHERE job_id IN (
    SELECT job_id FROM awa.dlq_entries
     WHERE dlq_at < now() - make_interval(secs => %(age_s)s) AND queue = %(queue)s
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED)
RETURNING queue

-- name: delete_unseen_runtimes
DELETE FROM awa.runtime_instances
 WHERE instance_id IN (
    SELECT instance_id FROM awa.runtime_instances
     WHERE last_seen_at < now() - make_interval(secs => %(age_s)s)
     LIMIT %(limit)s)

-- name: delete_unseen_queue_descriptors
DELETE FROM awa.queue_descriptors
 WHERE queue IN (
    SELECT queue FROM awa.queue_descriptors
     WHERE last_seen_at < now() - make_interval(secs => %(age_s)s)
     LIMIT %(limit)s)

-- name: delete_unseen_kind_descriptors
DELETE FROM awa.job_kind_descriptors
 WHERE kind IN (
    SELECT kind FROM awa.job_kind_descriptors
     WHERE last_seen_at < now() - make_interval(secs => %(age_s)s)
     LIMIT %(limit)s)

-- name: upsert_queue_descriptors
-- The declared descriptors of one catalogue table, inserted or refreshed (updated_at moves
-- only when the descriptor changed, as in awa-pg 0.6.9).
INSERT INTO awa.queue_descriptors (queue, display_name, description, owner, docs_url, tags,
    extra, descriptor_hash, sync_interval_ms, last_seen_at)
SELECT name, display_name, description, owner, docs_url, coalesce(tags, '{}'),
       coalesce(extra, '{}'), descriptor_hash, sync_interval_ms, now()
  FROM jsonb_to_recordset(%(descriptors)s::jsonb) AS t(name text, display_name text,
       description text, owner text, docs_url text, tags text[], extra jsonb,
       descriptor_hash text, sync_interval_ms bigint)
ON CONFLICT (queue) DO UPDATE
   SET display_name = EXCLUDED.display_name, description = EXCLUDED.description,
       owner = EXCLUDED.owner, docs_url = EXCLUDED.docs_url, tags = EXCLUDED.tags,
       extra = EXCLUDED.extra, descriptor_hash = EXCLUDED.descriptor_hash,
       sync_interval_ms = EXCLUDED.sync_interval_ms,
       updated_at = CASE WHEN awa.queue_descriptors.descriptor_hash IS DISTINCT FROM
              EXCLUDED.descriptor_hash
                         THEN now() ELSE awa.queue_descriptors.updated_at END,
       last_seen_at = now()

-- name: upsert_kind_descriptors
INSERT INTO awa.job_kind_descriptors (kind, display_name, description, owner, docs_url, tags,
    extra, descriptor_hash, sync_interval_ms, last_seen_at)
SELECT name, display_name, description, owner, docs_url, coalesce(tags, '{}'),
       coalesce(extra, '{}'), descriptor_hash, sync_interval_ms, now()
  FROM jsonb_to_recordset(%(descriptors)s::jsonb) AS t(name text, display_name text,
       description text, owner text, docs_url text, tags text[], extra jsonb,
       descriptor_hash text, sync_interval_ms bigint)
ON CONFLICT (kind) DO UPDATE
   SET display_name = EXCLUDED.display_name, description = EXCLUDED.description,
       owner = EXCLUDED.owner, docs_url = EXCLUDED.docs_url, tags = EXCLUDED.tags,
       extra = EXCLUDED.extra, descriptor_hash = EXCLUDED.descriptor_hash,
       sync_interval_ms = EXCLUDED.sync_interval_ms,
       updated_at = CASE WHEN awa.job_kind_descriptors.descriptor_hash IS DISTINCT FROM
              EXCLUDED.descriptor_hash
                         THEN now() ELSE awa.job_kind_descriptors.updated_at END,
       last_seen_at = now()

-- name: set_runtime_descriptor_hashes
UPDATE awa.runtime_instances
   SET descriptor_hashes = %(hashes)s::jsonb
 WHERE instance_id = %(instance_id)s
   AND descriptor_hashes IS DISTINCT FROM %(hashes)s::jsonb
