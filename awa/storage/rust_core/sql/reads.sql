-- The read-only engine of the Rust-core awa 0.6 layout (awa/storage/rust_core/__init__.py):
-- every statement it sends, by name.  {s} is the Rust core's active queue-storage schema,
-- known only at run time (awa.active_queue_storage_schema()): an identifier cannot be a
-- parameter, so a statement that names it is composed with psycopg's sql.Identifier
-- (RustCoreEngine._q), and a literal brace in it is written doubled ('{{}}' is sent as
-- '{}').  Statements without {s} are sent as written.  A statement starts at a
-- "-- name: <name>" line (awa.statements.named_statements reads them).

-- --- running attempts: open receipt claims and materialized leases -------------------------

-- name: open_attempts
-- The Rust core's running attempts, one row each: open receipt claims -- the guide's
-- open-claim anti-join (not closed in place, no closure row or closure batch names it, no
-- lease materialized it), written here only -- and open compact claims (0.6.9 writes one
-- lease_claim_batches row per claim batch for a queue whose deadline_duration is 0; each
-- item open until closed, materialized or finished: 0.6.9's own test, item by item), plus a
-- lease row per materialized attempt; the heartbeat from attempt_state where the runtime
-- wrote one.  A claim without an attempt_state row has not heartbeated since its claim (0.6
-- writes one at the first heartbeat, well within the staleness cutoff), so its last sign of
-- life is claimed_at -- what the Rust core's own stale rescue of unmaterialized claims keys
-- on (idx_awa_lease_claims_stale).  Kind, tags, args and payload come from the claimed ready
-- entry (primary key); claim_holder is the other job holding its unique key, if any (the
-- guide's wedge).  Every read of running attempts is this statement (RustCoreEngine
-- ._open_attempts): the running attempts themselves (%(detail)s: with args and payload,
-- %(ids)s, %(started_before)s, %(limit)s), their counts per queue (stale: no heartbeat
-- within %(staleness)s seconds; overdue: past the deadline), and the wedged ones
-- (%(superseded)s), each narrowed to %(queue)s when given.
WITH claims AS (
    SELECT c.job_id, c.queue, c.priority, c.attempt, c.max_attempts, c.run_lease,
           c.claimed_at AS attempted_at, c.deadline_at, c.ready_slot, c.ready_generation,
           c.enqueue_shard, c.lane_seq, c.materialized_at
      FROM {s}.lease_claims c
     WHERE c.closed_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closures cx
                        WHERE cx.claim_slot = c.claim_slot AND cx.job_id = c.job_id
                          AND cx.run_lease = c.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closure_batches cb
                        WHERE cb.receipt_ranges @> c.receipt_id)
       AND NOT EXISTS (SELECT 1 FROM {s}.leases l
                        WHERE l.job_id = c.job_id AND l.run_lease = c.run_lease)
    UNION ALL
    -- Compact claims (0.6.9 writes one lease_claim_batches row per claim batch for a
    -- queue whose deadline_duration is 0): each item open until closed (a closure row,
    -- or its receipt in a closure batch), materialized, or finished (done, deferred,
    -- dead-lettered, or in a compact completion batch) -- 0.6.9's own test, item by item.
    SELECT i.job_id, b.queue, b.priority, i.attempt, i.max_attempts, i.run_lease,
           b.claimed_at, b.deadline_at, b.ready_slot, b.ready_generation, b.enqueue_shard,
           i.lane_seq, NULL::timestamptz
      FROM {s}.lease_claim_batches b
     CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.receipt_ids, b.lane_seqs,
                               b.attempts, b.max_attempts)
           AS i(job_id, run_lease, receipt_id, lane_seq, attempt, max_attempts)
     WHERE NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closures cx
                        WHERE cx.claim_slot = b.claim_slot AND cx.job_id = i.job_id
                          AND cx.run_lease = i.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closure_batches cb
                        WHERE cb.claim_slot = b.claim_slot
                          AND cb.receipt_ranges @> i.receipt_id)
       AND NOT EXISTS (SELECT 1 FROM {s}.leases l
                        WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.done_entries d
                        WHERE d.job_id = i.job_id AND d.run_lease = i.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.deferred_jobs dj
                        WHERE dj.job_id = i.job_id AND dj.run_lease = i.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.dlq_entries q
                        WHERE q.job_id = i.job_id AND q.run_lease = i.run_lease)
       AND NOT EXISTS (SELECT 1 FROM {s}.receipt_completion_batches rc
                        WHERE rc.queue = b.queue AND rc.job_ids @> ARRAY[i.job_id]
                          AND i.run_lease = ANY(rc.run_leases))
), attempts AS (
    SELECT l.job_id, l.queue, l.priority, l.attempt, l.max_attempts, l.run_lease,
           l.attempted_at, l.deadline_at, l.ready_slot, l.ready_generation, l.enqueue_shard,
           l.lane_seq, coalesce(a.heartbeat_at, l.heartbeat_at) AS heartbeat_at,
           false AS receipt_claim
      FROM {s}.leases l
      LEFT JOIN {s}.attempt_state a ON a.job_id = l.job_id AND a.run_lease = l.run_lease
     WHERE l.state = 'running'
    UNION ALL
    SELECT c.job_id, c.queue, c.priority, c.attempt, c.max_attempts, c.run_lease,
           c.attempted_at, c.deadline_at, c.ready_slot, c.ready_generation, c.enqueue_shard,
           c.lane_seq, coalesce(a.heartbeat_at, c.attempted_at) AS heartbeat_at,
           a.job_id IS NULL AS receipt_claim
      FROM claims c
      LEFT JOIN {s}.attempt_state a ON a.job_id = c.job_id AND a.run_lease = c.run_lease
)
SELECT t.job_id AS id, coalesce(r.kind, '?') AS kind, t.queue, t.attempt::int AS attempt,
       t.max_attempts::int AS max_attempts, t.run_lease, t.priority::int AS priority,
       t.attempted_at, t.heartbeat_at, t.deadline_at, t.receipt_claim,
       CASE WHEN %(detail)s THEN r.args END AS args, r.run_at, r.created_at, r.unique_key,
       CASE WHEN %(detail)s THEN r.payload END AS payload,
       ARRAY(SELECT jsonb_array_elements_text(
           coalesce(NULLIF(r.payload->'tags', 'null'::jsonb), '[]'::jsonb))) AS tags,
       EXTRACT(EPOCH FROM (now() - t.heartbeat_at))::float8 AS heartbeat_age_s,
       EXTRACT(EPOCH FROM (t.deadline_at - now()))::float8 AS deadline_remaining_s,
       EXTRACT(EPOCH FROM (now() - t.attempted_at))::float8 AS running_for_s,
       t.heartbeat_at < now() - make_interval(secs => %(staleness)s) AS stale,
       t.deadline_at < now() AS overdue,
       c.job_id AS claim_holder
  FROM attempts t
  LEFT JOIN {s}.ready_entries r
    ON r.ready_slot = t.ready_slot AND r.ready_generation = t.ready_generation
   AND r.queue = t.queue AND r.priority = t.priority AND r.enqueue_shard = t.enqueue_shard
   AND r.lane_seq = t.lane_seq
  LEFT JOIN awa.job_unique_claims c ON c.unique_key = r.unique_key AND c.job_id <> t.job_id
 WHERE (%(ids)s::bigint[] IS NULL OR t.job_id = ANY(%(ids)s::bigint[]))
   AND (%(started_before)s::timestamptz IS NULL OR t.attempted_at IS NULL
        OR t.attempted_at <= %(started_before)s)
   AND (%(queue)s::text IS NULL OR t.queue = %(queue)s)
   AND (NOT %(superseded)s OR c.job_id IS NOT NULL)
 ORDER BY coalesce(t.heartbeat_at, t.attempted_at), t.job_id
 LIMIT %(limit)s

