-- 0004: who runs what.  The runtime instance (awa.runtime_instances.instance_id) that
-- claimed a job's current (or, once it ended in place, its last) attempt, set by the claim.
-- NULL for rows claimed before this migration and for jobs never claimed.
--
-- awa.jobs exposes it as its last column.  On a queue-storage database the view is
-- replaced by awa/storage/queue_storage/sql/jobs_view.sql, laid out again right after the migrations
-- (awa.storage.migrate), which adds the same column to its own tables; until then the
-- view keeps its old column list (adding a column to a table under `SELECT *` leaves an
-- existing view valid).
ALTER TABLE awa.jobs_hot ADD COLUMN IF NOT EXISTS claimed_by uuid;
ALTER TABLE awa.scheduled_jobs ADD COLUMN IF NOT EXISTS claimed_by uuid;

DO $$ BEGIN
    IF to_regprocedure('awa.active_queue_storage_schema()') IS NULL THEN
        CREATE OR REPLACE VIEW awa.jobs AS
            SELECT * FROM awa.jobs_hot
            UNION ALL
            SELECT * FROM awa.scheduled_jobs;
    END IF;
END $$;
