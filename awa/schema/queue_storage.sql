-- The queue-storage engine (docs/architecture.md §7): append-only, vacuum-aware job storage.
--
-- Installed on top of the canonical migrations by
-- awa.storage.queue_storage.install_queue_storage(); idempotent.  Not a
-- numbered migration: `awa migrate` lays it out on a new database (the default
-- engine, awa.config.DEFAULT_STORAGE_ENGINE) and again after every migration.
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

-- The one rule for "this ready entry can still be claimed": at or past its
-- lane's claim head, not tombstoned, no receipt for its next attempt.  Every
-- reader of available jobs (the view, counts, admin, aging, prune) uses it.
-- The open receipts: those no closure covers.  Closures name receipt-id ranges, so the
-- ids no range covers between the claim ring's oldest and newest receipt are found by
-- subtracting the merged ranges from that span; only the receipts in those gaps (the
-- attempts open now, and ids a rolled-back claim never used) are then probed, by
-- receipt id.  Its cost follows the closures and the open attempts, never the receipts
-- a busy ring holds: read by rescue, prune, the depth counts and awa.jobs.
CREATE INDEX IF NOT EXISTS idx_lease_claims_receipt ON awa.lease_claims (receipt_id);
-- Receipt ids below closed_below are all covered by closures (closures are appended and
-- leave only with their receipts' whole claim slot), so the gap search starts there and
-- merges only the closures since.  Advanced by the maintenance leader at each rescue
-- (awa.qs_advance_receipt_watermark): one small row, updated in place.  A hole no receipt
-- will ever fill (the ids of a claim that rolled back) is passed once no transaction of
-- this database that was running when the hole was first seen (hole_seen_at) is left: a
-- claim takes its receipt ids inside its transaction, so by then its receipts are
-- visible, or never will be.
CREATE TABLE IF NOT EXISTS awa.qs_receipt_watermark (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    closed_below bigint NOT NULL DEFAULT 0,
    hole_below   bigint,
    hole_seen_at timestamptz
);
INSERT INTO awa.qs_receipt_watermark DEFAULT VALUES ON CONFLICT DO NOTHING;

-- The gaps: PL/pgSQL with a row estimate, so that a plan reading them is costed as the
-- few index probes it is (as inline SQL the planner guesses a thousand gaps, and a plan
-- that dear is JIT-compiled at every call).  The closures since the watermark are found
-- by each slot's GiST index (the exclusion constraint's).
CREATE OR REPLACE FUNCTION awa.qs_open_receipt_gaps() RETURNS SETOF int8range
LANGUAGE plpgsql STABLE ROWS 4 AS $$
DECLARE
    lo bigint := greatest((SELECT min(x.receipt_id) FROM awa.lease_claims x),
                          (SELECT w.closed_below FROM awa.qs_receipt_watermark w));
    hi bigint := (SELECT max(x.receipt_id) FROM awa.lease_claims x);
BEGIN
    IF lo IS NULL OR hi IS NULL OR lo > hi THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT unnest(int8multirange(int8range(lo, hi, '[]'))
                  - COALESCE((SELECT range_agg(g) FROM awa.lease_claim_closure_batches cb
                               CROSS JOIN LATERAL unnest(cb.receipt_ranges) g
                               WHERE cb.receipt_ranges && int8range(lo, NULL)),
                             '{}'::int8multirange));
END $$;

-- Move the watermark to the first gap that holds a receipt (an open attempt), or to a
-- hole not yet proven dead; returns where it stands.
CREATE OR REPLACE FUNCTION awa.qs_advance_receipt_watermark() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    w awa.qs_receipt_watermark%ROWTYPE;
    gap int8range;
    target bigint;
