-- Canonical engine: the ops reads (awa/storage/canonical/reads.py) by name. Each statement
-- follows its name line and is whole, as it is sent (awa.statements.named_statements reads
-- them, once, at import).
--
-- Every statement is bounded and index-backed: pairs of (state, queue) are enumerated by a
-- loose index scan of each table's (state, queue, id) index, counts stop at a cap and lists at
-- a limit. The caller owns the (short, read-only) transaction; nothing here writes.

-- name: queue_details
-- Per queue: the oldest runnable job (one probe per priority of the claim index), completions
-- in a window (the finalized index), and the pause flag. Queues known only to queue_meta are
-- listed too.
WITH q AS (
    SELECT unnest(%(queues)s::text[]) AS queue
    UNION
    SELECT queue FROM awa.queue_meta
), o AS (
    SELECT q.queue,
           (SELECT min(o.run_at) FROM unnest(%(priorities)s::smallint[]) pr(priority)
              CROSS JOIN LATERAL (
                  SELECT h.run_at FROM awa.jobs_hot h
                   WHERE h.state = 'available' AND h.queue = q.queue AND h.priority = pr.priority
                   ORDER BY h.run_at LIMIT 1) o) AS oldest_available,
           CASE WHEN %(since)s::timestamptz IS NULL THEN 0 ELSE
           (SELECT count(*) FROM (SELECT 1 FROM awa.jobs_hot h
              WHERE h.state = 'completed' AND h.queue = q.queue
                AND h.finalized_at > %(since)s AND h.finalized_at <= %(until)s
              LIMIT %(cap)s) c) END AS completed
      FROM q
)
SELECT o.queue, o.oldest_available,
       CASE WHEN o.oldest_available IS NOT NULL
            THEN greatest(EXTRACT(EPOCH FROM (now() - o.oldest_available))::float8, 0)
       END AS lag_s,
       o.completed, coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by
  FROM o LEFT JOIN awa.queue_meta m ON m.queue = o.queue
 ORDER BY o.queue

-- name: recently_completed
-- The queues a job completed in lately, by name: common.reads' HOT_RECENTLY_COMPLETED (a probe
-- per queue), ordered.
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
 ORDER BY w.queue

-- name: jobs_hot_newest
-- Job lists, one statement per table. Neither state nor queue given: the newest rows by primary
-- key, then the kind/tag filters within the newest window of them. The columns are
-- common.reads.JOB_LIST_COLUMNS and ARGS_MATCH, written out.
SELECT t.* FROM (
    SELECT id, kind, queue, state::text AS state, priority, attempt, max_attempts, run_at,
           created_at, attempted_at, finalized_at, tags,
           left(t.errors[array_upper(t.errors, 1)] ->> 'error', 500) AS last_error,
           (%(args)s::text IS NULL OR strpos(lower(t.kind), lower(%(args)s)) > 0
            OR strpos(lower(t.args::text), lower(%(args)s)) > 0) AS args_match
      FROM awa.jobs_hot t ORDER BY t.id DESC
     LIMIT CASE WHEN %(post_filtered)s THEN %(window)s ELSE %(page)s END) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s

-- name: scheduled_jobs_newest
SELECT t.* FROM (
    SELECT id, kind, queue, state::text AS state, priority, attempt, max_attempts, run_at,
           created_at, attempted_at, finalized_at, tags,
           left(t.errors[array_upper(t.errors, 1)] ->> 'error', 500) AS last_error,
           (%(args)s::text IS NULL OR strpos(lower(t.kind), lower(%(args)s)) > 0
            OR strpos(lower(t.args::text), lower(%(args)s)) > 0) AS args_match
      FROM awa.scheduled_jobs t ORDER BY t.id DESC
     LIMIT CASE WHEN %(post_filtered)s THEN %(window)s ELSE %(page)s END) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s

-- name: jobs_hot_list
-- State or queue given: enumerate the table's (state, queue) pairs (loose index scan), keep
-- those the filter allows, take the newest rows of each from the (state, queue, id) index, then
-- apply the filters no index serves (kind, tag, args). Without such filters the result is
-- exact; with them it covers the newest window rows.
WITH RECURSIVE pairs AS (
    (SELECT state, queue FROM awa.jobs_hot ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM pairs p CROSS JOIN LATERAL (
        SELECT t.state, t.queue FROM awa.jobs_hot t
         WHERE (t.state, t.queue) > (p.state, p.queue)
         ORDER BY t.state, t.queue LIMIT 1) n
), picked AS (
    SELECT state, queue FROM pairs
     WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     LIMIT %(max_pairs)s
), per_pair AS (
    SELECT CASE WHEN %(post_filtered)s
                THEN greatest(%(page)s, %(window)s / greatest(count(*), 1))
                ELSE %(page)s END AS k
      FROM picked
)
SELECT t.* FROM picked p CROSS JOIN per_pair CROSS JOIN LATERAL (
    SELECT id, kind, queue, state::text AS state, priority, attempt, max_attempts, run_at,
           created_at, attempted_at, finalized_at, tags,
           left(t.errors[array_upper(t.errors, 1)] ->> 'error', 500) AS last_error,
           (%(args)s::text IS NULL OR strpos(lower(t.kind), lower(%(args)s)) > 0
            OR strpos(lower(t.args::text), lower(%(args)s)) > 0) AS args_match
      FROM awa.jobs_hot t
     WHERE t.state = p.state AND t.queue = p.queue
     ORDER BY t.id DESC LIMIT per_pair.k) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s

-- name: scheduled_jobs_list
WITH RECURSIVE pairs AS (
    (SELECT state, queue FROM awa.scheduled_jobs ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM pairs p CROSS JOIN LATERAL (
        SELECT t.state, t.queue FROM awa.scheduled_jobs t
         WHERE (t.state, t.queue) > (p.state, p.queue)
         ORDER BY t.state, t.queue LIMIT 1) n
), picked AS (
    SELECT state, queue FROM pairs
     WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     LIMIT %(max_pairs)s
), per_pair AS (
    SELECT CASE WHEN %(post_filtered)s
                THEN greatest(%(page)s, %(window)s / greatest(count(*), 1))
                ELSE %(page)s END AS k
      FROM picked
)
SELECT t.* FROM picked p CROSS JOIN per_pair CROSS JOIN LATERAL (
    SELECT id, kind, queue, state::text AS state, priority, attempt, max_attempts, run_at,
           created_at, attempted_at, finalized_at, tags,
           left(t.errors[array_upper(t.errors, 1)] ->> 'error', 500) AS last_error,
           (%(args)s::text IS NULL OR strpos(lower(t.kind), lower(%(args)s)) > 0
            OR strpos(lower(t.args::text), lower(%(args)s)) > 0) AS args_match
      FROM awa.scheduled_jobs t
     WHERE t.state = p.state AND t.queue = p.queue
     ORDER BY t.id DESC LIMIT per_pair.k) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s

-- name: state_counts
-- Jobs per state counts every job (the awa.jobs view covers each engine's tables), so it costs
-- a scan: the API serves it from a TTL cache, never per keystroke. DLQ entries count as failed
-- (they are failed jobs parked aside).
SELECT state::text AS state, count(*) AS n FROM awa.jobs GROUP BY state
UNION ALL
SELECT 'failed', count(*) FROM awa.dlq_entries

-- name: newest_created
-- The newest jobs below an id, for the created-per-minute series (common.reads).
SELECT id, state::text AS state, created_at FROM awa.jobs
 WHERE id < %(before_id)s ORDER BY id DESC LIMIT %(limit)s
