-- Queue storage: the admin group's statements (awa/storage/queue_storage/admin.py), by name.
-- A statement starts at a "-- name: <name>" line (awa.statements.named_statements reads
-- them); the layout's objects are spelled awa.<name> and moved by schema.in_schema.
-- Not here yet: the redrives (retry of a finished job, retry from the DLQ), which append to
-- a lane through enqueue.py's APPEND_READY; the cancel of a running attempt and the retry of a
-- parked one, which are execution.py's and callbacks.py's statements.

-- name: current
-- A job's state, lease and queue (awa.jobs), before an operator's change.
SELECT state::text AS state, run_lease, queue FROM awa.jobs WHERE id = %(id)s

-- name: live_ready
-- The live ready entries of jobs (normally one each) and their lanes.
SELECT r.ready_slot, r.ready_id, r.queue, r.priority, r.shard
  FROM awa.qs_ready_live r
 WHERE r.job_id = ANY(%(ids)s::bigint[])

-- name: lock_lanes
-- The claim heads of those lanes, locked in order: no claim races the change.
SELECT 1 FROM awa.queue_claim_heads
 WHERE (queue, priority, shard) IN (
       SELECT * FROM unnest(%(queues)s::text[], %(priorities)s::smallint[],
              %(shards)s::smallint[]))
 ORDER BY queue, priority, shard
   FOR UPDATE

-- name: cancel_ready
-- Tombstone the (still live, rechecked under the lane lock) ready entries of the jobs and
-- record them cancelled.
WITH live AS MATERIALIZED (
SELECT r.*
  FROM awa.qs_ready_live r
 WHERE r.job_id = ANY(%(ids)s::bigint[])
), tomb AS (
    INSERT INTO awa.ready_tombstones (ready_slot, ready_id, job_id, reason)
    SELECT ready_slot, ready_id, job_id, %(reason)s FROM live
), done AS (
    INSERT INTO awa.done_entries (ready_slot, id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress)
    SELECT (SELECT awa.qs_slot('queue')), job_id, kind, queue, args, 'cancelled', priority,
           attempt,
           max_attempts, run_at, NULL, NULL, attempted_at, now(), created_at, errors, metadata,
           tags, unique_key, unique_states, NULL, NULL, NULL, NULL, NULL, NULL, run_lease,
           progress
      FROM live
    RETURNING *
), uq AS (
    DELETE FROM awa.job_unique_claims x USING done d
     WHERE d.unique_key IS NOT NULL AND x.unique_key = d.unique_key AND x.job_id = d.id
       AND NOT awa.qs_in_mask(d.unique_states, 'cancelled')
)
SELECT * FROM done

-- name: cancel_deferred
-- Cancel scheduled / retryable jobs: out of deferred_jobs, into done_entries.
WITH m AS (
    DELETE FROM awa.deferred_jobs WHERE id = ANY(%(ids)s::bigint[]) RETURNING *
), done AS (
    INSERT INTO awa.done_entries (ready_slot, id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress)
    SELECT (SELECT awa.qs_slot('queue')), id, kind, queue, args, 'cancelled', priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, now(), created_at, errors,
           metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress
      FROM m
    RETURNING *
), uq AS (
    DELETE FROM awa.job_unique_claims x USING done d
     WHERE d.unique_key IS NOT NULL AND x.unique_key = d.unique_key AND x.job_id = d.id
       AND NOT awa.qs_in_mask(d.unique_states, 'cancelled')
)
SELECT * FROM done

-- name: lock_queue_lanes
-- Drain: the lanes of a queue, locked in order ...
SELECT 1 FROM awa.queue_claim_heads WHERE queue = %(queue)s
 ORDER BY priority, shard FOR UPDATE