BEGIN
    SELECT * INTO w FROM awa.qs_receipt_watermark FOR UPDATE;
    target := (SELECT max(x.receipt_id) + 1 FROM awa.lease_claims x);
    IF target IS NULL THEN
        RETURN w.closed_below;
    END IF;
    FOR gap IN SELECT g FROM awa.qs_open_receipt_gaps() g ORDER BY lower(g) LOOP
        IF EXISTS (SELECT 1 FROM awa.lease_claims x
                    WHERE x.receipt_id >= lower(gap) AND x.receipt_id < upper(gap)) THEN
            target := lower(gap);  -- an open receipt
            EXIT;
        END IF;
        -- Seen empty before, and every transaction of that time has ended (one this
        -- role may not look at counts as still running): dead ids.
        IF w.hole_below = upper(gap) AND NOT EXISTS (
               SELECT 1 FROM pg_stat_activity a
                WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                  AND (a.query = '<insufficient privilege>'
                       OR (a.backend_xid IS NOT NULL AND a.xact_start <= w.hole_seen_at))) THEN
            CONTINUE;
        END IF;
        target := lower(gap);
        IF w.hole_below IS DISTINCT FROM upper(gap) THEN
            w.hole_below := upper(gap);
            w.hole_seen_at := clock_timestamp();
        END IF;
        EXIT;
    END LOOP;
    UPDATE awa.qs_receipt_watermark
       SET closed_below = greatest(closed_below, target), hole_below = w.hole_below,
           hole_seen_at = w.hole_seen_at
     WHERE (closed_below, hole_below, hole_seen_at)
           IS DISTINCT FROM (greatest(closed_below, target), w.hole_below, w.hole_seen_at);
    RETURN greatest(w.closed_below, target);
END $$;
CREATE OR REPLACE VIEW awa.qs_open_receipts AS
    SELECT c.*
      FROM awa.qs_open_receipt_gaps() AS gap
     -- OFFSET 0 keeps this a probe per gap: flattened into a join, the planner scans
     -- every receipt and tests each against the gaps.
     CROSS JOIN LATERAL (SELECT x.* FROM awa.lease_claims x
                          WHERE x.receipt_id >= lower(gap) AND x.receipt_id < upper(gap)
                         OFFSET 0) c
     WHERE NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures cx
                        WHERE cx.claim_slot = c.claim_slot AND cx.job_id = c.job_id
                          AND cx.run_lease = c.run_lease);

CREATE OR REPLACE VIEW awa.qs_ready_live AS
    SELECT r.*
      FROM awa.ready_entries r
      JOIN awa.queue_claim_heads h
        ON h.queue = r.queue AND h.priority = r.priority AND h.shard = r.shard
       AND r.lane_seq >= h.claim_seq
     WHERE NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t WHERE t.ready_id = r.ready_id)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claims c
                        WHERE c.job_id = r.job_id AND c.run_lease = r.run_lease + 1);

-- Reserve positions at the end of a lane of (p_queue, p_priority) for this
-- transaction's appends.  The lane's shard: with queue_meta.enqueue_shards = n > 1,
-- the first of the n lanes no other producer holds, starting from one the
-- transaction id picks (concurrent producers spread over the lanes instead of
-- queueing on one lock; one transaction keeps appending where it started),
-- else that starting lane, waited for.  The lane's enqueue head stays locked
-- until commit, so positions become visible in lane order; then -- VOLATILE, so
-- with a snapshot taken after the lock, seeing every earlier holder's rows --
-- the first free position: past the newest entry, and past the claim head and
-- the newest receipt, which outlive entries a prune truncated.  Creates the
-- queue's lanes on first use.  Every append of ready rows reserves first, so this
-- is also where the queue's dispatchers are woken (at commit; a transaction's
-- repeated notifications are delivered once).
DROP FUNCTION IF EXISTS awa.qs_reserve_lane(text, smallint, smallint);
CREATE OR REPLACE FUNCTION awa.qs_reserve_lane(p_queue text, p_priority smallint,
                                               OUT lane_shard smallint, OUT base bigint)
-- Index probes only: a plan cached while the ring partition was nearly empty
-- must not scan it whole once it has filled (see the header of
-- awa/storage/queue_storage/sql/execution.sql).
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
DECLARE
    n int;
    first int;
    i int;