-- --- queue depth, lag, completions ---------------------------------------------------------

-- name: queue_backlog
-- Per claim head (queue, priority, shard): the ready entries at or past the claim sequence
-- and not tombstoned, counted up to the cap, and the oldest one's run_at (primary key
-- order); deferred jobs per state; waiting callbacks; failed terminal rows; DLQ entries
-- (queue index).  Running comes from running_counts.
WITH heads AS (
    SELECT h.queue, h.priority, h.enqueue_shard, {s}.sequence_next_value(h.seq_name) AS next_claim
      FROM {s}.queue_claim_heads h
), ready AS (
    SELECT h.queue,
           (SELECT count(*) FROM (
                SELECT 1 FROM {s}.ready_entries r
                 WHERE r.queue = h.queue AND r.priority = h.priority
                   AND r.enqueue_shard = h.enqueue_shard AND r.lane_seq >= h.next_claim
                   AND NOT EXISTS (
                       SELECT 1 FROM {s}.ready_tombstones t
                        WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                          AND t.priority = r.priority AND t.enqueue_shard = r.enqueue_shard
                          AND t.lane_seq = r.lane_seq AND t.ready_generation = r.ready_generation)
                 LIMIT %(cap)s) c) AS available,
           (SELECT min(r.run_at) FROM (
                SELECT r.run_at FROM {s}.ready_entries r
                 WHERE r.queue = h.queue AND r.priority = h.priority
                   AND r.enqueue_shard = h.enqueue_shard AND r.lane_seq >= h.next_claim
                   AND NOT EXISTS (
                       SELECT 1 FROM {s}.ready_tombstones t
                        WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                          AND t.priority = r.priority AND t.enqueue_shard = r.enqueue_shard
                          AND t.lane_seq = r.lane_seq AND t.ready_generation = r.ready_generation)
                 ORDER BY r.lane_seq LIMIT 1) r) AS oldest_available
      FROM heads h
)
SELECT queue, 'available' AS state, least(sum(available), %(cap)s)::bigint AS n,
       min(oldest_available) AS oldest_available
  FROM ready GROUP BY queue
