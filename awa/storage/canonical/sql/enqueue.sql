-- Canonical engine: enqueue (awa/storage/canonical/enqueue.py) by name. Each statement follows
-- its name line and is whole, as it is sent (awa.statements.named_statements reads them, once,
-- at import).
--
-- One statement per batch, fed either by unnest of array parameters
-- (common.enqueue.UNNEST_SOURCE) or by COPY into the per-session staging table
-- (common.enqueue.STAGING_SOURCE, filled by the core's CREATE_STAGING / COPY_INTO_STAGING): a
-- variant per source, per shape (plain: every row available now and none unique; general:
-- unique keys or a run_at), per result (the rows, or a count). Rows without a run_at go to
-- jobs_hot as available (the schema's statement trigger sends NOTIFY "awa:<queue>" at commit);
-- rows with an explicit run_at, even a past one, go to scheduled_jobs as scheduled (as awa-pg
-- 0.6.9). The general form keeps the rows common.enqueue.KEPT_ROWS keeps (written out here: the
-- unique claim is taken by a trigger, so ON CONFLICT cannot skip duplicates). Only what the
-- database decides comes back; the rest of each Job is the input.

-- name: copy_into_hot
-- The common case (no unique keys, nothing deferred, no rows wanted back) needs no staging.
COPY awa.jobs_hot (kind, queue, args, priority, max_attempts, metadata, tags) FROM STDIN

-- name: plain_insert_returning
-- Plain, from array parameters.
INSERT INTO awa.jobs_hot (kind, queue, args, priority, max_attempts, metadata, tags)
SELECT s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata, s.tags::text[]
  FROM unnest(%(kind)b::text[], %(queue)b::text[], %(args)b::text[]::jsonb[],
                     %(priority)b::smallint[], %(max_attempts)b::smallint[],
                     %(run_at)b::timestamptz[], %(metadata)b::text[]::jsonb[], %(tags)b::text[],
                     %(unique_key)b::bytea[], %(unique_states)b::text[])
              WITH ORDINALITY AS s(kind, queue, args, priority, max_attempts, run_at, metadata,
                                   tags, unique_key, unique_states, ord)
 ORDER BY s.ord
RETURNING id, state, run_at, created_at

-- name: plain_insert_count
INSERT INTO awa.jobs_hot (kind, queue, args, priority, max_attempts, metadata, tags)
SELECT s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata, s.tags::text[]
  FROM unnest(%(kind)b::text[], %(queue)b::text[], %(args)b::text[]::jsonb[],
                     %(priority)b::smallint[], %(max_attempts)b::smallint[],
                     %(run_at)b::timestamptz[], %(metadata)b::text[]::jsonb[], %(tags)b::text[],
                     %(unique_key)b::bytea[], %(unique_states)b::text[])
              WITH ORDINALITY AS s(kind, queue, args, priority, max_attempts, run_at, metadata,
                                   tags, unique_key, unique_states, ord)
 ORDER BY s.ord

-- name: general_insert_returning
-- General, from array parameters: each row with its position (ord) in the batch.
WITH incoming AS MATERIALIZED (
    SELECT s.ord, s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata,
           s.tags::text[] AS tags, s.unique_key, s.unique_states::bit(8) AS unique_states,
           COALESCE(s.run_at, now()) AS run_at,
           s.run_at IS NOT NULL AS deferred  -- any explicit run_at (awa-pg 0.6.9)
      FROM unnest(%(kind)b::text[], %(queue)b::text[], %(args)b::text[]::jsonb[],
                     %(priority)b::smallint[], %(max_attempts)b::smallint[],
                     %(run_at)b::timestamptz[], %(metadata)b::text[]::jsonb[], %(tags)b::text[],
                     %(unique_key)b::bytea[], %(unique_states)b::text[])
              WITH ORDINALITY AS s(kind, queue, args, priority, max_attempts, run_at, metadata,
                                   tags, unique_key, unique_states, ord)
), flagged AS (
    SELECT incoming.*,
           incoming.unique_key IS NOT NULL
           AND get_bit(incoming.unique_states, awa.state_bit(
                   CASE WHEN incoming.deferred THEN 'scheduled' ELSE 'available' END
                   ::awa.job_state)) = 1
           AS claims
      FROM incoming
), ranked AS (
    SELECT flagged.*,
           row_number() OVER (PARTITION BY flagged.claims, flagged.unique_key
                              ORDER BY flagged.ord) AS nth
      FROM flagged
), kept AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, r.*
      FROM ranked r
     WHERE NOT r.claims
        OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.job_unique_claims c WHERE c.unique_key = r.unique_key))
     ORDER BY r.ord
)
, hot AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, max_attempts, run_at,
                              metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'available', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE NOT deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
), later AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                                    metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'scheduled', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
)
SELECT kept.ord, j.id, j.state, j.run_at, j.created_at
  FROM (SELECT * FROM hot UNION ALL SELECT * FROM later) j
  JOIN kept USING (id)
 ORDER BY kept.ord