BEGIN
    SELECT greatest(COALESCE(max(m.enqueue_shards), 1), 1) INTO n
      FROM awa.queue_meta m WHERE m.queue = p_queue;
    first := (txid_current() % n)::int;
    IF n > 1 THEN
        FOR i IN 0 .. n - 1 LOOP
            lane_shard := ((first + i) % n)::smallint;
            PERFORM 1 FROM awa.queue_enqueue_heads h
             WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = lane_shard
               FOR UPDATE SKIP LOCKED;
            EXIT WHEN FOUND;
            lane_shard := NULL;
        END LOOP;
    END IF;
    IF lane_shard IS NULL THEN
        lane_shard := first::smallint;
        PERFORM 1 FROM awa.queue_enqueue_heads h
         WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = lane_shard FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO awa.queue_claim_heads (queue, priority, shard)
            SELECT p_queue, p_priority, g FROM generate_series(0, n - 1) g
            ON CONFLICT DO NOTHING;
            INSERT INTO awa.queue_enqueue_heads (queue, priority, shard)
            SELECT p_queue, p_priority, g FROM generate_series(0, n - 1) g
            ON CONFLICT DO NOTHING;
            PERFORM 1 FROM awa.queue_enqueue_heads h
             WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = lane_shard
               FOR UPDATE;
        END IF;
    END IF;
    PERFORM pg_notify('awa:' || p_queue, '');
    base := greatest(
        (SELECT COALESCE(max(r.lane_seq) + 1, 0) FROM awa.ready_entries r
          WHERE r.queue = p_queue AND r.priority = p_priority AND r.shard = lane_shard),
        (SELECT COALESCE(max(c.lane_seq) + 1, 0) FROM awa.lease_claims c
          WHERE c.queue = p_queue AND c.priority = p_priority AND c.shard = lane_shard),
        (SELECT h.claim_seq FROM awa.queue_claim_heads h
          WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = lane_shard));
END $$;

-- Enqueue's direct COPY (a plain batch: no unique key, nothing deferred) names
-- only what the producer knows; ids and timestamps come from these defaults.
ALTER TABLE awa.ready_entries ALTER COLUMN job_id SET DEFAULT nextval('awa.jobs_id_seq');
ALTER TABLE awa.ready_entries ALTER COLUMN ready_id SET DEFAULT nextval('awa.qs_ready_id_seq');
ALTER TABLE awa.ready_entries ALTER COLUMN run_at SET DEFAULT now();
ALTER TABLE awa.ready_entries ALTER COLUMN created_at SET DEFAULT now();

-- Where a lane's claims may begin when its newest receipt (at p_top) kept no frontier:
-- past the run of receipts from the head on when it has no gap, else the head.  Its
-- own function, like the claim's rare checks below: inline, its count over every claim
-- ring partition would be set up at every claim, and it runs only after a claim whose
-- picked entries left a gap in their lane (taken out of lane order, or past a skipped one).
CREATE OR REPLACE FUNCTION awa.qs_claimed_run_end(p_queue text, p_priority smallint,
                                                  p_shard smallint, p_claim_seq bigint,
                                                  p_top bigint) RETURNS bigint
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
BEGIN
    RETURN (SELECT CASE WHEN count(*) = p_top - p_claim_seq + 1 THEN p_top + 1
                        ELSE p_claim_seq END
              FROM awa.lease_claims x
             WHERE x.queue = p_queue AND x.priority = p_priority AND x.shard = p_shard
               AND x.lane_seq >= p_claim_seq);
END $$;

-- How far each lane of a queue is claimed, from its claim head and receipts:
-- ``start`` is where the claim begins to look: the newest receipt's frontier
-- (the FIFO case: one index probe), else past a contiguous claimed run (the
-- receipts since the head counted), else the head; ``claimed_max`` the newest
-- claimed position (entries past it need no receipt probe).
CREATE OR REPLACE FUNCTION awa.qs_lane_progress(p_queue text)
RETURNS TABLE (priority smallint, shard smallint, claim_seq bigint, start_seq bigint,
               claimed_max bigint)
