-- Queue storage: the maintenance group's statements (awa/storage/queue_storage/maintenance.py),
-- by name.  A statement starts at a "-- name: <name>" line (awa.statements.named_statements
-- reads them); the layout's objects are spelled awa.<name> and moved by schema.in_schema.
-- Not here yet: promotion's move and the cron runs' insert, which append to a lane through
-- enqueue.py's APPEND_READY.

-- name: stale_candidates
-- Rescue: attempts whose heartbeat (a lease) or claim (a receipt that never heartbeated) is
-- older than the staleness.  The receipt branch picks the open receipts past the cutoff
-- first (from the gaps between closed ranges: never a test of every receipt the claim ring
-- holds), and only then probes each one's ready entry (an index probe apiece).
(SELECT l.job_id AS id, l.run_lease, r.kind, r.queue, l.attempt AS attempt, r.max_attempts,
        'lease' AS source, l.heartbeat_at AS since
   FROM awa.leases l
   JOIN awa.ready_entries r
     ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
  WHERE l.state = 'running' AND l.heartbeat_at < now() - make_interval(secs => %(staleness_s)s)
  ORDER BY l.heartbeat_at LIMIT %(limit)s)
UNION ALL
(SELECT c.job_id, c.run_lease, r.kind, c.queue, c.attempt, r.max_attempts, 'receipt',
        c.claimed_at
   FROM (SELECT c.* FROM awa.qs_open_receipts c
          WHERE c.claimed_at < now() - make_interval(secs => %(staleness_s)s)
          ORDER BY c.claimed_at LIMIT %(limit)s) c
  CROSS JOIN LATERAL (SELECT r.kind, r.max_attempts FROM awa.ready_entries r
                       WHERE r.job_id = c.job_id AND r.ready_slot = c.ready_slot
                         AND r.ready_id = c.ready_id LIMIT 1) r)
ORDER BY since LIMIT %(limit)s

-- name: deadline_candidates
-- Rescue: attempts past their deadline, leases and open receipts (as stale_candidates).
(SELECT l.job_id AS id, l.run_lease, r.kind, r.queue, l.attempt AS attempt, r.max_attempts,
        'lease' AS source, l.deadline_at AS since
   FROM awa.leases l
   JOIN awa.ready_entries r
     ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
  WHERE l.state = 'running' AND l.deadline_at < now()
  ORDER BY l.deadline_at LIMIT %(limit)s)
UNION ALL
(SELECT c.job_id, c.run_lease, r.kind, c.queue, c.attempt, r.max_attempts, 'receipt',
        c.deadline_at
   FROM (SELECT c.* FROM awa.qs_open_receipts c
          WHERE c.deadline_at < now()
          ORDER BY c.deadline_at LIMIT %(limit)s) c
  CROSS JOIN LATERAL (SELECT r.kind, r.max_attempts FROM awa.ready_entries r
                       WHERE r.job_id = c.job_id AND r.ready_slot = c.ready_slot
                         AND r.ready_id = c.ready_id LIMIT 1) r)
ORDER BY since LIMIT %(limit)s

-- name: callback_candidates
-- Rescue: callback waits past their timeout (only leases wait).
SELECT l.job_id AS id, l.run_lease, r.kind, r.queue, l.attempt AS attempt, r.max_attempts,
       'lease' AS source, l.callback_timeout_at AS since
  FROM awa.leases l
  JOIN awa.ready_entries r
    ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
 WHERE l.state = 'waiting_external' AND l.callback_timeout_at < now()
 ORDER BY l.callback_timeout_at LIMIT %(limit)s

-- name: select_due
-- Promotion: the due deferred jobs of queues not paused.
SELECT s.id, s.attempt, s.kind, s.queue
  FROM awa.deferred_jobs s
 WHERE s.run_at <= now()
   AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = s.queue AND m.paused)
 ORDER BY s.run_at, s.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: cancel_deferred_as_duplicate
-- Promotion's collision fallback: the deferred job whose unique key another holds, cancelled.
WITH d AS (DELETE FROM awa.deferred_jobs WHERE id = %(id)s RETURNING *),
uq AS (
    DELETE FROM awa.job_unique_claims x USING d
     WHERE d.unique_key IS NOT NULL AND x.unique_key = d.unique_key AND x.job_id = d.id
)
INSERT INTO awa.done_entries (ready_slot, id, kind, queue, args, state, priority, attempt,
       max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
       errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
       callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
       progress)
SELECT (SELECT awa.qs_slot('queue')), d.id, d.kind, d.queue, d.args, 'cancelled'::awa.job_state,
       d.priority, d.attempt, d.max_attempts, d.run_at, d.heartbeat_at, d.deadline_at,
       d.attempted_at, now(), d.created_at,
       array_append(COALESCE(d.errors, '{}'::jsonb[]), %(error)s::jsonb), d.metadata, d.tags,
       d.unique_key, d.unique_states, d.callback_id, d.callback_timeout_at, d.callback_filter,
       d.callback_on_complete, d.callback_on_fail, d.callback_transform, d.run_lease,
       d.progress
  FROM d
RETURNING id, kind, queue