UNION ALL
SELECT queue, state::text, count(*), NULL FROM (
    SELECT queue, state FROM {s}.deferred_jobs LIMIT %(scan)s) d GROUP BY queue, state
UNION ALL
SELECT queue, state::text, count(*), NULL FROM {s}.leases
 WHERE state = 'waiting_external' GROUP BY queue, state
UNION ALL
SELECT queue, 'failed', count(*), NULL FROM (
    SELECT queue FROM {s}.done_entries WHERE state = 'failed' LIMIT %(scan)s) f GROUP BY queue
UNION ALL
SELECT queue, 'dlq', count(*), NULL FROM (
    SELECT queue FROM {s}.dlq_entries LIMIT %(scan)s) q GROUP BY queue

-- name: completed_since
-- Completions in a window, counted as 0.6.9's own queue_stats().completed_last_hour counts
-- them (its terminal_jobs view): completed done_entries rows, plus each item of a compact
-- completion batch that no receipt_completion_tombstones row deletes.  When the queue ring
-- comes round to a slot, 0.6.9 truncates the slot's terminal rows and folds their number
-- into queue_terminal_rollups.pruned_completed_count (per queue and priority, without
-- times): from then on no window of 0.6.9's, nor of ours, holds them.
SELECT queue, sum(n)::bigint AS n FROM (
    SELECT queue, count(*) AS n FROM {s}.done_entries
     WHERE state = 'completed' AND finalized_at > %(since)s AND finalized_at <= %(until)s
     GROUP BY queue
    UNION ALL
    SELECT b.queue, count(*) FROM {s}.receipt_completion_batches b
     CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases) AS i(job_id, run_lease)
     WHERE b.finalized_at > %(since)s AND b.finalized_at <= %(until)s
       AND NOT EXISTS (SELECT 1 FROM {s}.receipt_completion_tombstones t
                        WHERE t.ready_slot = b.ready_slot
                          AND t.ready_generation = b.ready_generation
                          AND t.job_id = i.job_id AND t.run_lease = i.run_lease)
     GROUP BY b.queue) c
 GROUP BY queue

-- name: completed_totals
-- Every completion 0.6.9 has recorded, per queue, in one snapshot: the completed rows it
-- still keeps (as completed_since counts them) plus what its ring prune folded into
-- queue_terminal_rollups (the fold moves a slot's count there in the transaction that
-- truncates the slot, so one snapshot sees each completion exactly once).
SELECT queue, sum(n)::bigint AS n FROM (
    SELECT queue, count(*) AS n FROM {s}.done_entries WHERE state = 'completed' GROUP BY queue
    UNION ALL
    SELECT b.queue, count(*) FROM {s}.receipt_completion_batches b
     CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases) AS i(job_id, run_lease)
     WHERE NOT EXISTS (SELECT 1 FROM {s}.receipt_completion_tombstones t
                        WHERE t.ready_slot = b.ready_slot
                          AND t.ready_generation = b.ready_generation
                          AND t.job_id = i.job_id AND t.run_lease = i.run_lease)
     GROUP BY b.queue
    UNION ALL
    SELECT queue, sum(pruned_completed_count) FROM {s}.queue_terminal_rollups GROUP BY queue) c
 GROUP BY queue

