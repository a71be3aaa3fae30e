-- Receipt-mode short-job claims that haven't materialized yet. No
-- heartbeat row; deadline_at lives on the claim if deadline_duration > 0
-- and the receipt-side deadline rescue (`rescue_expired_receipt_deadlines_tx`)
-- is what kicks in here. Anti-join with closure evidence to filter
-- "still open".
SELECT
    c.job_id,
    c.queue,
    c.attempt,
    c.claimed_at,
    c.deadline_at,
    EXTRACT(EPOCH FROM (now() - c.claimed_at)) AS claimed_age_s,
    EXTRACT(EPOCH FROM (c.deadline_at - now())) AS deadline_remaining_s
FROM awa.lease_claims c
WHERE NOT EXISTS (
    SELECT 1 FROM awa.lease_claim_closures cx
    WHERE cx.claim_slot = c.claim_slot
      AND cx.job_id = c.job_id
      AND cx.run_lease = c.run_lease
)
AND NOT EXISTS (
    SELECT 1 FROM awa.lease_claim_closure_batches cb
    WHERE cb.receipt_ranges @> c.receipt_id
)
ORDER BY c.claimed_at ASC;