-- name: delete_finalized_default
-- Retention.  History is reclaimed by rotation: a sealed queue slot is truncated once all of
-- it is past retention (rings.prune).  Row deletes are only for what rotation cannot reach:
-- rows past retention still in the current slot (the ring could not rotate) ...
DELETE FROM awa.done_entries
 WHERE (ready_slot, id) IN (
    SELECT ready_slot, id FROM awa.done_entries
     WHERE state = %(state)s::awa.job_state
       AND finalized_at < now() - make_interval(secs => %(age_s)s)
       AND queue <> ALL(%(excluded_queues)s::text[]) AND ready_slot = awa.qs_slot('queue')
     LIMIT %(limit)s)

-- name: delete_finalized_queue
-- ... and a queue's own shorter retention (an explicit per-queue override).
DELETE FROM awa.done_entries
 WHERE (ready_slot, id) IN (
    SELECT ready_slot, id FROM awa.done_entries
     WHERE state = %(state)s::awa.job_state
       AND finalized_at < now() - make_interval(secs => %(age_s)s)
       AND queue = %(queue)s
     LIMIT %(limit)s)

-- name: queue_depths
-- Queue depths: each state counted where it lives, never through the whole view.
-- Available: per lane, counted from its claim frontier (awa.qs_lane_progress) without
-- reading the entries: a lane's positions are dense (each append takes the next ones,
-- under the enqueue head's lock), so the waiting entries are the positions from the
-- frontier to the lane's end less those a receipt claimed or a tombstone removed -- two
-- index counts near the frontier and one tombstone join, however deep the backlog
-- (counting the entries themselves took a second a read at 200,000 waiting, every
-- queue-health tick).  The lag is the lane head's: the entry the next claim takes.
-- Running: the open receipts (awa.qs_open_receipts) and the leases.  The rest from
-- their own tables' indexes.
WITH lanes AS MATERIALIZED (
    SELECT q.queue, p.* FROM (SELECT DISTINCT h.queue FROM awa.queue_claim_heads h) q
     CROSS JOIN LATERAL awa.qs_lane_progress(q.queue) p
), waiting AS (
    SELECT l.queue, greatest(e.lane_end - l.start_seq - k.claimed - t.removed, 0) AS n,
           f.run_at AS head_run_at
      FROM lanes l
      CROSS JOIN LATERAL (
          SELECT greatest((SELECT max(r.lane_seq) + 1 FROM awa.ready_entries r
                            WHERE r.queue = l.queue AND r.priority = l.priority
                              AND r.shard = l.shard),
                          l.claimed_max + 1, l.start_seq) AS lane_end) e
      CROSS JOIN LATERAL (
          SELECT count(*) AS claimed FROM awa.lease_claims c
           WHERE c.queue = l.queue AND c.priority = l.priority AND c.shard = l.shard
             AND c.lane_seq >= l.start_seq) k
      CROSS JOIN LATERAL (
          SELECT count(*) AS removed FROM awa.ready_tombstones x
            JOIN awa.ready_entries r ON r.job_id = x.job_id AND r.ready_id = x.ready_id
           WHERE r.queue = l.queue AND r.priority = l.priority AND r.shard = l.shard
             AND r.lane_seq >= l.start_seq) t
      LEFT JOIN LATERAL (
          SELECT r.run_at FROM awa.ready_entries r
           WHERE r.queue = l.queue AND r.priority = l.priority AND r.shard = l.shard
             AND r.lane_seq >= l.start_seq
             AND (NOT (SELECT awa.qs_any_tombstone()) OR NOT awa.qs_tombstoned(r.ready_id))
             AND (r.lane_seq > l.claimed_max OR NOT awa.qs_receipted(r.job_id, r.run_lease + 1))
           ORDER BY r.lane_seq LIMIT 1) f ON true
)
SELECT queue, 'available' AS state, sum(n)::bigint AS n,
       min(head_run_at) AS oldest_available_at, now() AS db_now
  FROM waiting WHERE 'available' = ANY(%(states)s::text[])
 GROUP BY queue HAVING sum(n) > 0
UNION ALL
SELECT c.queue, 'running', count(*), NULL, now()
  FROM awa.qs_open_receipts c
 WHERE 'running' = ANY(%(states)s::text[])
 GROUP BY c.queue
UNION ALL
SELECT l.queue, l.state::text, count(*), NULL, now()
  FROM awa.leases l WHERE l.state::text = ANY(%(states)s::text[]) GROUP BY l.queue, l.state
UNION ALL
SELECT d.queue, d.state::text, count(*), NULL, now()
  FROM awa.deferred_jobs d WHERE d.state::text = ANY(%(states)s::text[])
 GROUP BY d.queue, d.state
UNION ALL
SELECT d.queue, 'failed', count(*), NULL, now()
  FROM awa.done_entries d
 WHERE d.state = 'failed' AND 'failed' = ANY(%(states)s::text[])
 GROUP BY d.queue
UNION ALL
SELECT queue, NULL, count(*), NULL, now() FROM awa.dlq_entries GROUP BY queue

-- name: advance_receipt_watermark
SELECT awa.qs_advance_receipt_watermark()