-- name: drain_queue
-- ... and its live ready entries and deferred jobs, cancelled.
WITH live AS MATERIALIZED (
    SELECT r.*
      FROM awa.qs_ready_live r
     WHERE r.queue = %(queue)s
), tomb AS (
    INSERT INTO awa.ready_tombstones (ready_slot, ready_id, job_id, reason)
    SELECT ready_slot, ready_id, job_id, 'drained' FROM live
), m AS (
    DELETE FROM awa.deferred_jobs WHERE queue = %(queue)s RETURNING *
), gone AS (
    SELECT job_id AS id, kind, queue, args, priority, attempt, max_attempts, run_at,
           attempted_at, created_at, errors, metadata, tags, unique_key, unique_states,
           run_lease, progress FROM live
    UNION ALL
    SELECT id, kind, queue, args, priority, attempt, max_attempts, run_at, attempted_at,
           created_at, errors, metadata, tags, unique_key, unique_states, run_lease, progress
      FROM m
), done AS (
    INSERT INTO awa.done_entries (ready_slot, id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress)
    SELECT (SELECT awa.qs_slot('queue')), id, kind, queue, args, 'cancelled', priority, attempt,
           max_attempts, run_at, NULL, NULL, attempted_at, now(), created_at, errors, metadata,
           tags, unique_key, unique_states, NULL, NULL, NULL, NULL, NULL, NULL, run_lease,
           progress
      FROM gone
    RETURNING id, kind, unique_key, unique_states
), uq AS (
    DELETE FROM awa.job_unique_claims x USING done d
     WHERE d.unique_key IS NOT NULL AND x.unique_key = d.unique_key AND x.job_id = d.id
       AND NOT awa.qs_in_mask(d.unique_states, 'cancelled')
)
SELECT kind, %(queue)s AS queue, count(*) AS drained FROM done GROUP BY kind

-- name: kinds_of
-- The kinds of jobs, counted (drain's callback waits).
SELECT kind, count(*) AS n FROM awa.jobs WHERE id = ANY(%(ids)s::bigint[]) GROUP BY kind

-- name: waiting_in_queue
-- Drain also cancels the queue's callback waits (their leases end 'cancelled').
SELECT job_id, run_lease FROM awa.leases
 WHERE queue = %(queue)s AND state = 'waiting_external'
 ORDER BY job_id

-- name: queue_stats
-- The queue statistics every engine reports, each state counted where it lives rather
-- than through awa.jobs (whose available part hash-joins every ready entry of the ring:
-- 1.6 s on the ops benchmark's database).  Available: each lane's entries from its claim
-- head on, by the lane index, with the claim's rule for receipts (only an entry at or
-- below the lane's newest claimed position can have one: awa.qs_lane_progress), each
-- lane's progress read once, before its entries; the rest as the view's branches, from
-- their own tables; canonical's tables (empty on a database this engine laid out) as
-- canonical counts them (common.tables.CANONICAL_DEPTH_COUNTS, common.admin.QUEUE_STATS_ROWS).
WITH avail AS MATERIALIZED (
SELECT g.queue, sum(l.n)::bigint AS n, min(l.oldest) AS oldest
  FROM (
    WITH g AS MATERIALIZED (
        SELECT q.queue, p.priority, p.shard, p.claim_seq, p.claimed_max
          FROM (SELECT DISTINCT h.queue FROM awa.queue_claim_heads h) q
         CROSS JOIN LATERAL awa.qs_lane_progress(q.queue) p)
    SELECT * FROM g) g
 CROSS JOIN LATERAL (
       SELECT count(*) AS n, min(r.run_at) AS oldest
         FROM awa.ready_entries r
        WHERE r.queue = g.queue AND r.priority = g.priority AND r.shard = g.shard
          AND r.lane_seq >= g.claim_seq
          AND (NOT (SELECT awa.qs_any_tombstone())
        OR NOT EXISTS (SELECT 1 FROM awa.ready_tombstones x WHERE x.ready_id = r.ready_id))
   AND (r.lane_seq > g.claimed_max OR NOT awa.qs_receipted(r.job_id, r.run_lease + 1))) l
 GROUP BY g.queue
HAVING sum(l.n) > 0
), counts AS (
    SELECT queue, 'available'::awa.job_state AS state, n FROM avail
    UNION ALL
    SELECT r.queue, 'running'::awa.job_state, count(*)
      FROM awa.qs_open_receipts c
      JOIN awa.ready_entries r
        ON r.job_id = c.job_id AND r.ready_slot = c.ready_slot AND r.ready_id = c.ready_id
     GROUP BY r.queue
    UNION ALL
    SELECT r.queue, l.state, count(*)
      FROM awa.leases l
      JOIN awa.ready_entries r
        ON r.job_id = l.job_id AND r.ready_slot = l.ready_slot AND r.ready_id = l.ready_id
     GROUP BY r.queue, l.state
    UNION ALL
    SELECT queue, state, count(*) FROM awa.done_entries WHERE state = 'failed'
     GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*) FROM awa.deferred_jobs GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*) AS n FROM awa.jobs_hot
     WHERE state IN ('available', 'running', 'waiting_external', 'failed')
     GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*) FROM awa.scheduled_jobs
     WHERE state IN ('scheduled', 'retryable')
     GROUP BY queue, state
), completed AS (
    SELECT t.queue, count(*) AS n FROM (
        SELECT queue FROM awa.done_entries
         WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'
        UNION ALL
        SELECT queue FROM awa.jobs_hot
         WHERE state = 'completed' AND finalized_at > now() - interval '1 hour') t
     GROUP BY t.queue
), lag AS (
    SELECT t.queue, EXTRACT(EPOCH FROM now() - min(t.oldest))::float8 AS seconds FROM (
        SELECT queue, oldest FROM avail
        UNION ALL
        SELECT queue, min(run_at) FROM awa.jobs_hot WHERE state = 'available'
         GROUP BY queue) t
     GROUP BY t.queue
), queues AS (
    SELECT queue FROM counts UNION SELECT queue FROM completed
    UNION SELECT queue FROM awa.queue_meta
)

