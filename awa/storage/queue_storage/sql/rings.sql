-- Queue storage: ring rotation and prune (awa/storage/queue_storage/rings.py), by name.
-- A statement starts at a "-- name: <name>" line (awa.statements.named_statements reads
-- them); the layout's objects are spelled awa.<name> and moved by schema.in_schema.
-- Not here: the statements on one partition (its emptiness, the occupied-slot probes, LOCK
-- and TRUNCATE), whose table is an identifier rings.py composes (psycopg.sql.Identifier).

-- name: ring_state
-- Every ring's position.
SELECT ring, current_slot, slot_count, generation,
       EXTRACT(EPOCH FROM (now() - rotated_at))::float8 AS rotated_age_s
  FROM awa.queue_ring_state

-- name: lock_ring
SELECT current_slot, slot_count, extract(epoch FROM now() - rotated_at) AS age_s
  FROM awa.queue_ring_state WHERE ring = %(ring)s FOR UPDATE

-- name: advance
UPDATE awa.queue_ring_state
   SET current_slot = %(next)s, generation = generation + 1, rotated_at = now()
 WHERE ring = %(ring)s AND current_slot = %(current)s

-- name: settle_claim_heads
SELECT awa.qs_settle_claim_heads()

-- name: set_lock_timeout
SELECT set_config('lock_timeout', %(ms)s, true)

-- name: queue_slot_live
-- What keeps a queue slot alive: the first live condition, as a blocker name
-- (awa.storage.engine.PRUNE_BLOCKER_*), or NULL when nothing does; CASE stops at the
-- first, as OR would.
SELECT CASE
  WHEN EXISTS (SELECT 1 FROM awa.qs_ready_live r WHERE r.ready_slot = %(slot)s)
    THEN 'ready'
  WHEN EXISTS (SELECT 1 FROM awa.qs_open_receipts c WHERE c.ready_slot = %(slot)s)
    THEN 'receipt'
  WHEN EXISTS (SELECT 1 FROM awa.leases l WHERE l.ready_slot = %(slot)s)
    THEN 'lease'
  WHEN EXISTS (SELECT 1 FROM awa.done_entries d
              WHERE d.ready_slot = %(slot)s AND d.state <> 'failed'
                AND d.finalized_at > now() - make_interval(secs => %(completed_s)s))
    THEN 'retention'
  END AS blocker

-- name: carry_failed
-- Failed rows inside the failed-retention floor, carried forward to the current slot.
INSERT INTO awa.done_entries
SELECT (SELECT awa.qs_slot('queue')), d.id, d.kind, d.queue, d.args, d.state, d.priority, d.attempt,
       d.max_attempts, d.run_at, d.heartbeat_at, d.deadline_at, d.attempted_at, d.finalized_at,
       d.created_at, d.errors, d.metadata, d.tags, d.unique_key, d.unique_states,
       d.callback_id, d.callback_timeout_at, d.callback_filter, d.callback_on_complete,
       d.callback_on_fail, d.callback_transform, d.run_lease, d.progress
  FROM awa.done_entries d
 WHERE d.ready_slot = %(slot)s AND d.state = 'failed'
   AND d.finalized_at > now() - make_interval(secs => %(failed_s)s)

-- name: claim_slot_live
-- What keeps a claim slot alive (as queue_slot_live).
SELECT CASE
  WHEN EXISTS (SELECT 1 FROM awa.qs_open_receipts c WHERE c.claim_slot = %(slot)s)
    THEN 'receipt'
  WHEN EXISTS (SELECT 1 FROM awa.leases l WHERE l.claim_slot = %(slot)s)
    THEN 'lease'
  WHEN EXISTS (SELECT 1 FROM awa.lease_claims c
               JOIN awa.queue_claim_heads h
                 ON h.queue = c.queue AND h.priority = c.priority AND h.shard = c.shard
               JOIN awa.ready_entries r
                 ON r.job_id = c.job_id AND r.ready_slot = c.ready_slot AND r.ready_id = c.ready_id
              WHERE c.claim_slot = %(slot)s
                -- a receipt holds its entry's lane position (-1: from before receipts kept
                -- it), so only receipts at or past their lane's head fetch the entry
                AND (c.lane_seq >= h.claim_seq OR c.lane_seq < 0) AND r.lane_seq >= h.claim_seq
               AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                                WHERE t.ready_id = r.ready_id))
    THEN 'ready'
  END AS blocker

-- name: lease_slot_live
-- What keeps a lease slot alive (as queue_slot_live).
SELECT CASE WHEN EXISTS (SELECT 1 FROM awa.leases WHERE lease_slot = %(slot)s)
    THEN 'lease' END AS blocker