LANGUAGE sql STABLE AS $$
    SELECT h.priority, h.shard, h.claim_seq,
           CASE WHEN t.top IS NULL THEN h.claim_seq
                WHEN t.lane_frontier IS NOT NULL THEN greatest(t.lane_frontier, h.claim_seq)
                ELSE awa.qs_claimed_run_end(h.queue, h.priority, h.shard, h.claim_seq,
                                            t.top) END,
           COALESCE(t.top, -1)
      FROM awa.queue_claim_heads h
      LEFT JOIN LATERAL (
          SELECT x.lane_seq AS top, x.lane_frontier FROM awa.lease_claims x
           WHERE x.queue = h.queue AND x.priority = h.priority AND x.shard = h.shard
             AND x.lane_seq >= h.claim_seq
           ORDER BY x.lane_seq DESC LIMIT 1) t ON true
     WHERE h.queue = p_queue
$$;

-- The claim: lanes of the queue locked in order (claimers of one queue take
-- turns; producers never wait for them), then, with a fresh snapshot that
-- sees every committed receipt, the first claimable entries of each lane in
-- lane order (a window of p_limit for a one-lane queue, else twice that), and
-- of those the first p_limit in dispatch order: priority aged at claim time
-- (p_aging_ms > 0: one step up per p_aging_ms since run_at, to at best 1, from
-- the priority it was enqueued with -- awa.qs_aged_priority), then run_at, id.
-- So a low-priority lane's head is claimed once it has waited long enough,
-- between the maintenance leader's aging passes too.  The claim head moves
-- only once it lags CLAIM_HEAD_STRIDE (128).
-- p_claimed_by: the claiming runtime's instance id (lease_claims.claimed_by, copied into
-- leases when the attempt materializes).
CREATE OR REPLACE FUNCTION awa.qs_aged_priority(p_priority smallint, p_metadata jsonb,
                                                p_run_at timestamptz, p_aging_ms bigint)
RETURNS int LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_aging_ms > 0 AND p_priority > 1 THEN
               least(p_priority::int, greatest(1,
                   COALESCE((p_metadata ->> '_awa_original_priority')::int, p_priority)
                   - floor(extract(epoch FROM now() - p_run_at) * 1000 / p_aging_ms)::int))
           ELSE p_priority::int END
$$;

-- The claim's rare per-entry checks, as calls: inline, each would be a subplan over
-- every ring partition in every partition's scan of the claim's window -- dozens of
-- plan nodes set up at every claim, however rarely they run (a tombstone is rare; a
-- receipt is probed only below the lane's newest claimed position).
CREATE OR REPLACE FUNCTION awa.qs_any_tombstone() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM awa.ready_tombstones);
END $$;
CREATE OR REPLACE FUNCTION awa.qs_tombstoned(p_ready_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM awa.ready_tombstones t WHERE t.ready_id = p_ready_id);
END $$;
CREATE OR REPLACE FUNCTION awa.qs_receipted(p_job_id bigint, p_run_lease bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM awa.lease_claims c
                    WHERE c.job_id = p_job_id AND c.run_lease = p_run_lease);
END $$;

DROP FUNCTION IF EXISTS awa.qs_claim(text, int, bigint);
DROP FUNCTION IF EXISTS awa.qs_claim(text, int, bigint, uuid);
CREATE OR REPLACE FUNCTION awa.qs_claim(p_queue text, p_limit int, p_deadline_ms bigint,
                                        p_claimed_by uuid DEFAULT NULL,
                                        p_aging_ms bigint DEFAULT 0)
RETURNS TABLE (id bigint, kind text, queue text, args jsonb, priority smallint,
               attempt smallint, max_attempts smallint, run_at timestamptz,
               deadline_at timestamptz, attempted_at timestamptz, created_at timestamptz,
               errors jsonb[], metadata jsonb, tags text[], run_lease bigint, progress jsonb)
