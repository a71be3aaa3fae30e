-- The queue-storage engine (DESIGN §10): append-only, vacuum-aware job storage.
--
-- Installed on top of the canonical migrations by
-- awa.storage.queue_storage.install_queue_storage(); idempotent.  Not a
-- numbered migration: a plain `awa migrate` keeps installing canonical.
--
-- The property: no hot-path step updates or deletes a row that is read again.
--   enqueue   appends ready_entries (lane position from a per-lane enqueue head)
--   claim     appends a lease_claims receipt, advances the per-lane claim head
--   finish    appends a lease_claim_closures row and a done_entries row
--             (deferred_jobs / dlq_entries for retry, snooze, dead letter)
--   long run  the first heartbeat / callback registration materializes the
--             attempt into leases (its receipt closed 'materialized');
--             progress and metadata patches live in attempt_state
-- A job's state is where its newest live row is; awa.jobs shows it.
-- History lives in ring partitions (queue ring: ready/done/tombstones; claim
-- ring: receipts/closures; lease ring: leases) reclaimed by TRUNCATE.

-- Ring control: which slot of each ring new rows go to.
CREATE TABLE IF NOT EXISTS awa.queue_ring_state (
    ring         text PRIMARY KEY,
    current_slot smallint NOT NULL DEFAULT 0,
    slot_count   smallint NOT NULL,
    generation   bigint NOT NULL DEFAULT 0,
    rotated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_ring_state_ring_check CHECK (ring IN ('queue', 'claim', 'lease'))
);
INSERT INTO awa.queue_ring_state (ring, slot_count)
VALUES ('queue', 4), ('claim', 4), ('lease', 4)
ON CONFLICT (ring) DO NOTHING;

CREATE OR REPLACE FUNCTION awa.qs_slot(p_ring text) RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT current_slot FROM awa.queue_ring_state WHERE ring = p_ring
$$;

-- A state inside a unique_states mask (NULL mask: never).
CREATE OR REPLACE FUNCTION awa.qs_in_mask(mask bit(8), s awa.job_state) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT mask IS NOT NULL AND get_bit(mask, awa.state_bit(s)) = 1
$$;

CREATE SEQUENCE IF NOT EXISTS awa.qs_ready_id_seq;
CREATE SEQUENCE IF NOT EXISTS awa.qs_receipt_id_seq;

-- Per-lane heads.  A lane is (queue, priority, shard); shards come from
-- queue_meta.enqueue_shards.  The enqueue head row is locked by the producer
-- until commit, so lane positions become visible in order (no gaps a claimer
-- could skip); the claim head is locked only while one claim runs.
CREATE TABLE IF NOT EXISTS awa.queue_enqueue_heads (
    queue    text NOT NULL,
    priority smallint NOT NULL,
    shard    smallint NOT NULL DEFAULT 0,
    next_seq bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, priority, shard)
) WITH (fillfactor = 20);
CREATE TABLE IF NOT EXISTS awa.queue_claim_heads (
    queue     text NOT NULL,
    priority  smallint NOT NULL,
    shard     smallint NOT NULL DEFAULT 0,
    claim_seq bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, priority, shard)
) WITH (fillfactor = 20);
-- The highest lane position ever claimed: rows past it need no receipt probe
-- (in FIFO order it is claim_seq - 1 and the claim probes nothing).
ALTER TABLE awa.queue_claim_heads ADD COLUMN IF NOT EXISTS claimed_max bigint NOT NULL DEFAULT -1;

