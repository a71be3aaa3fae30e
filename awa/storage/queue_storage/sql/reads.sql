-- Queue storage: the ops reads (awa/storage/queue_storage/reads.py), by name.  A statement
-- starts at a "-- name: <name>" line (awa.statements.named_statements reads them); the
-- layout's objects are spelled awa.<name> and moved by schema.in_schema.
-- Not here yet: the job lists' statements (reads.other_parts_newest, available_newest),
-- one per column list and state, still composed in reads.py.

-- name: queue_details
-- Per queue, as canonical's QUEUE_DETAILS: the oldest available job, completions in the
-- window, the pause flag.  The oldest available job is looked for where claims look, among
-- the first %(head)s (reads.OLDEST_AVAILABLE_HEAD) claimable entries of each lane (from where
-- the claim begins, awa.qs_lane_progress; a receipt is probed only below the lane's newest
-- claim): exact unless an entry further along a lane carries an older run_at than all of
-- those (a job enqueued with a run_at in the past behind a long backlog).  Completions are
-- counted from the done entries' (state, queue, finalized_at) index.  Canonical tables
-- (empty on a database this engine laid out) are read as canonical reads them.
WITH q AS (
    SELECT unnest(%(queues)s::text[]) AS queue
    UNION
    SELECT queue FROM awa.queue_meta
), o AS MATERIALIZED (
    SELECT q.queue,
           least((SELECT min(e.run_at) FROM awa.qs_lane_progress(q.queue) g
                   CROSS JOIN LATERAL (
                       SELECT r.run_at FROM awa.ready_entries r
                        WHERE r.queue = q.queue AND r.priority = g.priority
                          AND r.shard = g.shard AND r.lane_seq >= g.start_seq
                          AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones x
                                           WHERE x.ready_id = r.ready_id)
                          AND (r.lane_seq > g.claimed_max
                               OR NOT EXISTS (SELECT 1 FROM awa.lease_claims c
                                               WHERE c.job_id = r.job_id
                                                 AND c.run_lease = r.run_lease + 1))
                        ORDER BY r.lane_seq LIMIT %(head)s) e),
                 (SELECT min(o.run_at) FROM unnest(%(priorities)s::smallint[]) pr(priority)
                   CROSS JOIN LATERAL (
                       SELECT h.run_at FROM awa.jobs_hot h
                        WHERE h.state = 'available' AND h.queue = q.queue
                          AND h.priority = pr.priority
                        ORDER BY h.run_at LIMIT 1) o)) AS oldest_available,
           CASE WHEN %(since)s::timestamptz IS NULL THEN 0 ELSE
           (SELECT count(*) FROM (
                (SELECT 1 FROM awa.done_entries d
                  WHERE d.state = 'completed' AND d.queue = q.queue
                    AND d.finalized_at > %(since)s AND d.finalized_at <= %(until)s
                  LIMIT %(cap)s)
                UNION ALL
                (SELECT 1 FROM awa.jobs_hot h
                  WHERE h.state = 'completed' AND h.queue = q.queue
                    AND h.finalized_at > %(since)s AND h.finalized_at <= %(until)s
                  LIMIT %(cap)s)
                LIMIT %(cap)s) c) END AS completed
      FROM q
)
SELECT o.queue, o.oldest_available,
       CASE WHEN o.oldest_available IS NOT NULL
            THEN greatest(EXTRACT(EPOCH FROM (now() - o.oldest_available))::float8, 0) END AS lag_s,
       o.completed, coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by
  FROM o LEFT JOIN awa.queue_meta m ON m.queue = o.queue
 ORDER BY o.queue

