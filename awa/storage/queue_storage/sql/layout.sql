-- The queue-storage engine (docs/architecture.md §7): append-only, vacuum-aware job storage.
--
-- Installed on top of the canonical migrations by
-- awa.storage.queue_storage.install_queue_storage(); idempotent.  Not a
-- numbered migration: `awa migrate` lays it out on a new database (the default
-- engine, awa.config.DEFAULT_STORAGE_ENGINE) and again after every migration.
-- This file is the layout (tables, partitions, indexes); the files that follow it,
-- in the order awa/storage/queue_storage/procedures.py's FILES gives, add the open
-- receipts, the lanes and the claim, the awa.jobs view, and the hot-path functions.
--
-- The property: no hot-path step updates or deletes a row that is read again.
--   enqueue   appends ready_entries (lane position from a per-lane enqueue head)
--   claim     appends a lease_claims receipt, advances the per-lane claim head
--   finish    appends a lease_claim_closure_batches row per claim slot (the
--             ranges of the batch's receipts) and a done_entries row per job
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

-- PL/pgSQL, not SQL: a SQL function with a FROM clause is not inlined, and is
-- parsed and planned again at every call; this one's plan is cached per session.
CREATE OR REPLACE FUNCTION awa.qs_slot(p_ring text) RETURNS smallint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT current_slot FROM awa.queue_ring_state WHERE ring = p_ring);
END $$;

-- A state inside a unique_states mask (NULL mask: never).
CREATE OR REPLACE FUNCTION awa.qs_in_mask(mask bit(8), s awa.job_state) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT mask IS NOT NULL AND get_bit(mask, awa.state_bit(s)) = 1
$$;

CREATE SEQUENCE IF NOT EXISTS awa.qs_ready_id_seq;
CREATE SEQUENCE IF NOT EXISTS awa.qs_receipt_id_seq;

-- Per-lane heads.  A lane is (queue, priority, shard); shards come from
-- queue_meta.enqueue_shards.  Neither head is a counter a hot path rewrites:
-- * the enqueue head is a lock: a producer holds it FOR UPDATE until commit,
--   so lane positions become visible in order (no gap a claimer could pass),
--   and reads the lane's end from the rows themselves (awa.qs_reserve_lane);
-- * the claim head is the lane's low-water mark (everything below claim_seq is
--   claimed or tombstoned).  Claimers lock it to take turns, but move it only
--   once it lags by CLAIM_HEAD_STRIDE positions; rows between it and the newest
--   receipt are told apart by their receipts (awa.qs_ready_live).
-- So with the xmin horizon pinned, a lane leaves one dead tuple per
-- CLAIM_HEAD_STRIDE claimed jobs, not two per batch.
CREATE TABLE IF NOT EXISTS awa.queue_enqueue_heads (
    queue    text NOT NULL,
    priority smallint NOT NULL,
    shard    smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, priority, shard)
);
ALTER TABLE awa.queue_enqueue_heads DROP COLUMN IF EXISTS next_seq;
CREATE TABLE IF NOT EXISTS awa.queue_claim_heads (
    queue     text NOT NULL,
    priority  smallint NOT NULL,
    shard     smallint NOT NULL DEFAULT 0,
    claim_seq bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, priority, shard)
) WITH (fillfactor = 20);
ALTER TABLE awa.queue_claim_heads DROP COLUMN IF EXISTS claimed_max;

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
-- The claimed entry's lane position: the claim reads how far a lane is claimed
-- from the receipts instead of from a counter it would have to rewrite.
ALTER TABLE awa.lease_claims ADD COLUMN IF NOT EXISTS shard smallint NOT NULL DEFAULT 0;
ALTER TABLE awa.lease_claims ADD COLUMN IF NOT EXISTS lane_seq bigint NOT NULL DEFAULT -1;

-- One closure per ended (or materialized) receipt.  Read as closure evidence
-- (the guide's anti-join), written by nothing since layout version 2: every
-- closer appends to lease_claim_closure_batches instead.
CREATE TABLE IF NOT EXISTS awa.lease_claim_closures (
    claim_slot smallint NOT NULL,
    receipt_id bigint NOT NULL,
    job_id     bigint NOT NULL,
    run_lease  bigint NOT NULL,
    outcome    text NOT NULL,
    closed_at  timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (claim_slot);

-- Closure evidence: ranges of receipt ids closed together, one row per claim
-- slot per closing statement.  Each slot's partition excludes overlapping rows
-- (below): of two closers of one receipt exactly one writes its row, the
-- other's row is skipped (ON CONFLICT DO NOTHING) and it knows it lost.
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

-- One copy of history (layout 8): a job completed while its ready entry is in the queue
-- ring's current slot gets its done entry in that same slot with no args of its own, only
-- the entry's ready_id; readers take the args from the entry (awa.qs_done_rows).  The two
-- rows go together when the slot is truncated.  Every other done entry (failed,
-- cancelled, or a ready entry from an earlier slot, which is truncated sooner) is whole.
ALTER TABLE awa.done_entries ADD COLUMN IF NOT EXISTS ready_id bigint;
ALTER TABLE awa.done_entries ALTER COLUMN args DROP NOT NULL;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'awa.done_entries'::regclass
                      AND conname = 'done_entries_args_check') THEN
        ALTER TABLE awa.done_entries ADD CONSTRAINT done_entries_args_check
            CHECK (args IS NOT NULL OR (ready_id IS NOT NULL AND state = 'completed'));
    END IF;
END $$;

-- A claim that took its lane's entries from start_seq on without a gap records
-- where the next claim may begin (everything below it is claimed) in its newest
-- receipt, so that claim reads one receipt instead of counting them all.  Added before
-- awa.qs_open_receipts (c.*) is created, so a fresh layout's view has the column too, as
-- one installed again by a later `awa migrate` always had.
ALTER TABLE awa.lease_claims ADD COLUMN IF NOT EXISTS lane_frontier bigint;

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
    ns name := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = 'awa.queue_ring_state'::regclass);