SELECT q.queue,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'available'), 0)::bigint AS available,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'running'), 0)::bigint AS running,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'failed'), 0)::bigint AS failed,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'scheduled'), 0)::bigint AS scheduled,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'retryable'), 0)::bigint AS retryable,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'waiting_external'), 0)::bigint
           AS waiting_external,
       COALESCE(max(d.n), 0)::bigint AS completed_last_hour,
       CASE WHEN max(l.seconds) IS NOT NULL THEN GREATEST(max(l.seconds), 0) END AS lag_seconds,
       COALESCE(bool_or(m.paused), false) AS paused
  FROM queues q
  LEFT JOIN counts c ON c.queue = q.queue
  LEFT JOIN completed d ON d.queue = q.queue
  LEFT JOIN lag l ON l.queue = q.queue
  LEFT JOIN awa.queue_meta m ON m.queue = q.queue
 GROUP BY q.queue
 ORDER BY q.queue

-- name: move_failed_to_dlq
-- A failed job moved to the DLQ.
WITH m AS (
    DELETE FROM awa.done_entries WHERE state = 'failed' AND id = %(id)s RETURNING *
), moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
           unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
           callback_on_fail, callback_transform, run_lease, progress, %(reason)s,
           now(), run_lease FROM m
    RETURNING *
), uq AS (
    DELETE FROM awa.job_unique_claims x USING m
     WHERE m.unique_key IS NOT NULL AND x.unique_key = m.unique_key AND x.job_id = m.id
)
SELECT * FROM moved

-- name: discard_failed
-- Failed jobs of a kind, deleted.
DELETE FROM awa.done_entries WHERE state = 'failed' AND kind = %(kind)s

