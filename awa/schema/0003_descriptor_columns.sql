-- Descriptor catalogue columns of awa-pg 0.6.9: when a descriptor was first and last
-- written, and how often its runtime re-publishes it (sync_interval_ms, NULL = unknown).
ALTER TABLE awa.queue_descriptors ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE awa.queue_descriptors ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE awa.queue_descriptors ADD COLUMN IF NOT EXISTS sync_interval_ms bigint;
ALTER TABLE awa.job_kind_descriptors ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE awa.job_kind_descriptors ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE awa.job_kind_descriptors ADD COLUMN IF NOT EXISTS sync_interval_ms bigint;
