-- Queue storage: the awa.jobs view over both engines' tables, the engine-selection
-- function, and the view's INSTEAD OF triggers (writes through the view applied where the
-- row lives).  Installed after claim.sql (see procedures.FILES).

-- Terminal history as whole job rows, the one way to read done_entries' columns: a done
-- entry with no args of its own (a completion kept at one copy, layout.sql) takes them from
-- the ready entry it names, one index probe, made only when the args are read (a join
-- would read the entries for counts and pages too).
CREATE OR REPLACE VIEW awa.qs_done_rows AS
    SELECT d.id, d.kind, d.queue,
           COALESCE(d.args, (SELECT r.args FROM awa.ready_entries r
                              WHERE r.job_id = d.id AND r.ready_slot = d.ready_slot
                                AND r.ready_id = d.ready_id)) AS args,
           d.state, d.priority, d.attempt, d.max_attempts, d.run_at, d.heartbeat_at,
           d.deadline_at, d.attempted_at, d.finalized_at, d.created_at, d.errors, d.metadata,
           d.tags, d.unique_key, d.unique_states, d.callback_id, d.callback_timeout_at,
           d.callback_filter, d.callback_on_complete, d.callback_on_fail, d.callback_transform,
           d.run_lease, d.progress, d.claimed_by
      FROM awa.done_entries d;

-- The operator read surface: canonical rows plus every live queue-storage row.
-- Running attempts are the open receipts (awa.qs_open_receipts) and the leases.
CREATE OR REPLACE VIEW awa.jobs AS
    SELECT * FROM awa.jobs_hot
    UNION ALL
    SELECT * FROM awa.scheduled_jobs
    UNION ALL
    SELECT r.job_id AS id, r.kind, r.queue, r.args, 'available'::awa.job_state AS state,
           r.priority, r.attempt, r.max_attempts, r.run_at, NULL::timestamptz AS heartbeat_at,
           NULL::timestamptz AS deadline_at, r.attempted_at, NULL::timestamptz AS finalized_at,
           r.created_at, r.errors, r.metadata, r.tags, r.unique_key, r.unique_states,
           NULL::uuid AS callback_id, NULL::timestamptz AS callback_timeout_at,
           NULL::text AS callback_filter, NULL::text AS callback_on_complete,
           NULL::text AS callback_on_fail, NULL::text AS callback_transform,
           r.run_lease, r.progress, NULL::uuid AS claimed_by
      FROM awa.qs_ready_live r
    UNION ALL
    SELECT c.job_id, r.kind, r.queue, r.args, 'running'::awa.job_state, r.priority, c.attempt,
           r.max_attempts, r.run_at, c.claimed_at, c.deadline_at, c.claimed_at, NULL,
           r.created_at, r.errors, r.metadata || COALESCE(a.metadata, '{}'::jsonb), r.tags,
           r.unique_key, r.unique_states, NULL, NULL, NULL, NULL, NULL, NULL,
           c.run_lease, COALESCE(a.progress, r.progress), c.claimed_by
      FROM awa.qs_open_receipts c
      JOIN awa.ready_entries r
        ON r.job_id = c.job_id AND r.ready_slot = c.ready_slot AND r.ready_id = c.ready_id
      LEFT JOIN awa.attempt_state a ON a.job_id = c.job_id AND a.run_lease = c.run_lease
    UNION ALL
    SELECT l.job_id, r.kind, r.queue, r.args, l.state, r.priority, l.attempt, r.max_attempts,
           r.run_at, l.heartbeat_at, l.deadline_at, l.claimed_at, NULL, r.created_at, r.errors,
           r.metadata || COALESCE(a.metadata, '{}'::jsonb), r.tags, r.unique_key,
           r.unique_states, l.callback_id, l.callback_timeout_at, l.callback_filter,
           l.callback_on_complete, l.callback_on_fail, l.callback_transform, l.run_lease,
           COALESCE(a.progress, r.progress), l.claimed_by
      FROM awa.leases l
      JOIN awa.ready_entries r
        ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
      LEFT JOIN awa.attempt_state a ON a.job_id = l.job_id AND a.run_lease = l.run_lease
    UNION ALL
    SELECT * FROM awa.qs_done_rows
    UNION ALL
    SELECT * FROM awa.deferred_jobs;