-- name: recently_completed
-- The queues a job ended in lately. 0.6.9 indexes its terminal rows by (slot, queue, ...)
-- only (no state, no finalization time): per queue-ring slot, a loose index scan over the
-- queues whose terminal rows (completed or failed) the slot keeps -- the ring is the
-- history window here -- at most %(limit)s queues a slot, one probe each; and the queues of
-- each slot's newest %(limit)s compact completion batches (its primary key, backwards)
-- finalized within the window.
WITH RECURSIVE slots AS (
    SELECT s.slot FROM {s}.queue_ring_state r
     CROSS JOIN LATERAL generate_series(0, r.slot_count - 1) AS s(slot)
), walk AS (
    SELECT f.slot, f.queue, 1 AS n FROM slots CROSS JOIN LATERAL (
        SELECT slots.slot, d.queue FROM {s}.done_entries d WHERE d.ready_slot = slots.slot
         ORDER BY d.queue LIMIT 1) f
    UNION ALL
    SELECT p.slot, x.queue, p.n + 1 FROM walk p CROSS JOIN LATERAL (
        SELECT d.queue FROM {s}.done_entries d WHERE d.ready_slot = p.slot AND d.queue > p.queue
         ORDER BY d.queue LIMIT 1) x
     WHERE p.n < %(limit)s
)
SELECT queue FROM walk
UNION
SELECT b.queue FROM slots CROSS JOIN LATERAL (
    SELECT b.queue, b.finalized_at FROM {s}.receipt_completion_batches b
     WHERE b.ready_slot = slots.slot ORDER BY b.batch_id DESC LIMIT %(limit)s) b
 WHERE b.finalized_at > now() - make_interval(secs => %(within)s)
ORDER BY 1 LIMIT %(limit)s

-- name: now
-- The database's clock (queue lag against it).
SELECT now() AS now

-- --- the REST API's summaries: 0.6.9's own awa.jobs view, whole ----------------------------

-- name: created_timeseries
-- The layout has no kind index and no index on creation time; the caller caches these.
SELECT date_trunc('minute', created_at) AS bucket, state::text AS state, count(*) AS n
  FROM awa.jobs
 WHERE created_at >= now() - make_interval(mins => %(minutes)s)
 GROUP BY 1, 2
 ORDER BY 1, 2

-- name: kind_counts
SELECT kind, count(*) AS job_count, count(DISTINCT queue) AS queue_count,
       count(*) FILTER (WHERE state = 'completed'
                          AND finalized_at > now() - interval '1 hour') AS completed_last_hour
  FROM awa.jobs
 GROUP BY kind
 ORDER BY kind

-- name: queue_meta
-- Every queue's pause state (queue_details also lists the queues only their meta row names).
SELECT queue, paused, paused_at, paused_by FROM awa.queue_meta
 WHERE queue = ANY(%(queues)s::text[]) OR true

-- --- jobs (other states): the Rust core's own awa.jobs view --------------------------------

-- name: job_by_id
SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
       deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
       unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
       callback_on_fail, callback_transform, run_lease, progress
  FROM awa.jobs
 WHERE id = %(id)s LIMIT 1

-- name: jobs
SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
       deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
       unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete,
       callback_on_fail, callback_transform, run_lease, progress
  FROM awa.jobs
 WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(tag)s::text IS NULL OR tags @> ARRAY[%(tag)s::text])
 ORDER BY id DESC LIMIT %(limit)s

-- --- DLQ: errors, metadata, tags and progress are in payload -------------------------------

-- name: dlq_list
SELECT d.job_id AS id, d.kind, d.queue, d.args, d.state::text AS state,
       d.priority::int AS priority, d.attempt::int AS attempt,
       d.max_attempts::int AS max_attempts, d.run_at, d.attempted_at, d.finalized_at,
       d.created_at,
       ARRAY(SELECT e FROM jsonb_array_elements(coalesce(d.payload->'errors', '[]'::jsonb)) e)
           AS errors,
       coalesce(NULLIF(d.payload->'metadata', 'null'::jsonb), '{{}}'::jsonb) AS metadata,
       ARRAY(SELECT jsonb_array_elements_text(
           coalesce(NULLIF(d.payload->'tags', 'null'::jsonb), '[]'::jsonb))) AS tags,
       d.unique_key, d.run_lease, NULLIF(d.payload->'progress', 'null'::jsonb) AS progress,
       d.dlq_reason, d.dlq_at, d.original_run_lease,
       coalesce(d.payload->'errors', '[]'::jsonb)->(jsonb_array_length(coalesce(d.payload->'errors',
           '[]'::jsonb)) - 1)->>'error' AS last_error
  FROM {s}.dlq_entries d
 WHERE (%(queue)s::text IS NULL OR d.queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR d.kind = %(kind)s)
   AND (%(reason)s::text IS NULL OR d.dlq_reason = %(reason)s)
   AND (%(tag)s::text IS NULL OR coalesce(d.payload->'tags', '[]'::jsonb) ? %(tag)s)
   AND (%(before_at)s::timestamptz IS NULL
        OR (d.dlq_at, d.job_id) < (%(before_at)s, %(before_id)s))
   AND (%(before_id)s::bigint IS NULL OR %(before_at)s::timestamptz IS NOT NULL
        OR d.job_id < %(before_id)s)
 ORDER BY d.dlq_at DESC, d.job_id DESC
 LIMIT %(limit)s