-- One generic plan per session (a custom plan per call costs as much as running
-- it), with index probes only: the plan must stay right as a ring partition that
-- was empty when it was made fills up (see the header of
-- awa/storage/queue_storage/sql/execution.sql).
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_bitmapscan = off AS $$
#variable_conflict use_column
DECLARE
    w int;
    lanes_p smallint[];
    lanes_s smallint[];
BEGIN
    -- Only lanes locked here take part: a lane a producer creates meanwhile
    -- is claimed by the next claim, never by two claimers at once.  A paused
    -- queue has none.
    SELECT array_agg(h.priority ORDER BY h.priority, h.shard),
           array_agg(h.shard ORDER BY h.priority, h.shard)
      INTO lanes_p, lanes_s
      FROM (SELECT q.priority, q.shard FROM awa.queue_claim_heads q
             WHERE q.queue = p_queue
               AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m
                                WHERE m.queue = p_queue AND m.paused)
             ORDER BY q.priority, q.shard FOR UPDATE OF q) h;
    -- A limit of 0 is a connection's warm-up (Engine.warm_up): every statement below
    -- runs, and so is planned, on no lane.
    IF lanes_p IS NULL AND p_limit > 0 THEN
        RETURN;
    END IF;
    -- The lane locks are held until commit, and the next claimer of the queue waits
    -- for them: so this transaction's commit does not wait for its WAL to reach disk
    -- as well.  Nothing is lost by it: the receipts become durable with the next
    -- synchronous commit (the attempt's completion flushes the WAL before it), and a
    -- claim a server crash took back leaves its entry claimable, to run again as
    -- every attempt open at a crash does.
    PERFORM set_config('synchronous_commit', 'off', true);
    w := CASE WHEN cardinality(lanes_p) = 1 THEN p_limit ELSE greatest(p_limit * 2, 16) END;
    RETURN QUERY
    WITH lanes AS MATERIALIZED (
        SELECT g.* FROM awa.qs_lane_progress(p_queue) g
         WHERE (g.priority, g.shard) IN (SELECT * FROM unnest(lanes_p, lanes_s))
    ), win AS MATERIALIZED (
        SELECT r.*
          FROM lanes l
          CROSS JOIN LATERAL (
              SELECT r.* FROM awa.ready_entries r
               WHERE r.queue = p_queue AND r.priority = l.priority AND r.shard = l.shard
                 AND r.lane_seq >= l.start_seq
                 AND (NOT (SELECT awa.qs_any_tombstone())
                      OR NOT awa.qs_tombstoned(r.ready_id))
                 AND (r.lane_seq > l.claimed_max
                      OR NOT awa.qs_receipted(r.job_id, r.run_lease + 1))
               ORDER BY r.lane_seq
               LIMIT w) r
    ), ranked AS MATERIALIZED (
        -- Dispatch order over the window; the first p_limit are claimed.  (A rank,
        -- not anti-joins of the window against the picked rows: those are
        -- window x limit comparisons per claim.)
        SELECT v.*, row_number() OVER (
                   ORDER BY awa.qs_aged_priority(v.priority, v.metadata, v.run_at, p_aging_ms),
                            v.run_at, v.job_id) AS rk
          FROM win v
    ), picked AS MATERIALIZED (
        SELECT * FROM ranked WHERE rk <= p_limit
    ), runs AS (
        -- Per lane, the picked entries: a run from start_seq with no gap moves the
        -- lane's frontier past it (kept in the run's newest receipt).
        SELECT p.priority, p.shard, max(p.lane_seq) AS newest,
               CASE WHEN count(*) = max(p.lane_seq) - min(l.start_seq) + 1
                    THEN max(p.lane_seq) + 1 END AS frontier
          FROM picked p JOIN lanes l ON l.priority = p.priority AND l.shard = p.shard
         GROUP BY p.priority, p.shard
    ), receipts AS (
        INSERT INTO awa.lease_claims (claim_slot, receipt_id, job_id, run_lease, queue,
                                      priority, attempt, claimed_at, deadline_at,
                                      ready_slot, ready_id, shard, lane_seq, claimed_by,
                                      lane_frontier)
        SELECT (SELECT awa.qs_slot('claim')), nextval('awa.qs_receipt_id_seq'), p.job_id,
               p.run_lease + 1, p_queue, p.priority, p.attempt + 1, now(),
               now() + p_deadline_ms * interval '1 millisecond', p.ready_slot, p.ready_id,
               p.shard, p.lane_seq, p_claimed_by,
               CASE WHEN p.lane_seq = r.newest THEN r.frontier END
          FROM picked p JOIN runs r ON r.priority = p.priority AND r.shard = p.shard
    ), advance AS (
        -- The new low-water mark: the first window entry left unclaimed, else
        -- past the window, else where the claim started.
        UPDATE awa.queue_claim_heads h
           SET claim_seq = n.low
          FROM (SELECT l.priority, l.shard, l.claim_seq,
                       COALESCE(k.first_left, k.past_window, l.start_seq) AS low
                  FROM lanes l
                  LEFT JOIN (SELECT v.priority, v.shard,
                                    min(v.lane_seq) FILTER (WHERE v.rk > p_limit) AS first_left,
                                    max(v.lane_seq) + 1 AS past_window
                               FROM ranked v GROUP BY v.priority, v.shard) k
                    ON k.priority = l.priority AND k.shard = l.shard) n
         WHERE h.queue = p_queue AND h.priority = n.priority AND h.shard = n.shard
           AND n.low >= n.claim_seq + 128
    ), released AS (
        DELETE FROM awa.job_unique_claims u
         USING picked p
         WHERE p.unique_key IS NOT NULL AND u.unique_key = p.unique_key
           AND u.job_id = p.job_id
           AND awa.qs_in_mask(p.unique_states, 'available')
           AND NOT awa.qs_in_mask(p.unique_states, 'running')
           -- probe the keys by index, never a scan of every claim held
           AND u.unique_key = ANY(ARRAY(SELECT k.unique_key FROM picked k
                                         WHERE k.unique_key IS NOT NULL))
    )
    -- What the receipts hold, computed as they were (a data-modifying CTE runs
    -- whether or not it is read; joining it back would be limit x limit).
    SELECT p.job_id, p.kind, p.queue, p.args, p.priority, (p.attempt + 1)::smallint,
           p.max_attempts, p.run_at, now() + p_deadline_ms * interval '1 millisecond',
           now(), p.created_at, p.errors, p.metadata, p.tags, p.run_lease + 1, p.progress
      FROM picked p
     ORDER BY p.rk;