-- Runnable jobs, appended; never updated.  Everything below the lane's
-- claim_seq is claimed or tombstoned.
CREATE TABLE IF NOT EXISTS awa.ready_entries (
    ready_slot    smallint NOT NULL,
    ready_id      bigint NOT NULL,
    job_id        bigint NOT NULL,
    queue         text NOT NULL,
    priority      smallint NOT NULL,
    shard         smallint NOT NULL DEFAULT 0,
    lane_seq      bigint NOT NULL,
    kind          text NOT NULL,
    args          jsonb NOT NULL,
    attempt       smallint NOT NULL DEFAULT 0,
    max_attempts  smallint NOT NULL,
    run_at        timestamptz NOT NULL,
    attempted_at  timestamptz,
    created_at    timestamptz NOT NULL,
    errors        jsonb[],
    metadata      jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags          text[] NOT NULL DEFAULT '{}',
    unique_key    bytea,
    unique_states bit(8),
    run_lease     bigint NOT NULL DEFAULT 0,
    progress      jsonb,
    enqueued_at   timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (ready_slot);

-- Rare out-of-band removals of a ready entry (admin cancel, drain).
CREATE TABLE IF NOT EXISTS awa.ready_tombstones (
    ready_slot smallint NOT NULL,
    ready_id   bigint NOT NULL,
    job_id     bigint NOT NULL,
    reason     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (ready_slot);

-- Terminal history (completed, failed, cancelled), rotated with the queue ring.
CREATE TABLE IF NOT EXISTS awa.done_entries (
    ready_slot           smallint NOT NULL,
    id                   bigint NOT NULL,
    kind                 text NOT NULL,
    queue                text NOT NULL,
    args                 jsonb NOT NULL,
    state                awa.job_state NOT NULL,
    priority             smallint NOT NULL,
    attempt              smallint NOT NULL,
    max_attempts         smallint NOT NULL,
    run_at               timestamptz NOT NULL,
    heartbeat_at         timestamptz,
    deadline_at          timestamptz,
    attempted_at         timestamptz,
    finalized_at         timestamptz NOT NULL,
    created_at           timestamptz NOT NULL,
    errors               jsonb[],
    metadata             jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags                 text[] NOT NULL DEFAULT '{}',
    unique_key           bytea,
    unique_states        bit(8),
    callback_id          uuid,
    callback_timeout_at  timestamptz,
    callback_filter      text,
    callback_on_complete text,
    callback_on_fail     text,
    callback_transform   text,
    run_lease            bigint NOT NULL,
    progress             jsonb,
    CONSTRAINT done_entries_state_check CHECK (state IN ('completed', 'failed', 'cancelled'))
) PARTITION BY LIST (ready_slot);

-- Scheduled and retryable jobs: a row per job, deleted on promotion.
CREATE TABLE IF NOT EXISTS awa.deferred_jobs (
    LIKE awa.scheduled_jobs INCLUDING DEFAULTS,
    PRIMARY KEY (id),
    CONSTRAINT deferred_jobs_state_check CHECK (state IN ('scheduled', 'retryable'))
);
CREATE INDEX IF NOT EXISTS idx_deferred_jobs_run_at ON awa.deferred_jobs (run_at, id);
CREATE INDEX IF NOT EXISTS idx_deferred_jobs_state_queue ON awa.deferred_jobs (state, queue, id);
CREATE INDEX IF NOT EXISTS idx_deferred_jobs_kind_state ON awa.deferred_jobs (kind, state);

-- A receipt for every claim (the claim ring).  "Open" = no closure evidence.
CREATE TABLE IF NOT EXISTS awa.lease_claims (
    claim_slot  smallint NOT NULL,
    receipt_id  bigint NOT NULL,
    job_id      bigint NOT NULL,
    run_lease   bigint NOT NULL,
    queue       text NOT NULL,
    priority    smallint NOT NULL,
    attempt     smallint NOT NULL,
    claimed_at  timestamptz NOT NULL,
    deadline_at timestamptz,
    ready_slot  smallint NOT NULL,
    ready_id    bigint NOT NULL
) PARTITION BY LIST (claim_slot);

-- One closure per ended (or materialized) receipt; the unique index is what
-- makes two concurrent finishes of one attempt apply once.
CREATE TABLE IF NOT EXISTS awa.lease_claim_closures (
    claim_slot smallint NOT NULL,
    receipt_id bigint NOT NULL,
    job_id     bigint NOT NULL,
    run_lease  bigint NOT NULL,
    outcome    text NOT NULL,
    closed_at  timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (claim_slot);

-- Compact closure evidence: ranges of receipt ids closed together.
CREATE TABLE IF NOT EXISTS awa.lease_claim_closure_batches (
    claim_slot     smallint NOT NULL,
    receipt_ranges int8multirange NOT NULL,
    outcome        text NOT NULL,
    closed_at      timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (claim_slot);

-- Materialized running attempts (the lease ring): heartbeats, deadlines,
-- callbacks.  Deleted when the attempt ends; the ring truncates the rest.
CREATE TABLE IF NOT EXISTS awa.leases (
    lease_slot           smallint NOT NULL,
    job_id               bigint NOT NULL,
    run_lease            bigint NOT NULL,
    queue                text NOT NULL,
    state                awa.job_state NOT NULL DEFAULT 'running',
    attempt              smallint NOT NULL,
    claim_slot           smallint NOT NULL,
    receipt_id           bigint NOT NULL,
    ready_slot           smallint NOT NULL,
    ready_id             bigint NOT NULL,
    claimed_at           timestamptz NOT NULL,
    heartbeat_at         timestamptz NOT NULL DEFAULT now(),
    deadline_at          timestamptz,
    callback_id          uuid,
    callback_timeout_at  timestamptz,
    callback_filter      text,
    callback_on_complete text,
    callback_on_fail     text,
    callback_transform   text,
    CONSTRAINT leases_state_check CHECK (state IN ('running', 'waiting_external'))
) PARTITION BY LIST (lease_slot);

-- Who runs what (migration 0004 on the canonical tables): the runtime instance that
-- claimed the attempt.  deferred_jobs has it from scheduled_jobs (LIKE) when laid out
-- after 0004; added here for one laid out before.
ALTER TABLE awa.lease_claims ADD COLUMN IF NOT EXISTS claimed_by uuid;
ALTER TABLE awa.leases ADD COLUMN IF NOT EXISTS claimed_by uuid;
ALTER TABLE awa.deferred_jobs ADD COLUMN IF NOT EXISTS claimed_by uuid;
-- An attempt that ended in place (completed, failed, cancelled by its handler) keeps it.
ALTER TABLE awa.done_entries ADD COLUMN IF NOT EXISTS claimed_by uuid;

-- Mutable per-attempt state, only for attempts that report progress or metadata.
CREATE TABLE IF NOT EXISTS awa.attempt_state (
    job_id     bigint NOT NULL,
    run_lease  bigint NOT NULL,
    progress   jsonb,
    metadata   jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, run_lease)
);

-- Partitions: one per ring slot.
DO $$
DECLARE
    t text; ring_name text; n int; s int;
BEGIN
    FOR t, ring_name IN VALUES ('ready_entries', 'queue'), ('ready_tombstones', 'queue'),
                          ('done_entries', 'queue'), ('lease_claims', 'claim'),
                          ('lease_claim_closures', 'claim'),
                          ('lease_claim_closure_batches', 'claim'), ('leases', 'lease') LOOP
        SELECT slot_count INTO n FROM awa.queue_ring_state r WHERE r.ring = ring_name;
        FOR s IN 0 .. n - 1 LOOP
            EXECUTE format('CREATE TABLE IF NOT EXISTS awa.%I PARTITION OF awa.%I FOR VALUES IN (%s)',
                           t || '_' || s, t, s);
        END LOOP;
    END LOOP;
END $$;

CREATE INDEX IF NOT EXISTS idx_ready_entries_lane
    ON awa.ready_entries (queue, priority, shard, lane_seq);
CREATE INDEX IF NOT EXISTS idx_ready_entries_job ON awa.ready_entries (job_id);
CREATE INDEX IF NOT EXISTS idx_ready_entries_id ON awa.ready_entries (ready_id);
CREATE INDEX IF NOT EXISTS idx_ready_tombstones_id ON awa.ready_tombstones (ready_id);
CREATE INDEX IF NOT EXISTS idx_done_entries_job ON awa.done_entries (id);
CREATE INDEX IF NOT EXISTS idx_done_entries_state_queue
    ON awa.done_entries (state, queue, finalized_at);
CREATE INDEX IF NOT EXISTS idx_done_entries_kind_state ON awa.done_entries (kind, state);
CREATE INDEX IF NOT EXISTS idx_lease_claims_job ON awa.lease_claims (job_id, run_lease);
CREATE INDEX IF NOT EXISTS idx_lease_claims_claimed ON awa.lease_claims (claimed_at);
CREATE UNIQUE INDEX IF NOT EXISTS idx_lease_claim_closures_attempt
    ON awa.lease_claim_closures (claim_slot, job_id, run_lease);
CREATE INDEX IF NOT EXISTS idx_lease_claim_closure_batches_ranges
    ON awa.lease_claim_closure_batches USING gist (receipt_ranges);
CREATE INDEX IF NOT EXISTS idx_leases_job ON awa.leases (job_id, run_lease);
CREATE INDEX IF NOT EXISTS idx_leases_heartbeat ON awa.leases (heartbeat_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS idx_leases_callback ON awa.leases (callback_id)
    WHERE callback_id IS NOT NULL;

-- Wake the queue's dispatchers at commit for every statement appending ready rows.
CREATE OR REPLACE FUNCTION awa.qs_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM new_rows LOOP
        PERFORM pg_notify('awa:' || q, '');
    END LOOP;
    RETURN NULL;
END $$;

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'awa_qs_notify_ready'
                    AND tgrelid = 'awa.ready_entries'::regclass) THEN
        CREATE TRIGGER awa_qs_notify_ready AFTER INSERT ON awa.ready_entries
            REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION awa.qs_notify_ready();
    END IF;
END $$;

-- The claim: lanes of the queue locked in order (claimers of one queue take
-- turns; producers never wait for them), then, with a fresh snapshot that
-- sees every committed receipt, the first live rows of each lane's window in
-- dispatch order (priority, run_at, id).
-- p_claimed_by: the claiming runtime's instance id (lease_claims.claimed_by, copied into
-- leases when the attempt materializes).
DROP FUNCTION IF EXISTS awa.qs_claim(text, int, bigint);
CREATE OR REPLACE FUNCTION awa.qs_claim(p_queue text, p_limit int, p_deadline_ms bigint,
                                        p_claimed_by uuid DEFAULT NULL)
RETURNS TABLE (id bigint, kind text, queue text, args jsonb, priority smallint,
               attempt smallint, max_attempts smallint, run_at timestamptz,
               deadline_at timestamptz, attempted_at timestamptz, created_at timestamptz,
               errors jsonb[], metadata jsonb, tags text[], run_lease bigint, progress jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    w int := greatest(p_limit * 2, 16);
    got int;
    rounds int := 0;
    advanced int;
    lanes_p smallint[];
    lanes_s smallint[];
BEGIN
    IF EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = p_queue AND m.paused) THEN
        RETURN;
    END IF;
    -- Only lanes locked here take part: a lane a producer creates meanwhile
    -- is claimed by the next claim, never by two claimers at once.
    SELECT array_agg(h.priority ORDER BY h.priority, h.shard),
           array_agg(h.shard ORDER BY h.priority, h.shard)
      INTO lanes_p, lanes_s
      FROM (SELECT q.priority, q.shard FROM awa.queue_claim_heads q WHERE q.queue = p_queue
             ORDER BY q.priority, q.shard FOR UPDATE) h;
    IF lanes_p IS NULL THEN
        RETURN;
    END IF;
    LOOP
        rounds := rounds + 1;
        RETURN QUERY
        WITH lanes AS MATERIALIZED (
            SELECT h.priority, h.shard, h.claim_seq, h.claimed_max,
                   least(e.next_seq, h.claim_seq + w) AS win_end
              FROM awa.queue_claim_heads h
              JOIN awa.queue_enqueue_heads e
                ON e.queue = h.queue AND e.priority = h.priority AND e.shard = h.shard
             WHERE h.queue = p_queue AND h.claim_seq < e.next_seq
               AND (h.priority, h.shard) IN (SELECT * FROM unnest(lanes_p, lanes_s))
        ), win AS MATERIALIZED (
            SELECT r.*
              FROM lanes l
              JOIN awa.ready_entries r
                ON r.queue = p_queue AND r.priority = l.priority AND r.shard = l.shard
               AND r.lane_seq >= l.claim_seq AND r.lane_seq < l.win_end
             WHERE (NOT (SELECT EXISTS (SELECT 1 FROM awa.ready_tombstones))
                    OR NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                                    WHERE t.ready_id = r.ready_id))
               AND (r.lane_seq > l.claimed_max
                    OR NOT EXISTS (SELECT 1 FROM awa.lease_claims c
                                    WHERE c.job_id = r.job_id
                                      AND c.run_lease = r.run_lease + 1))
        ), picked AS MATERIALIZED (
            SELECT * FROM win ORDER BY priority, run_at, job_id LIMIT p_limit
        ), receipts AS (
            INSERT INTO awa.lease_claims (claim_slot, receipt_id, job_id, run_lease, queue,
                                          priority, attempt, claimed_at, deadline_at,
                                          ready_slot, ready_id, claimed_by)
            SELECT (SELECT awa.qs_slot('claim')), nextval('awa.qs_receipt_id_seq'), p.job_id,
                   p.run_lease + 1, p_queue, p.priority, p.attempt + 1, now(),
                   now() + p_deadline_ms * interval '1 millisecond', p.ready_slot, p.ready_id,
                   p_claimed_by
              FROM picked p
            RETURNING job_id, run_lease, attempt, claimed_at, deadline_at
        ), advance AS (
            UPDATE awa.queue_claim_heads h
               SET claim_seq = greatest(h.claim_seq, COALESCE(
                   (SELECT min(v.lane_seq) FROM win v
                     WHERE v.priority = l.priority AND v.shard = l.shard
                       AND NOT EXISTS (SELECT 1 FROM picked p WHERE p.ready_id = v.ready_id)),
                   l.win_end)),
                   claimed_max = greatest(h.claimed_max, COALESCE(
                   (SELECT max(p.lane_seq) FROM picked p
                     WHERE p.priority = l.priority AND p.shard = l.shard), -1))
              FROM lanes l
             WHERE h.queue = p_queue AND h.priority = l.priority AND h.shard = l.shard
        ), released AS (
            DELETE FROM awa.job_unique_claims u
             USING picked p
             WHERE p.unique_key IS NOT NULL AND u.unique_key = p.unique_key
               AND u.job_id = p.job_id
               AND awa.qs_in_mask(p.unique_states, 'available')
               AND NOT awa.qs_in_mask(p.unique_states, 'running')
        )
        SELECT p.job_id, p.kind, p.queue, p.args, p.priority, rc.attempt, p.max_attempts,
               p.run_at, rc.deadline_at, rc.claimed_at, p.created_at, p.errors, p.metadata,
               p.tags, rc.run_lease, p.progress
          FROM picked p JOIN receipts rc ON rc.job_id = p.job_id
         ORDER BY p.priority, p.run_at, p.job_id;
        GET DIAGNOSTICS got = ROW_COUNT;
        EXIT WHEN got > 0 OR rounds >= 8;
        -- Nothing live in any window: go again only if some lane has rows past it.
        SELECT count(*) INTO advanced
          FROM awa.queue_claim_heads h
          JOIN awa.queue_enqueue_heads e
            ON e.queue = h.queue AND e.priority = h.priority AND e.shard = h.shard
         WHERE h.queue = p_queue AND h.claim_seq < e.next_seq
           AND (h.priority, h.shard) IN (SELECT * FROM unnest(lanes_p, lanes_s));
        EXIT WHEN advanced = 0;
    END LOOP;
END $$;

-- The operator read surface: canonical rows plus every live queue-storage row.
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
      FROM awa.ready_entries r
      JOIN awa.queue_claim_heads h
        ON h.queue = r.queue AND h.priority = r.priority AND h.shard = r.shard
       AND r.lane_seq >= h.claim_seq
     WHERE NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t WHERE t.ready_id = r.ready_id)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claims c
                        WHERE c.job_id = r.job_id AND c.run_lease = r.run_lease + 1)
    UNION ALL
    SELECT c.job_id, r.kind, r.queue, r.args, 'running'::awa.job_state, r.priority, c.attempt,
           r.max_attempts, r.run_at, c.claimed_at, c.deadline_at, c.claimed_at, NULL,
           r.created_at, r.errors, r.metadata || COALESCE(a.metadata, '{}'::jsonb), r.tags,
           r.unique_key, r.unique_states, NULL, NULL, NULL, NULL, NULL, NULL,
           c.run_lease, COALESCE(a.progress, r.progress), c.claimed_by
      FROM awa.lease_claims c
      JOIN awa.ready_entries r ON r.ready_slot = c.ready_slot AND r.ready_id = c.ready_id
      LEFT JOIN awa.attempt_state a ON a.job_id = c.job_id AND a.run_lease = c.run_lease
     WHERE NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures cx
                        WHERE cx.claim_slot = c.claim_slot AND cx.job_id = c.job_id
                          AND cx.run_lease = c.run_lease)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches cb
                        WHERE cb.claim_slot = c.claim_slot AND cb.receipt_ranges @> c.receipt_id)
    UNION ALL
    SELECT l.job_id, r.kind, r.queue, r.args, l.state, r.priority, l.attempt, r.max_attempts,
           r.run_at, l.heartbeat_at, l.deadline_at, l.claimed_at, NULL, r.created_at, r.errors,
           r.metadata || COALESCE(a.metadata, '{}'::jsonb), r.tags, r.unique_key,
           r.unique_states, l.callback_id, l.callback_timeout_at, l.callback_filter,
           l.callback_on_complete, l.callback_on_fail, l.callback_transform, l.run_lease,
           COALESCE(a.progress, r.progress), l.claimed_by
      FROM awa.leases l
      JOIN awa.ready_entries r ON r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
      LEFT JOIN awa.attempt_state a ON a.job_id = l.job_id AND a.run_lease = l.run_lease
    UNION ALL
    SELECT d.id, d.kind, d.queue, d.args, d.state, d.priority, d.attempt, d.max_attempts,
           d.run_at, d.heartbeat_at, d.deadline_at, d.attempted_at, d.finalized_at,
           d.created_at, d.errors, d.metadata, d.tags, d.unique_key, d.unique_states,
           d.callback_id, d.callback_timeout_at, d.callback_filter, d.callback_on_complete,
           d.callback_on_fail, d.callback_transform, d.run_lease, d.progress, d.claimed_by
      FROM awa.done_entries d
    UNION ALL
    SELECT * FROM awa.deferred_jobs;

-- Which engine serves this database, and where its tables are.
CREATE OR REPLACE FUNCTION awa.active_queue_storage_schema() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT schema_name FROM awa.runtime_storage_backends WHERE backend = 'queue_storage'
$$;
DELETE FROM awa.runtime_storage_backends WHERE backend <> 'queue_storage';
INSERT INTO awa.runtime_storage_backends (backend, schema_name)
VALUES ('queue_storage', 'awa')
ON CONFLICT (backend) DO UPDATE SET schema_name = EXCLUDED.schema_name, updated_at = now();

CREATE INDEX IF NOT EXISTS idx_done_entries_callback ON awa.done_entries (callback_id)
    WHERE callback_id IS NOT NULL;