BEGIN
    FOR t, ring_name IN VALUES ('ready_entries', 'queue'), ('ready_tombstones', 'queue'),
                          ('done_entries', 'queue'), ('lease_claims', 'claim'),
                          ('lease_claim_closures', 'claim'),
                          ('lease_claim_closure_batches', 'claim'), ('leases', 'lease') LOOP
        SELECT slot_count INTO n FROM awa.queue_ring_state r WHERE r.ring = ring_name;
        FOR s IN 0 .. n - 1 LOOP
            EXECUTE format('CREATE TABLE IF NOT EXISTS %I.%I PARTITION OF %I.%I FOR VALUES IN (%s)',
                           ns, t || '_' || s, ns, t, s);
        END LOOP;
    END LOOP;
END $$;

CREATE INDEX IF NOT EXISTS idx_ready_entries_lane
    ON awa.ready_entries (queue, priority, shard, lane_seq);
CREATE INDEX IF NOT EXISTS idx_ready_entries_job ON awa.ready_entries (job_id);
-- An entry is found by its job (every reader of (ready_slot, ready_id) knows the job id
-- too): an index on ready_id as well cost each enqueued row one more index insert.
DROP INDEX IF EXISTS awa.idx_ready_entries_id;
CREATE INDEX IF NOT EXISTS idx_ready_tombstones_id ON awa.ready_tombstones (ready_id);
CREATE INDEX IF NOT EXISTS idx_done_entries_job ON awa.done_entries (id);
CREATE INDEX IF NOT EXISTS idx_done_entries_state_queue
    ON awa.done_entries (state, queue, finalized_at);
-- Kind filters look for failed (and cancelled) rows: completed ones stay out of it.
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('awa.idx_done_entries_kind_state')
                AND i.indpred IS NULL) THEN
        DROP INDEX awa.idx_done_entries_kind_state;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS idx_done_entries_kind_state ON awa.done_entries (kind, state)
    WHERE state <> 'completed';
CREATE INDEX IF NOT EXISTS idx_lease_claims_job ON awa.lease_claims (job_id, run_lease);
-- No index on claimed_at: the claim writes every receipt under its lane lock, and the
-- one reader by age (rescue of stale receipts) reads every old receipt anyway to find
-- the open ones among them.
DROP INDEX IF EXISTS awa.idx_lease_claims_claimed;
CREATE INDEX IF NOT EXISTS idx_lease_claims_lane ON awa.lease_claims (queue, priority, shard, lane_seq);
CREATE UNIQUE INDEX IF NOT EXISTS idx_lease_claim_closures_attempt
    ON awa.lease_claim_closures (claim_slot, job_id, run_lease);
-- The closure guard, per partition (PostgreSQL 15 has no exclusion constraints on a
-- partitioned table); its GiST index also serves the "receipt_ranges @> receipt_id"
-- probes, so the parent's own index of layout version 1 goes.
DROP INDEX IF EXISTS awa.idx_lease_claim_closure_batches_ranges;
DO $$
DECLARE
    part regclass; part_name name;
BEGIN
    FOR part, part_name IN SELECT c.oid::regclass, c.relname FROM pg_inherits i
                  JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = 'awa.lease_claim_closure_batches'::regclass LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_constraint
                        WHERE conrelid = part AND contype = 'x') THEN
            EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I EXCLUDE USING gist '
                           '(receipt_ranges WITH &&)', part, part_name || '_no_overlap');
        END IF;
    END LOOP;
END $$;
CREATE INDEX IF NOT EXISTS idx_leases_job ON awa.leases (job_id, run_lease);
CREATE INDEX IF NOT EXISTS idx_leases_heartbeat ON awa.leases (heartbeat_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS idx_leases_callback ON awa.leases (callback_id)
    WHERE callback_id IS NOT NULL;

-- Dispatchers are woken by awa.qs_reserve_lane, which every append of ready rows
-- calls first.  Layout version 2 and older woke them with a statement trigger over
-- the inserted rows: its transition table copied every row once more, and on a
-- partitioned table it made COPY insert row by row instead of a page at a time.
DROP TRIGGER IF EXISTS awa_qs_notify_ready ON awa.ready_entries;
DROP FUNCTION IF EXISTS awa.qs_notify_ready();