END $$;

-- Move every idle lane's claim head to its low-water mark (the maintenance
-- leader, before prune: receipts of entries past the head keep their claim
-- slot alive).  Lanes a claimer holds are skipped; an UPDATE per moved lane.
CREATE OR REPLACE FUNCTION awa.qs_settle_claim_heads() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    lane record;
    low bigint;
    moved int := 0;
BEGIN
    FOR lane IN SELECT h.queue, h.priority, h.shard, h.claim_seq FROM awa.queue_claim_heads h
                 ORDER BY h.queue, h.priority, h.shard FOR UPDATE SKIP LOCKED LOOP
        -- The first live entry; with none, the lane's end (past gaps a tombstone or
        -- a skipped entry left, which would keep claims counting receipts): a
        -- producer yet to commit holds the enqueue head, so its entries land there
        -- or later.  An empty lane (NULL) stays where it is.
        -- The walk starts at the head (an index bound, not a filter) and stops at the
        -- first live entry: it holds the lane's lock, and claims wait for it.  (Through
        -- awa.qs_ready_live the head is a join filter: every entry of the lane since
        -- the last prune is read.)
        SELECT COALESCE(
                   (SELECT r.lane_seq FROM awa.ready_entries r
                     WHERE r.queue = lane.queue AND r.priority = lane.priority
                       AND r.shard = lane.shard AND r.lane_seq >= lane.claim_seq
                       AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                                        WHERE t.ready_id = r.ready_id)
                       AND NOT EXISTS (SELECT 1 FROM awa.lease_claims c
                                        WHERE c.job_id = r.job_id
                                          AND c.run_lease = r.run_lease + 1)
                     ORDER BY r.lane_seq LIMIT 1),
                   greatest((SELECT max(r.lane_seq) + 1 FROM awa.ready_entries r
                              WHERE r.queue = lane.queue AND r.priority = lane.priority
                                AND r.shard = lane.shard),
                            (SELECT max(c.lane_seq) + 1 FROM awa.lease_claims c
                              WHERE c.queue = lane.queue AND c.priority = lane.priority
                                AND c.shard = lane.shard)))
          INTO low;
        UPDATE awa.queue_claim_heads h SET claim_seq = low
         WHERE h.queue = lane.queue AND h.priority = lane.priority AND h.shard = lane.shard
           AND low > h.claim_seq;
        IF FOUND THEN
            moved := moved + 1;
        END IF;
    END LOOP;
    RETURN moved;
