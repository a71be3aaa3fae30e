-- Queue storage: the lanes and the claim -- reserving positions at the end of a lane
-- (every append), the claim itself (awa.qs_claim) and the claim heads' settling.
-- Installed after open_receipts.sql (see procedures.FILES).

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

-- A plain batch (no unique key, nothing deferred: awa.qs_insert_plain,
-- awa.qs_enqueue_plain, and the direct COPY of releases before layout 9) names only
-- what the producer knows; ids and timestamps come from these defaults.
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

-- Move one lane's claim head to its low-water mark; the caller holds the lane's lock
-- (its queue_claim_heads row).  The first live entry; with none, the lane's end (past
-- gaps a tombstone or a skipped entry left, which would keep claims counting
-- receipts): a producer yet to commit holds the enqueue head, so its entries land there
-- or later.  An empty lane (NULL) stays where it is.  True when the head moved.
-- The walk starts at the head (an index bound, not a filter) and stops at the first
-- live entry: the lane is locked, and claims wait for it.  (Through awa.qs_ready_live
-- the head is a join filter: every entry of the lane since the last prune is read.)
CREATE OR REPLACE FUNCTION awa.qs_settle_lane(p_queue text, p_priority smallint,
                                              p_shard smallint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    low bigint;
BEGIN
    SELECT COALESCE(
               (SELECT r.lane_seq FROM awa.ready_entries r
                 WHERE r.queue = p_queue AND r.priority = p_priority AND r.shard = p_shard
                   AND r.lane_seq >= h.claim_seq
                   AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                                    WHERE t.ready_id = r.ready_id)
                   AND NOT EXISTS (SELECT 1 FROM awa.lease_claims c
                                    WHERE c.job_id = r.job_id
                                      AND c.run_lease = r.run_lease + 1)
                 ORDER BY r.lane_seq LIMIT 1),
               greatest((SELECT max(r.lane_seq) + 1 FROM awa.ready_entries r
                          WHERE r.queue = p_queue AND r.priority = p_priority
                            AND r.shard = p_shard),
                        (SELECT max(c.lane_seq) + 1 FROM awa.lease_claims c
                          WHERE c.queue = p_queue AND c.priority = p_priority
                            AND c.shard = p_shard)))
      INTO low
      FROM awa.queue_claim_heads h
     WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = p_shard;
    UPDATE awa.queue_claim_heads h SET claim_seq = low
     WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = p_shard
       AND low > h.claim_seq;
    RETURN FOUND;
END $$;

-- Move every idle lane's claim head to its low-water mark (the maintenance
-- leader, before prune: receipts of entries past the head keep their claim
-- slot alive).  Lanes a claimer holds are skipped; an UPDATE per moved lane.
CREATE OR REPLACE FUNCTION awa.qs_settle_claim_heads() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    lane record;
    moved int := 0;
BEGIN
    FOR lane IN SELECT h.queue, h.priority, h.shard FROM awa.queue_claim_heads h
                 ORDER BY h.queue, h.priority, h.shard FOR UPDATE SKIP LOCKED LOOP
        IF awa.qs_settle_lane(lane.queue, lane.priority, lane.shard) THEN
            moved := moved + 1;
        END IF;
    END LOOP;
    RETURN moved;
END $$;