-- name: recently_completed
-- The queues a job completed in lately: the done entries' (state, queue, finalized_at)
-- index, a probe per queue after a walk of the completed queues by name (LIMIT 1 keeps it a
-- probe: as a semi-join the planner reads every completion of the window instead), and the
-- canonical hot table likewise (idx_jobs_hot_state_queue, idx_jobs_hot_finalized).
SELECT queue FROM (
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM awa.done_entries t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM awa.done_entries t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT w.queue FROM (SELECT queue FROM walk LIMIT %(limit)s) w
 CROSS JOIN LATERAL (
       SELECT 1 FROM awa.done_entries t
        WHERE t.state = 'completed' AND t.queue = w.queue
          AND t.finalized_at > now() - make_interval(secs => %(within)s)
        LIMIT 1) r
) d
UNION
SELECT queue FROM (
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT w.queue FROM (SELECT queue FROM walk LIMIT %(limit)s) w
 CROSS JOIN LATERAL (
       SELECT 1 FROM awa.jobs_hot t
        WHERE t.state = 'completed' AND t.queue = w.queue
          AND t.finalized_at > now() - make_interval(secs => %(within)s)
        LIMIT 1) r
) h
ORDER BY queue LIMIT %(limit)s

-- name: available_scanned_past
-- Whether the job lists' walk of the available part newest first by job id (at most
-- %(scan)s entries, reads.AVAILABLE_SCAN_MAX) could have stopped short: then the lanes are
-- read instead.
SELECT EXISTS (SELECT 1 FROM awa.ready_entries r
                WHERE (%(before_id)s::bigint IS NULL OR r.job_id < %(before_id)s)
                  AND (%(above_id)s::bigint IS NULL OR r.job_id > %(above_id)s)
                ORDER BY r.job_id DESC OFFSET %(scan)s) AS more

-- name: available_candidates
-- How many entries the lanes (of the queue asked for) hold from their claim heads on: what
-- reading the available part by lane would read.
SELECT COALESCE(sum(greatest(t.top - h.claim_seq + 1, 0)), 0)::bigint AS candidates
  FROM awa.queue_claim_heads h
 CROSS JOIN LATERAL (
       SELECT max(r.lane_seq) AS top FROM awa.ready_entries r
        WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard) t
 WHERE (%(queue)s::text IS NULL OR h.queue = %(queue)s)