END $$;

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
         WHERE c.job_id = p_id
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                            WHERE x.claim_slot = c.claim_slot AND x.job_id = c.job_id
                              AND x.run_lease = c.run_lease)
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches b
                            WHERE b.claim_slot = c.claim_slot
                              AND b.receipt_ranges @> c.receipt_id)
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

-- Put a job row image where its state lives (available, deferred or terminal).
CREATE OR REPLACE FUNCTION awa.qs_place(j awa.jobs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lane record;
BEGIN
    IF j.state = 'available' THEN
        SELECT * INTO lane FROM awa.qs_reserve_lane(j.queue, j.priority);
        INSERT INTO awa.ready_entries (ready_slot, ready_id, job_id, queue, priority, shard,
                                       lane_seq, kind, args, attempt, max_attempts, run_at,
                                       attempted_at, created_at, errors, metadata, tags,
                                       unique_key, unique_states, run_lease, progress)
        VALUES (awa.qs_slot('queue'), nextval('awa.qs_ready_id_seq'), j.id, j.queue, j.priority,
                lane.lane_shard, lane.base, j.kind, j.args,
                j.attempt, j.max_attempts, j.run_at, j.attempted_at, j.created_at, j.errors,
                j.metadata, j.tags, j.unique_key, j.unique_states, j.run_lease, j.progress);
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
DECLARE
    c record;
BEGIN
    IF OLD.state IN ('running', 'waiting_external') AND NEW.state IN ('running', 'waiting_external')
       AND NEW.id = OLD.id AND NEW.run_lease = OLD.run_lease AND NEW.attempt = OLD.attempt THEN
        -- Still the same attempt: it lives on in a (materialized) lease.
        SELECT * INTO c FROM awa.lease_claims x
         WHERE x.job_id = OLD.id AND x.run_lease = OLD.run_lease LIMIT 1;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM awa.leases l
                        WHERE l.job_id = OLD.id AND l.run_lease = OLD.run_lease) THEN
            INSERT INTO awa.lease_claim_closure_batches (claim_slot, receipt_ranges, outcome)
            VALUES (c.claim_slot, int8multirange(int8range(c.receipt_id, c.receipt_id, '[]')),
                    'materialized')
            ON CONFLICT DO NOTHING;
            IF NOT FOUND THEN
                RETURN NULL;  -- closed meanwhile: the attempt is no longer running
            END IF;
            INSERT INTO awa.leases (lease_slot, job_id, run_lease, queue, state, attempt,
                                    claim_slot, receipt_id, ready_slot, ready_id, claimed_at,
                                    heartbeat_at, deadline_at)
            VALUES (awa.qs_slot('lease'), c.job_id, c.run_lease, c.queue, 'running', c.attempt,
                    c.claim_slot, c.receipt_id, c.ready_slot, c.ready_id, c.claimed_at,
                    COALESCE(OLD.heartbeat_at, now()), c.deadline_at);
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
