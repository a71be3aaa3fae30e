-- Queue storage: which ready entries can still be claimed and which receipts are still
-- open (docs/architecture.md §7), read by the claim, rescue, prune, depth and awa.jobs.
-- Installed after layout.sql (see procedures.FILES).

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
-- The one rule for "this receipt's attempt is still open": no closure evidence, neither
-- per receipt (awa.lease_claim_closures, written by no layout since version 2 but still
-- read) nor in a batch's ranges.  Called as CROSS JOIN LATERAL awa.qs_receipt_is_open(...)
-- by the attempt-closing functions, the callback registration and qs_remove_live
-- (qs_open_receipts below is its set form).  LANGUAGE sql, STABLE, one SELECT and no SET: the planner inlines it
-- into the calling statement, so a caller's plan holds the two index probes as if written
-- in place, never a function call per receipt (tests/storage/test_installed_sql.py checks).
CREATE OR REPLACE FUNCTION awa.qs_receipt_is_open(p_claim_slot smallint, p_job_id bigint,
                                                  p_run_lease bigint, p_receipt_id bigint)
RETURNS TABLE (is_open boolean)
LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                        WHERE x.claim_slot = p_claim_slot AND x.job_id = p_job_id
                          AND x.run_lease = p_run_lease)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches b
                        WHERE b.claim_slot = p_claim_slot AND b.receipt_ranges @> p_receipt_id)
$$;

-- One attempt's receipt (by job id and run lease: a receipt is unique per attempt), with
-- what ending or materializing the attempt needs and c_open, the rule above.  The ``att``
-- step of every attempt-ending function (sql/execution.sql).  Inlined like the rule: one
-- index probe per attempt in the caller's plan, never a hash join over the claim ring.
CREATE OR REPLACE FUNCTION awa.qs_attempt_receipt(p_job_id bigint, p_run_lease bigint)
RETURNS TABLE (claim_slot smallint, receipt_id bigint, c_attempt smallint,
               claimed_at timestamptz, c_deadline timestamptz, ready_slot smallint,
               ready_id bigint, c_queue text, c_claimed_by uuid, c_open boolean)
LANGUAGE sql STABLE AS $$
    SELECT c.claim_slot, c.receipt_id, c.attempt, c.claimed_at, c.deadline_at, c.ready_slot,
           c.ready_id, c.queue, c.claimed_by, o.is_open
      FROM (SELECT * FROM awa.lease_claims x
             WHERE x.job_id = p_job_id AND x.run_lease = p_run_lease LIMIT 1) c
      CROSS JOIN LATERAL awa.qs_receipt_is_open(c.claim_slot, c.job_id, c.run_lease,
                                                c.receipt_id) o
$$;

-- The rule over many receipts, in set form: the batch ranges are subtracted as ranges
-- (awa.qs_open_receipt_gaps), so only the receipts in the gaps are read and only the
-- per-receipt closures are probed.  Testing each of them by awa.qs_receipt_is_open instead
-- probes the batches again for every open receipt: counting 5,000 open receipts took
-- 7.1-7.4 ms that way against 1.3 ms this way, on every rescue, depth count and read.
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