-- name: clean_for_tests
-- Test isolation (awa.testing): TRUNCATE the engine's job tables (partitions included) and
-- the shared ones; lane heads and ring state stay, so positions keep increasing.
TRUNCATE awa.ready_entries, awa.ready_tombstones, awa.done_entries, awa.deferred_jobs,
         awa.lease_claims, awa.lease_claim_closures, awa.lease_claim_closure_batches,
         awa.leases, awa.attempt_state, awa.job_unique_claims, awa.dlq_entries,
         awa.queue_meta, awa.runtime_instances, awa.jobs_hot, awa.scheduled_jobs

-- name: failed_ids
-- The failed jobs retry_failed retries: every one, or of a kind, in a queue, or both (one
-- statement per filter given: admin.FAILED_IDS picks it).
SELECT id FROM awa.done_entries WHERE state = 'failed' AND true ORDER BY id

-- name: failed_ids_of_kind
SELECT id FROM awa.done_entries WHERE state = 'failed' AND kind = %(kind)s ORDER BY id

-- name: failed_ids_in_queue
SELECT id FROM awa.done_entries WHERE state = 'failed' AND queue = %(queue)s ORDER BY id

-- name: failed_ids_of_kind_in_queue
SELECT id FROM awa.done_entries WHERE state = 'failed' AND kind = %(kind)s AND queue = %(queue)s
       ORDER BY id

-- name: bulk_move_failed_to_dlq
-- Failed jobs moved to the DLQ, counted per kind and queue: every one, or of a kind, in a
-- queue, or both (admin.BULK_MOVE_FAILED_TO_DLQ picks it).
WITH m AS (
    DELETE FROM awa.done_entries WHERE state = 'failed' AND true RETURNING *
), moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
           unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
           callback_on_fail, callback_transform, run_lease, progress, %(reason)s,
           now(), run_lease FROM m
    RETURNING *
), uq AS (
    DELETE FROM awa.job_unique_claims x USING m
     WHERE m.unique_key IS NOT NULL AND x.unique_key = m.unique_key AND x.job_id = m.id
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue

-- name: bulk_move_failed_to_dlq_of_kind
WITH m AS (
    DELETE FROM awa.done_entries WHERE state = 'failed' AND kind = %(kind)s RETURNING *
), moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
           unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
           callback_on_fail, callback_transform, run_lease, progress, %(reason)s,
           now(), run_lease FROM m
    RETURNING *
), uq AS (
    DELETE FROM awa.job_unique_claims x USING m
     WHERE m.unique_key IS NOT NULL AND x.unique_key = m.unique_key AND x.job_id = m.id
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue

-- name: bulk_move_failed_to_dlq_in_queue
WITH m AS (
    DELETE FROM awa.done_entries WHERE state = 'failed' AND queue = %(queue)s RETURNING *
), moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
           unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
           callback_on_fail, callback_transform, run_lease, progress, %(reason)s,
           now(), run_lease FROM m
    RETURNING *
), uq AS (
    DELETE FROM awa.job_unique_claims x USING m
     WHERE m.unique_key IS NOT NULL AND x.unique_key = m.unique_key AND x.job_id = m.id
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue

-- name: bulk_move_failed_to_dlq_of_kind_in_queue
WITH m AS (
    DELETE FROM awa.done_entries WHERE state = 'failed' AND kind = %(kind)s AND queue =
           %(queue)s RETURNING *
), moved AS (
    INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt,
           max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
           errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
           callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
           progress, dlq_reason, dlq_at, original_run_lease)
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
           deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
           unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
           callback_on_fail, callback_transform, run_lease, progress, %(reason)s,
           now(), run_lease FROM m
    RETURNING *
), uq AS (
    DELETE FROM awa.job_unique_claims x USING m
     WHERE m.unique_key IS NOT NULL AND x.unique_key = m.unique_key AND x.job_id = m.id
)
SELECT kind, queue, count(*) AS n FROM moved GROUP BY kind, queue