-- name: general_insert_count
WITH incoming AS MATERIALIZED (
    SELECT s.ord, s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata,
           s.tags::text[] AS tags, s.unique_key, s.unique_states::bit(8) AS unique_states,
           COALESCE(s.run_at, now()) AS run_at,
           s.run_at IS NOT NULL AS deferred  -- any explicit run_at (awa-pg 0.6.9)
      FROM unnest(%(kind)b::text[], %(queue)b::text[], %(args)b::text[]::jsonb[],
                     %(priority)b::smallint[], %(max_attempts)b::smallint[],
                     %(run_at)b::timestamptz[], %(metadata)b::text[]::jsonb[], %(tags)b::text[],
                     %(unique_key)b::bytea[], %(unique_states)b::text[])
              WITH ORDINALITY AS s(kind, queue, args, priority, max_attempts, run_at, metadata,
                                   tags, unique_key, unique_states, ord)
), flagged AS (
    SELECT incoming.*,
           incoming.unique_key IS NOT NULL
           AND get_bit(incoming.unique_states, awa.state_bit(
                   CASE WHEN incoming.deferred THEN 'scheduled' ELSE 'available' END
                   ::awa.job_state)) = 1
           AS claims
      FROM incoming
), ranked AS (
    SELECT flagged.*,
           row_number() OVER (PARTITION BY flagged.claims, flagged.unique_key
                              ORDER BY flagged.ord) AS nth
      FROM flagged
), kept AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, r.*
      FROM ranked r
     WHERE NOT r.claims
        OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.job_unique_claims c WHERE c.unique_key = r.unique_key))
     ORDER BY r.ord
)
, hot AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, max_attempts, run_at,
                              metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'available', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE NOT deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
), later AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                                    metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'scheduled', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
)
SELECT (SELECT count(*) FROM hot) + (SELECT count(*) FROM later) AS inserted

-- name: staged_plain_returning
-- From the staging table (copy_batch).
INSERT INTO awa.jobs_hot (kind, queue, args, priority, max_attempts, metadata, tags)
SELECT s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata, s.tags::text[]
  FROM pg_temp.awa_enqueue_staging AS s
 ORDER BY s.ord
RETURNING id, state, run_at, created_at

-- name: staged_general_returning
WITH incoming AS MATERIALIZED (
    SELECT s.ord, s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata,
           s.tags::text[] AS tags, s.unique_key, s.unique_states::bit(8) AS unique_states,
           COALESCE(s.run_at, now()) AS run_at,
           s.run_at IS NOT NULL AS deferred  -- any explicit run_at (awa-pg 0.6.9)
      FROM pg_temp.awa_enqueue_staging AS s
), flagged AS (
    SELECT incoming.*,
           incoming.unique_key IS NOT NULL
           AND get_bit(incoming.unique_states, awa.state_bit(
                   CASE WHEN incoming.deferred THEN 'scheduled' ELSE 'available' END
                   ::awa.job_state)) = 1
           AS claims
      FROM incoming
), ranked AS (
    SELECT flagged.*,
           row_number() OVER (PARTITION BY flagged.claims, flagged.unique_key
                              ORDER BY flagged.ord) AS nth
      FROM flagged
), kept AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, r.*
      FROM ranked r
     WHERE NOT r.claims
        OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.job_unique_claims c WHERE c.unique_key = r.unique_key))
     ORDER BY r.ord
)
, hot AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, max_attempts, run_at,
                              metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'available', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE NOT deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
), later AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                                    metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'scheduled', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
)
SELECT kept.ord, j.id, j.state, j.run_at, j.created_at
  FROM (SELECT * FROM hot UNION ALL SELECT * FROM later) j
  JOIN kept USING (id)
 ORDER BY kept.ord

-- name: staged_general_count
WITH incoming AS MATERIALIZED (
    SELECT s.ord, s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata,
           s.tags::text[] AS tags, s.unique_key, s.unique_states::bit(8) AS unique_states,
           COALESCE(s.run_at, now()) AS run_at,
           s.run_at IS NOT NULL AS deferred  -- any explicit run_at (awa-pg 0.6.9)
      FROM pg_temp.awa_enqueue_staging AS s
), flagged AS (
    SELECT incoming.*,
           incoming.unique_key IS NOT NULL
           AND get_bit(incoming.unique_states, awa.state_bit(
                   CASE WHEN incoming.deferred THEN 'scheduled' ELSE 'available' END
                   ::awa.job_state)) = 1
           AS claims
      FROM incoming
), ranked AS (
    SELECT flagged.*,
           row_number() OVER (PARTITION BY flagged.claims, flagged.unique_key
                              ORDER BY flagged.ord) AS nth
      FROM flagged
), kept AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, r.*
      FROM ranked r
     WHERE NOT r.claims
        OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.job_unique_claims c WHERE c.unique_key = r.unique_key))
     ORDER BY r.ord
)
, hot AS (
    INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, max_attempts, run_at,
                              metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'available', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE NOT deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
), later AS (
    INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                                    metadata, tags, unique_key, unique_states)
    SELECT id, kind, queue, args, 'scheduled', priority, max_attempts, run_at,
           metadata, tags, unique_key, unique_states
      FROM kept WHERE deferred ORDER BY ord
    RETURNING id, state, run_at, created_at
)
SELECT (SELECT count(*) FROM hot) + (SELECT count(*) FROM later) AS inserted