-- Which engine serves this database, and where its tables are.
CREATE OR REPLACE FUNCTION awa.active_queue_storage_schema() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT schema_name FROM awa.runtime_storage_backends WHERE backend = 'queue_storage'
$$;
DELETE FROM awa.runtime_storage_backends WHERE backend <> 'queue_storage';
INSERT INTO awa.runtime_storage_backends (backend, schema_name)
SELECT 'queue_storage', n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = 'awa.queue_ring_state'::regclass
ON CONFLICT (backend) DO UPDATE SET schema_name = EXCLUDED.schema_name, updated_at = now();

CREATE INDEX IF NOT EXISTS idx_done_entries_callback ON awa.done_entries (callback_id)
    WHERE callback_id IS NOT NULL;

-- Writes through the awa.jobs view (awa-pg 0.6.9 compatibility: fixtures and
-- runbooks run `DELETE FROM awa.jobs ...` and `UPDATE awa.jobs SET ...`).
-- Rare, out-of-band operations, so they may do what the hot path never does:
-- an available job is tombstoned (under its lane's claim-head lock) and, when
-- updated, appended again with the new values; a running attempt is closed, or,
-- for a change that keeps it running (heartbeat_at, deadline_at, callback
-- columns, progress), materialized into a lease and that row updated; deferred
-- and terminal rows are deleted or updated in place.

-- End job p_id's live queue-storage row, wherever it is; false when it has none.
-- Remove what is live of a job; with p_state, only from where that state lives, so an
-- update read as one state does not remove the job from another it moved to meanwhile
-- (an available entry a claim took while the update waited for the lane lock: closing
-- that claim's receipt would leave its handler running while the update re-places the
-- job, to run again).
DROP FUNCTION IF EXISTS awa.qs_remove_live(bigint, text);
CREATE OR REPLACE FUNCTION awa.qs_remove_live(p_id bigint, p_reason text,
                                              p_state awa.job_state DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    found_any boolean := false;
BEGIN
    IF p_state IS NULL OR p_state = 'available' THEN
        FOR r IN SELECT DISTINCT e.queue, e.priority, e.shard FROM awa.qs_ready_live e
                  WHERE e.job_id = p_id LOOP
            PERFORM 1 FROM awa.queue_claim_heads h
             WHERE h.queue = r.queue AND h.priority = r.priority AND h.shard = r.shard
               FOR UPDATE;
        END LOOP;
        -- A new statement, a new snapshot: a claim that held the lane is seen.
        INSERT INTO awa.ready_tombstones (ready_slot, ready_id, job_id, reason)
        SELECT e.ready_slot, e.ready_id, e.job_id, p_reason FROM awa.qs_ready_live e
         WHERE e.job_id = p_id;
        found_any := FOUND;
    END IF;
    IF p_state IS NULL OR p_state IN ('running', 'waiting_external') THEN
        -- An open receipt (one at most) is closed; a concurrent closer wins or loses
        -- on the closure guard.
        INSERT INTO awa.lease_claim_closure_batches (claim_slot, receipt_ranges, outcome)
        SELECT c.claim_slot, int8multirange(int8range(c.receipt_id, c.receipt_id, '[]')),
               p_reason
          FROM awa.lease_claims c
          CROSS JOIN LATERAL awa.qs_receipt_is_open(c.claim_slot, c.job_id, c.run_lease,
                                                    c.receipt_id) o
         WHERE c.job_id = p_id AND o.is_open
         ORDER BY c.claim_slot
        ON CONFLICT DO NOTHING;
        found_any := found_any OR FOUND;
        DELETE FROM awa.leases WHERE job_id = p_id;
        found_any := found_any OR FOUND;
        DELETE FROM awa.attempt_state WHERE job_id = p_id;
    END IF;
    IF p_state IS NULL OR p_state IN ('scheduled', 'retryable') THEN
        DELETE FROM awa.deferred_jobs WHERE id = p_id AND (p_state IS NULL OR state = p_state);
        found_any := found_any OR FOUND;
    END IF;
    IF p_state IS NULL OR p_state IN ('completed', 'failed', 'cancelled') THEN
        DELETE FROM awa.done_entries WHERE id = p_id AND (p_state IS NULL OR state = p_state);
        found_any := found_any OR FOUND;
    END IF;
    RETURN found_any;
END $$;

-- Append one job to the end of its lane as an available entry; returns its id.  The
-- columns of a ready entry, as enqueue.APPEND_READY writes a batch of them: used by
-- awa.qs_place and by awa.qs_end_attempts (an attempt ending 'available', a fresh start).
-- Nothing of the job's unique claim: each caller keeps that itself.
CREATE OR REPLACE FUNCTION awa.qs_append_ready(p_id bigint, p_kind text, p_queue text, p_args jsonb, p_priority smallint, p_attempt smallint, p_max_attempts smallint, p_run_at timestamptz, p_attempted_at timestamptz, p_created_at timestamptz, p_errors jsonb[], p_metadata jsonb, p_tags text[], p_unique_key bytea, p_unique_states bit(8), p_run_lease bigint, p_progress jsonb) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    lane record;
BEGIN
    SELECT * INTO lane FROM awa.qs_reserve_lane(p_queue, p_priority);
    INSERT INTO awa.ready_entries (ready_slot, ready_id, job_id, queue, priority, shard,
                                   lane_seq, kind, args, attempt, max_attempts, run_at,
                                   attempted_at, created_at, errors, metadata, tags,
                                   unique_key, unique_states, run_lease, progress)
    VALUES (awa.qs_slot('queue'), nextval('awa.qs_ready_id_seq'), p_id, p_queue, p_priority,
            lane.lane_shard, lane.base, p_kind, p_args, p_attempt, p_max_attempts, p_run_at,
            p_attempted_at, p_created_at, p_errors, p_metadata, p_tags, p_unique_key,
            p_unique_states, p_run_lease, p_progress);
    RETURN p_id;
END $$;

-- Put a job row image where its state lives (available, deferred or terminal).
CREATE OR REPLACE FUNCTION awa.qs_place(j awa.jobs) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF j.state = 'available' THEN
        PERFORM awa.qs_append_ready(j.id, j.kind, j.queue, j.args, j.priority, j.attempt,
                                    j.max_attempts, j.run_at, j.attempted_at, j.created_at,
                                    j.errors, j.metadata, j.tags, j.unique_key,
                                    j.unique_states, j.run_lease, j.progress);
    ELSIF j.state IN ('scheduled', 'retryable') THEN
        INSERT INTO awa.deferred_jobs SELECT j.*;
    ELSIF j.state IN ('completed', 'failed', 'cancelled') THEN
        INSERT INTO awa.done_entries (ready_slot, id, kind, queue, args, state, priority, attempt,
                                      max_attempts, run_at, heartbeat_at, deadline_at,
                                      attempted_at, finalized_at, created_at, errors, metadata,
                                      tags, unique_key, unique_states, callback_id,
                                      callback_timeout_at, callback_filter,
                                      callback_on_complete, callback_on_fail,
                                      callback_transform, run_lease, progress)
        VALUES (awa.qs_slot('queue'), j.id, j.kind, j.queue, j.args, j.state, j.priority,
                j.attempt, j.max_attempts, j.run_at, j.heartbeat_at, j.deadline_at,
                j.attempted_at, COALESCE(j.finalized_at, now()), j.created_at, j.errors,
                j.metadata, j.tags, j.unique_key, j.unique_states, j.callback_id,
                j.callback_timeout_at, j.callback_filter, j.callback_on_complete,
                j.callback_on_fail, j.callback_transform, j.run_lease, j.progress);
    ELSE
        RAISE EXCEPTION 'awa.jobs on queue storage: a job can only be made running by a claim '
                        '(job %, state %)', j.id, j.state
              USING ERRCODE = 'feature_not_supported',
                    HINT = 'set state to available and let a worker claim it';
    END IF;
    -- The unique claim follows the new state.
    IF j.unique_key IS NOT NULL THEN
        IF awa.qs_in_mask(j.unique_states, j.state) THEN
            -- A key another job holds raises unique_violation, as on canonical.
            INSERT INTO awa.job_unique_claims (unique_key, job_id)
            SELECT j.unique_key, j.id
             WHERE NOT EXISTS (SELECT 1 FROM awa.job_unique_claims u
                                WHERE u.unique_key = j.unique_key AND u.job_id = j.id);
        ELSE
            DELETE FROM awa.job_unique_claims WHERE unique_key = j.unique_key AND job_id = j.id;
        END IF;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION awa.qs_jobs_view_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT awa.qs_remove_live(OLD.id, 'deleted') THEN
        RETURN NULL;
    END IF;
    DELETE FROM awa.job_unique_claims WHERE job_id = OLD.id;
    RETURN OLD;
END $$;

CREATE OR REPLACE FUNCTION awa.qs_jobs_view_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state IN ('running', 'waiting_external') AND NEW.state IN ('running', 'waiting_external')
       AND NEW.id = OLD.id AND NEW.run_lease = OLD.run_lease AND NEW.attempt = OLD.attempt THEN
        -- Still the same attempt: it lives on in a lease, materialized from its receipt
        -- first the one way a heartbeat does it (awa.qs_heartbeat: the receipt closed
        -- 'materialized', the lease written with the receipt's fields).  Nothing comes back
        -- when the attempt is no longer open (no receipt, or another closer won): the
        -- update then changes nothing.
        IF NOT EXISTS (SELECT 1 FROM awa.leases l
                        WHERE l.job_id = OLD.id AND l.run_lease = OLD.run_lease) THEN
            IF NOT EXISTS (SELECT 1 FROM awa.qs_heartbeat(
                               ARRAY[OLD.id], ARRAY[OLD.run_lease], '{NULL}', '{NULL}',
                               '{NULL}', '{NULL}', '{NULL}') AS h(id)
                            WHERE h.id = OLD.id) THEN
                RETURN NULL;
            END IF;
        END IF;
        UPDATE awa.leases
           SET state = NEW.state, heartbeat_at = COALESCE(NEW.heartbeat_at, heartbeat_at),
               deadline_at = NEW.deadline_at, callback_id = NEW.callback_id,
               callback_timeout_at = NEW.callback_timeout_at,
               callback_filter = NEW.callback_filter,
               callback_on_complete = NEW.callback_on_complete,
               callback_on_fail = NEW.callback_on_fail,
               callback_transform = NEW.callback_transform
         WHERE job_id = OLD.id AND run_lease = OLD.run_lease;
        IF NEW.progress IS DISTINCT FROM OLD.progress OR NEW.metadata IS DISTINCT FROM OLD.metadata
        THEN
            INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, metadata)
            VALUES (OLD.id, OLD.run_lease, NEW.progress, NEW.metadata)
            ON CONFLICT (job_id, run_lease) DO UPDATE
               SET progress = EXCLUDED.progress, metadata = EXCLUDED.metadata,
                   updated_at = now();
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.state = NEW.state AND OLD.state IN ('scheduled', 'retryable') AND NEW.id = OLD.id THEN
        UPDATE awa.deferred_jobs d SET (kind, queue, args, priority, attempt, max_attempts,
                                        run_at, heartbeat_at, deadline_at, attempted_at,
                                        finalized_at, created_at, errors, metadata, tags,
                                        unique_key, unique_states, callback_id,
                                        callback_timeout_at, callback_filter,
                                        callback_on_complete, callback_on_fail,
                                        callback_transform, run_lease, progress)
             = (NEW.kind, NEW.queue, NEW.args, NEW.priority, NEW.attempt, NEW.max_attempts,
                NEW.run_at, NEW.heartbeat_at, NEW.deadline_at, NEW.attempted_at,
                NEW.finalized_at, NEW.created_at, NEW.errors, NEW.metadata, NEW.tags,
                NEW.unique_key, NEW.unique_states, NEW.callback_id, NEW.callback_timeout_at,
                NEW.callback_filter, NEW.callback_on_complete, NEW.callback_on_fail,
                NEW.callback_transform, NEW.run_lease, NEW.progress)
         WHERE d.id = OLD.id;
        RETURN CASE WHEN FOUND THEN NEW END;
    END IF;
    IF NEW.state = 'running' OR NEW.state = 'waiting_external' THEN
        PERFORM awa.qs_place(NEW);  -- raises: only a claim starts an attempt
    END IF;
    IF NOT awa.qs_remove_live(OLD.id, 'updated', OLD.state) THEN
        RETURN NULL;
    END IF;
    IF OLD.unique_key IS NOT NULL THEN
        DELETE FROM awa.job_unique_claims WHERE unique_key = OLD.unique_key AND job_id = OLD.id;
    END IF;
    PERFORM awa.qs_place(NEW);
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS awa_jobs_view_delete ON awa.jobs;
CREATE TRIGGER awa_jobs_view_delete INSTEAD OF DELETE ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.qs_jobs_view_delete();
DROP TRIGGER IF EXISTS awa_jobs_view_update ON awa.jobs;
CREATE TRIGGER awa_jobs_view_update INSTEAD OF UPDATE ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.qs_jobs_view_update();