-- name: state_counts
-- Jobs per state (the REST API's /api/stats), each state counted where it lives.  Available:
-- every claimable ready entry, each lane's entries from its claim head on by the lane index,
-- with the claim's rule (awa.qs_claim): no tombstone (looked for only when any exists), and
-- no receipt (probed only at or below the lane's newest claimed position,
-- awa.qs_lane_progress).  Each lane's progress is read once, before its entries: inlined,
-- its newest-claim probe ran (memoized) once per entry, and a receipt was looked for by
-- hashing every lease claim; 300 ms for 200,000 waiting jobs on the ops benchmark, 80 ms
-- this way.
SELECT 'available' AS state, count(*) AS n FROM (
SELECT g.queue, r.run_at, r.kind
  FROM (
    WITH g AS MATERIALIZED (
        SELECT q.queue, p.priority, p.shard, p.claim_seq, p.claimed_max
          FROM (SELECT DISTINCT h.queue FROM awa.queue_claim_heads h) q
         CROSS JOIN LATERAL awa.qs_lane_progress(q.queue) p)
    SELECT * FROM g) g
 CROSS JOIN LATERAL (
       SELECT r.ready_id, r.job_id, r.run_lease, r.run_at, r.lane_seq, r.kind
         FROM awa.ready_entries r
        WHERE r.queue = g.queue AND r.priority = g.priority AND r.shard = g.shard
          AND r.lane_seq >= g.claim_seq
       OFFSET 0) r
 WHERE (NOT (SELECT awa.qs_any_tombstone())
        OR NOT EXISTS (SELECT 1 FROM awa.ready_tombstones x WHERE x.ready_id = r.ready_id))
   AND (r.lane_seq > g.claimed_max OR NOT awa.qs_receipted(r.job_id, r.run_lease + 1))) a HAVING count(*) > 0
UNION ALL
SELECT 'running', count(*)
  FROM awa.qs_open_receipts c
  JOIN awa.ready_entries r
    ON r.job_id = c.job_id AND r.ready_slot = c.ready_slot AND r.ready_id = c.ready_id
HAVING count(*) > 0
UNION ALL
SELECT l.state::text, count(*)
  FROM awa.leases l
  JOIN awa.ready_entries r
    ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
 GROUP BY l.state
UNION ALL
SELECT state::text, count(*) FROM awa.done_entries GROUP BY state
UNION ALL
SELECT state::text, count(*) FROM awa.deferred_jobs GROUP BY state
UNION ALL
SELECT state::text, count(*) FROM awa.jobs_hot GROUP BY state
UNION ALL
SELECT state::text, count(*) FROM awa.scheduled_jobs GROUP BY state
UNION ALL
SELECT 'failed', count(*) FROM awa.dlq_entries

-- name: kind_counts
-- Per kind and queue (the REST API's /api/kinds), each part of the layout read by index up
-- to %(cap)s, each part saying "capped" when it reached it (common.reads.KIND_ROWS_IN,
-- COMPLETED_KINDS_IN): the canonical tables (empty on a database this engine laid out); deferred
-- jobs and failed/cancelled done entries by their kind indexes, a loose index scan over
-- their kinds (at most %(max_kinds)s); completed done entries by queue, newest first; and the
-- unfinished ones -- claimable entries by lane (as state_counts), running receipts and
-- leases -- which no kind index serves: at most %(cap)s of them.
SELECT * FROM (
WITH RECURSIVE kinds AS (
    (SELECT t.kind FROM awa.jobs_hot t WHERE true ORDER BY t.kind LIMIT 1)
    UNION ALL
    SELECT n.kind FROM kinds p CROSS JOIN LATERAL (
        SELECT t.kind FROM awa.jobs_hot t WHERE t.kind > p.kind ORDER BY t.kind LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n, 0::bigint AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT k.kind, r.queue FROM (SELECT kind FROM kinds LIMIT %(max_kinds)s) k
         CROSS JOIN LATERAL (
               SELECT t.queue FROM awa.jobs_hot t
                WHERE t.kind = k.kind AND t.state = ANY(%(hot_states)s::awa.job_state[])
                LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue
) hot
UNION ALL
SELECT * FROM (
WITH RECURSIVE kinds AS (
    (SELECT t.kind FROM awa.scheduled_jobs t WHERE true ORDER BY t.kind LIMIT 1)
    UNION ALL
    SELECT n.kind FROM kinds p CROSS JOIN LATERAL (
        SELECT t.kind FROM awa.scheduled_jobs t WHERE t.kind > p.kind ORDER BY t.kind LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n, 0::bigint AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT k.kind, r.queue FROM (SELECT kind FROM kinds LIMIT %(max_kinds)s) k
         CROSS JOIN LATERAL (
               SELECT t.queue FROM awa.scheduled_jobs t
                WHERE t.kind = k.kind AND t.state = ANY(%(deferred_states)s::awa.job_state[])
                LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue
) deferred
UNION ALL
SELECT * FROM (
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM awa.jobs_hot t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n,
       count(*) FILTER (WHERE r.finalized_at > now() - interval '1 hour') AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT r.kind, w.queue, r.finalized_at FROM (SELECT queue FROM walk LIMIT %(max_kinds)s) w
         CROSS JOIN LATERAL (
               SELECT t.kind, t.finalized_at FROM awa.jobs_hot t
                WHERE t.state = 'completed' AND t.queue = w.queue AND t.finalized_at IS NOT NULL
                ORDER BY t.finalized_at DESC LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue
) hot_completed
UNION ALL
SELECT * FROM (
WITH RECURSIVE kinds AS (
    (SELECT t.kind FROM awa.deferred_jobs t WHERE true ORDER BY t.kind LIMIT 1)
    UNION ALL
    SELECT n.kind FROM kinds p CROSS JOIN LATERAL (
        SELECT t.kind FROM awa.deferred_jobs t WHERE t.kind > p.kind ORDER BY t.kind LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n, 0::bigint AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT k.kind, r.queue FROM (SELECT kind FROM kinds LIMIT %(max_kinds)s) k
         CROSS JOIN LATERAL (
               SELECT t.queue FROM awa.deferred_jobs t
                WHERE t.kind = k.kind AND t.state = ANY(%(deferred_states)s::awa.job_state[])
                LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue
) deferred_jobs
UNION ALL
SELECT * FROM (
WITH RECURSIVE kinds AS (
    (SELECT t.kind FROM awa.done_entries t WHERE true AND t.state <> 'completed' ORDER BY t.kind LIMIT 1)
    UNION ALL
    SELECT n.kind FROM kinds p CROSS JOIN LATERAL (
        SELECT t.kind FROM awa.done_entries t WHERE t.kind > p.kind AND t.state <> 'completed' ORDER BY t.kind LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n, 0::bigint AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT k.kind, r.queue FROM (SELECT kind FROM kinds LIMIT %(max_kinds)s) k
         CROSS JOIN LATERAL (
               SELECT t.queue FROM awa.done_entries t
                WHERE t.kind = k.kind AND t.state = ANY(ARRAY['failed', 'cancelled']::awa.job_state[]) AND t.state <> 'completed'
                LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue
) done
UNION ALL
SELECT * FROM (
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM awa.done_entries t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM awa.done_entries t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT r.kind, r.queue, count(*) AS n,
       count(*) FILTER (WHERE r.finalized_at > now() - interval '1 hour') AS recent,
       sum(count(*)) OVER () >= %(cap)s AS capped
  FROM (SELECT r.kind, w.queue, r.finalized_at FROM (SELECT queue FROM walk LIMIT %(max_kinds)s) w
         CROSS JOIN LATERAL (
               SELECT t.kind, t.finalized_at FROM awa.done_entries t
                WHERE t.state = 'completed' AND t.queue = w.queue AND t.finalized_at IS NOT NULL
                ORDER BY t.finalized_at DESC LIMIT %(cap)s) r
         LIMIT %(cap)s) r
 GROUP BY r.kind, r.queue
) done_completed
UNION ALL
SELECT u.kind, u.queue, count(*), 0::bigint, sum(count(*)) OVER () >= %(cap)s
  FROM (SELECT a.kind, a.queue FROM (
SELECT g.queue, r.run_at, r.kind
  FROM (
    WITH g AS MATERIALIZED (
        SELECT q.queue, p.priority, p.shard, p.claim_seq, p.claimed_max
          FROM (SELECT DISTINCT h.queue FROM awa.queue_claim_heads h) q
         CROSS JOIN LATERAL awa.qs_lane_progress(q.queue) p)
    SELECT * FROM g) g
 CROSS JOIN LATERAL (
       SELECT r.ready_id, r.job_id, r.run_lease, r.run_at, r.lane_seq, r.kind
         FROM awa.ready_entries r
        WHERE r.queue = g.queue AND r.priority = g.priority AND r.shard = g.shard
          AND r.lane_seq >= g.claim_seq
       OFFSET 0) r
 WHERE (NOT (SELECT awa.qs_any_tombstone())
        OR NOT EXISTS (SELECT 1 FROM awa.ready_tombstones x WHERE x.ready_id = r.ready_id))
   AND (r.lane_seq > g.claimed_max OR NOT awa.qs_receipted(r.job_id, r.run_lease + 1))) a
        UNION ALL
        SELECT r.kind, r.queue
          FROM awa.qs_open_receipts c
          JOIN awa.ready_entries r
            ON r.job_id = c.job_id AND r.ready_slot = c.ready_slot AND r.ready_id = c.ready_id
        UNION ALL
        SELECT r.kind, r.queue
          FROM awa.leases l
          JOIN awa.ready_entries r
            ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
        LIMIT %(cap)s) u
 GROUP BY u.kind, u.queue