-- name: dlq_by_id
SELECT d.job_id AS id, d.kind, d.queue, d.args, d.state::text AS state,
       d.priority::int AS priority, d.attempt::int AS attempt,
       d.max_attempts::int AS max_attempts, d.run_at, d.attempted_at, d.finalized_at,
       d.created_at,
       ARRAY(SELECT e FROM jsonb_array_elements(coalesce(d.payload->'errors', '[]'::jsonb)) e)
           AS errors,
       coalesce(NULLIF(d.payload->'metadata', 'null'::jsonb), '{{}}'::jsonb) AS metadata,
       ARRAY(SELECT jsonb_array_elements_text(
           coalesce(NULLIF(d.payload->'tags', 'null'::jsonb), '[]'::jsonb))) AS tags,
       d.unique_key, d.run_lease, NULLIF(d.payload->'progress', 'null'::jsonb) AS progress,
       d.dlq_reason, d.dlq_at, d.original_run_lease,
       coalesce(d.payload->'errors', '[]'::jsonb)->(jsonb_array_length(coalesce(d.payload->'errors',
           '[]'::jsonb)) - 1)->>'error' AS last_error
  FROM {s}.dlq_entries d
 WHERE d.job_id = %(id)s

-- name: dlq_depths
SELECT queue, dlq_reason, count(*) AS depth, max(dlq_at) AS newest,
       count(*) FILTER (WHERE dlq_at > now() - make_interval(secs => %(recent)s)) AS recent
  FROM {s}.dlq_entries
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
 GROUP BY queue, dlq_reason
 ORDER BY depth DESC

-- name: dlq_depths_by_queue
WITH RECURSIVE qs AS (
    (SELECT queue FROM {s}.dlq_entries ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM qs p CROSS JOIN LATERAL (
        SELECT d.queue FROM {s}.dlq_entries d WHERE d.queue > p.queue
         ORDER BY d.queue LIMIT 1) n
)
SELECT qs.queue,
       (SELECT count(*) FROM (SELECT 1 FROM {s}.dlq_entries d
         WHERE d.queue = qs.queue LIMIT %(cap)s) c) AS n
  FROM (SELECT queue FROM qs LIMIT %(max_queues)s) qs

-- name: repeated_errors
-- The newest DLQ entries and failed terminal rows, last error from payload.
WITH recent AS (
    (SELECT job_id, kind, queue, payload->'errors' AS errors, 'dlq' AS place
       FROM {s}.dlq_entries
      WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
      ORDER BY dlq_at DESC LIMIT %(sample)s)
    UNION ALL
    (SELECT job_id, kind, queue, payload->'errors', 'failed' FROM {s}.done_entries
      WHERE state = 'failed' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      ORDER BY finalized_at DESC LIMIT %(sample)s)
), last_errors AS (
    SELECT job_id, kind, queue, place,
           left(errors->(jsonb_array_length(errors) - 1)->>'error', 300) AS message,
           (SELECT count(*) FROM jsonb_array_elements(errors) e
             WHERE e->>'error' = errors->(jsonb_array_length(errors) - 1)->>'error')
               AS same_attempts
      FROM recent
     WHERE jsonb_typeof(errors) = 'array' AND jsonb_array_length(errors) > 0
)
SELECT kind, queue, message, count(*) AS jobs, max(same_attempts) AS max_repeats_in_one_job,
       (array_agg(job_id ORDER BY job_id DESC))[1:5] AS sample_job_ids,
       array_agg(DISTINCT place) AS places
  FROM last_errors
 GROUP BY kind, queue, message
 ORDER BY count(*) DESC, max(same_attempts) DESC
 LIMIT %(limit)s

-- --- uniqueness: claims are in awa.job_unique_claims; a running holder is an open attempt ---

-- name: unique_holders
SELECT c.unique_key, c.job_id, j.state::text AS state,
       EXISTS (SELECT 1 FROM {s}.dlq_entries d WHERE d.job_id = c.job_id) AS in_dlq
  FROM awa.job_unique_claims c
  LEFT JOIN LATERAL (SELECT state FROM awa.jobs WHERE id = c.job_id LIMIT 1) j ON true
 WHERE c.unique_key = ANY(%(keys)s::bytea[])

-- name: runtime_descriptor_hashes
SELECT instance_id, jsonb_build_object('queues', queue_descriptor_hashes,
                                       'kinds', job_kind_descriptor_hashes) AS descriptor_hashes
  FROM awa.runtime_instances
