-- Queue storage: the enqueue functions (a plain batch by statement: its rows, or its count).
--
-- Installed by ``awa migrate`` (the engine's ``schema.install_sql``) after the layout, in
-- the order ``procedures.FILES`` lists; the engine calls each
-- function through ``procedures.Procedure.call``.  Objects are named ``awa.<name>``: a
-- layout in another schema gets exactly the layout's names moved (``schema.in_schema``).
--
-- Why functions: these statements probe ring partitions that start empty after every
-- rotation and then fill.  Sent as plain SQL, a statement is either planned again at each
-- call (a custom plan of these CTEs costs 2-10 ms) or runs a plan cached while a partition
-- was nearly empty: a sequential scan per probed attempt, slower with every row the
-- partition gains.  A function is planned once per session, generically
-- (``plan_cache_mode = force_generic_plan``), with sequential and bitmap scans priced out,
-- so every probe goes through its index whatever the statistics say (a plain index scan:
-- each probe finds one row, which a bitmap scan costs more to fetch; measured 2-3 % of a
-- claim or a completion).  ``#variable_conflict use_column``: where a parameter and a
-- column share a name, the column wins.
--
-- Tests: tests/storage/test_installed_sql.py checks that what is installed is this file.

-- A plain batch (no unique key, no run_at) inserted by statement: each (queue, priority)
-- lane of the batch reserved by awa.qs_reserve_lane in a fixed order (two producers lock
-- lanes the same way round), the rows appended in input order (ids, ready ids and times
-- from the column defaults, so the returned rows line up with the input).  A function with
-- one generic plan per session: the general statement (sent by enqueue.py) is planned at
-- every call, the first cost of every single insert.
CREATE OR REPLACE FUNCTION awa.qs_insert_plain(p_kind text[], p_queue text[], p_args text[], p_priority smallint[], p_max_attempts smallint[], p_metadata text[], p_tags text[]) RETURNS TABLE (id bigint, state awa.job_state, run_at timestamptz, created_at timestamptz)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY WITH s AS MATERIALIZED (
    SELECT u.*, row_number() OVER (PARTITION BY u.queue, u.priority ORDER BY u.ord) AS lane_pos
      FROM unnest(p_kind::text[], p_queue::text[], p_args::text[], p_priority::smallint[],
                  p_max_attempts::smallint[], p_metadata::text[], p_tags::text[])
           WITH ORDINALITY AS u(kind, queue, args, priority, max_attempts, metadata, tags, ord)
), heads AS MATERIALIZED (
    SELECT l.queue, l.priority, r.lane_shard, r.base
      FROM (SELECT DISTINCT x.queue, x.priority FROM s x ORDER BY x.queue, x.priority) l
      CROSS JOIN LATERAL awa.qs_reserve_lane(l.queue, l.priority) r
)
INSERT INTO awa.ready_entries (ready_slot, queue, priority, shard, lane_seq, kind, args,
                               max_attempts, metadata, tags)
SELECT (SELECT awa.qs_slot('queue')), s.queue, s.priority, h.lane_shard,
       h.base + s.lane_pos - 1, s.kind, s.args::jsonb, s.max_attempts, s.metadata::jsonb,
       s.tags::text[]
  FROM s JOIN heads h ON h.queue = s.queue AND h.priority = s.priority
 ORDER BY s.ord
RETURNING job_id, 'available'::awa.job_state, run_at, created_at;
END $fn$;

-- A plain batch whose ids are not asked for (COPY's paths and every count-only insert), in
-- one call: the lanes reserved and the rows written in one statement of the caller's (so
-- one round trip, atomic with the caller's transaction, the lanes locked until its
-- commit; autocommit, until this statement's), its count returned instead of a row per
-- job.  This replaces layout 8's direct COPY (a reservation, then the COPY, in a
-- transaction of their own: four to five round trips per batch, each lane held across
-- them).  A batch of one lane (the usual one) numbers its rows from the lane's base in
-- input order -- the unnest's own order, which the INSERT keeps: no window, no sort; any
-- other batch reserves its lanes in qs_insert_plain's order and numbers each lane apart.
CREATE OR REPLACE FUNCTION awa.qs_enqueue_plain(p_kind text[], p_queue text[], p_args text[], p_priority smallint[], p_max_attempts smallint[], p_metadata text[], p_tags text[]) RETURNS bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
#variable_conflict use_column
DECLARE
    lane record;
    inserted bigint;
BEGIN
    IF p_queue[1] = ALL (p_queue) AND p_priority[1] = ALL (p_priority) THEN
        SELECT r.lane_shard, r.base INTO lane FROM awa.qs_reserve_lane(p_queue[1], p_priority[1]) r;
        INSERT INTO awa.ready_entries (ready_slot, queue, priority, shard, lane_seq, kind, args,
                                       max_attempts, metadata, tags)
        SELECT (SELECT awa.qs_slot('queue')), p_queue[1], p_priority[1], lane.lane_shard,
               lane.base + u.ord - 1, u.kind, u.args::jsonb, u.max_attempts, u.metadata::jsonb,
               u.tags::text[]
          FROM unnest(p_kind::text[], p_args::text[], p_max_attempts::smallint[],
                      p_metadata::text[], p_tags::text[])
               WITH ORDINALITY AS u(kind, args, max_attempts, metadata, tags, ord);
    ELSE
        WITH s AS MATERIALIZED (
            SELECT u.*, row_number() OVER (PARTITION BY u.queue, u.priority ORDER BY u.ord) AS lane_pos
              FROM unnest(p_kind::text[], p_queue::text[], p_args::text[], p_priority::smallint[],
                          p_max_attempts::smallint[], p_metadata::text[], p_tags::text[])
                   WITH ORDINALITY AS u(kind, queue, args, priority, max_attempts, metadata, tags, ord)
        ), heads AS MATERIALIZED (
            SELECT l.queue, l.priority, r.lane_shard, r.base
              FROM (SELECT DISTINCT x.queue, x.priority FROM s x ORDER BY x.queue, x.priority) l
              CROSS JOIN LATERAL awa.qs_reserve_lane(l.queue, l.priority) r
        )
        INSERT INTO awa.ready_entries (ready_slot, queue, priority, shard, lane_seq, kind, args,
                                       max_attempts, metadata, tags)
        SELECT (SELECT awa.qs_slot('queue')), s.queue, s.priority, h.lane_shard,
               h.base + s.lane_pos - 1, s.kind, s.args::jsonb, s.max_attempts, s.metadata::jsonb,
               s.tags::text[]
          FROM s JOIN heads h ON h.queue = s.queue AND h.priority = s.priority
         ORDER BY s.ord;
    END IF;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    RETURN inserted;
END $fn$;
