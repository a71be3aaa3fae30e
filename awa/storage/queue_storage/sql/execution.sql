-- Queue storage: the hot path's attempt-closing and attempt-state functions.
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

-- Layouts before 7 had one function per destination: compat.sql keeps them, as wrappers
-- over qs_end_attempts, for the runtimes of older releases (expand/contract).

-- One copy of history (layout.sql): a job's done entry names its ready entry instead of
-- repeating its args when the job completed and the done entry goes to the entry's own
-- slot (an entry in an older slot is truncated sooner).  Inlined where it is called.
CREATE OR REPLACE FUNCTION awa.qs_done_names_entry(p_state awa.job_state, p_entry_slot smallint,
                                                   p_done_slot smallint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_state = 'completed' AND p_entry_slot = p_done_slot
$$;

-- Lock the lease rows of these attempts first, in (job_id, run_lease) order: one worker's
-- heartbeat, park and ending of the same attempts run at once on different connections, and
-- locking the rows as each statement's join meets them deadlocked them (tests/upgrade).
-- Called first by qs_end_attempts, qs_park and qs_heartbeat.
CREATE OR REPLACE FUNCTION awa.qs_lock_leases(p_ids bigint[], p_leases bigint[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM awa.leases) THEN
        PERFORM 1 FROM awa.leases l
         WHERE l.job_id = ANY(p_ids::bigint[])
           AND (l.job_id, l.run_lease) IN (SELECT * FROM unnest(p_ids::bigint[], p_leases::bigint[]))
         ORDER BY l.job_id, l.run_lease FOR UPDATE OF l;
    END IF;
END
$fn$;

-- The attempts a batch names, every buffered field of each write, joined to their receipts
-- (awa.qs_attempt_receipt: one index probe per attempt, c_open by the open-receipt rule):
-- the ``att`` step of qs_end_attempts, qs_heartbeat and qs_flush_progress.  A SQL function
-- the planner inlines like the rule itself (tests/storage/test_installed_sql.py checks):
-- the caller's generic plan is the unnest and the probes, with no function call.
CREATE OR REPLACE FUNCTION awa.qs_attempts(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[])
RETURNS TABLE (id bigint, lease bigint, delay_s float8, error jsonb, progress jsonb,
               meta jsonb, reason text, claim_slot smallint, receipt_id bigint,
               c_attempt smallint, claimed_at timestamptz, c_deadline timestamptz,
               ready_slot smallint, ready_id bigint, c_queue text, c_claimed_by uuid,
               c_open boolean)
LANGUAGE sql STABLE AS $$
    -- One index probe per attempt (a receipt is unique per attempt): never a hash join
    -- over the whole claim ring.
    SELECT u.*, c.*
      FROM unnest(p_ids::bigint[], p_leases::bigint[], p_delay::float8[], p_error::jsonb[],
                  p_progress::jsonb[], p_meta::jsonb[], p_reason::text[])
           AS u(id, lease, delay_s, error, progress, meta, reason)
     CROSS JOIN LATERAL awa.qs_attempt_receipt(u.id, u.lease) c
$$;

-- End running attempts, every way an attempt ends, as one statement: p_to_state completed,
-- failed or cancelled into done_entries; retryable (finalized_at is when the attempt ended,
-- as awa-pg 0.6.9) or scheduled (the attempt given back) into deferred_jobs, run_at =
-- now() + delay; NULL: dead-lettered, as failed, into dlq_entries with the reason and the
-- run lease; available (a callback's retry, awa.qs_resolve_callbacks): a fresh start, the
-- job appended to its lane with attempt 0 by awa.qs_append_ready, one call per job.  Any
-- other state is refused.  One function, so the ending is written once: the destinations a
-- call does not take are never reached (each is gated on p_to_state, which the generic plan
-- tests once per call; the fresh start is a function call, not a write of this statement,
-- so the plan of every other ending holds no insert into ready_entries).
--
-- att: each attempt of the batch joined to its receipt (awa.qs_attempts); closed /
-- contested: one lease_claim_closure_batches row per claim slot, skipped whole when another
-- closer got one of its receipts first (then one NULL id is returned: the engine runs the
-- statement again for the attempts it missed, ``execution.finish``); leased: the lease rows
-- of materialized attempts, deleted; ended: each ended job's full row; dropped: its attempt
-- state; uq_take / uq_give: the unique claims as the job moves to p_to_state; done /
-- deferred / dead / fresh: the job's row where p_to_state puts it.  Completion clears the
-- progress (awa-pg 0.6.9); every other ending keeps it.
CREATE OR REPLACE FUNCTION awa.qs_end_attempts(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[], p_outcome text, p_from_states awa.job_state[], p_to_state awa.job_state) RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM awa.qs_lock_leases(p_ids, p_leases);
    IF p_to_state IS NOT NULL
       AND p_to_state NOT IN ('completed', 'failed', 'cancelled', 'retryable', 'scheduled',
                              'available') THEN
        RAISE EXCEPTION 'awa.qs_end_attempts: an attempt cannot end as %', p_to_state;
    END IF;
    RETURN QUERY WITH att AS MATERIALIZED (
    SELECT * FROM awa.qs_attempts(p_ids, p_leases, p_delay, p_error, p_progress, p_meta,
                                  p_reason)
), opened AS (
    SELECT claim_slot, receipt_id FROM att WHERE c_open
)
, closed AS (
    INSERT INTO awa.lease_claim_closure_batches (claim_slot, receipt_ranges, outcome)
    SELECT o.claim_slot, range_agg(int8range(o.receipt_id, o.receipt_id, '[]')), p_outcome::text
      FROM opened o GROUP BY o.claim_slot ORDER BY o.claim_slot
    ON CONFLICT DO NOTHING
    RETURNING claim_slot
), contested AS (
    SELECT NULL::bigint AS id
     WHERE (SELECT count(DISTINCT o.claim_slot) FROM opened o)
           > (SELECT count(*) FROM closed)
)
, leased AS (
    -- Only long attempts materialize: with no lease (or attempt state) at all, as
    -- with short jobs, the per-attempt probes are skipped.
    DELETE FROM awa.leases l USING att
     WHERE (SELECT EXISTS (SELECT 1 FROM awa.leases))
       AND l.job_id = att.id AND l.run_lease = att.lease
       AND l.job_id = ANY(p_ids::bigint[])  -- an index scan however many leases run
       AND l.state = ANY(p_from_states::awa.job_state[])
    RETURNING l.*
), ended AS MATERIALIZED (
    SELECT a.id, r.kind, r.queue, r.args, r.priority, a.c_attempt AS attempt, r.max_attempts,
           r.run_at, COALESCE(l.heartbeat_at, a.claimed_at) AS heartbeat_at,
           -- a lease's own deadline (NULL once parked), else the receipt's
           CASE WHEN l.job_id IS NULL THEN a.c_deadline ELSE l.deadline_at END AS deadline_at,
           a.claimed_at AS attempted_at,
           r.created_at,
           CASE WHEN a.error IS NULL THEN r.errors
                ELSE array_append(COALESCE(r.errors, '{}'::jsonb[]), a.error) END AS errors,
           r.metadata || COALESCE(st.metadata, '{}'::jsonb) || COALESCE(a.meta, '{}'::jsonb)
               AS metadata,
           r.tags, r.unique_key, r.unique_states, l.callback_id, l.callback_timeout_at,
           l.callback_filter, l.callback_on_complete, l.callback_on_fail, l.callback_transform,
           a.lease AS run_lease, COALESCE(a.progress, st.progress, r.progress) AS progress,
           a.delay_s, a.reason, COALESCE(l.claimed_by, a.c_claimed_by) AS claimed_by,
           a.ready_slot AS entry_slot, a.ready_id AS entry_id
      FROM att a
      -- An index probe per attempt, whatever the statistics say (a fresh ring
      -- partition has none, and a hash join would read the whole partition).
      CROSS JOIN LATERAL (
           SELECT * FROM awa.ready_entries r
            WHERE r.job_id = a.id AND r.ready_slot = a.ready_slot AND r.ready_id = a.ready_id LIMIT 1) r
      LEFT JOIN leased l ON l.job_id = a.id AND l.run_lease = a.lease
      LEFT JOIN LATERAL (
           SELECT * FROM awa.attempt_state st
            WHERE (SELECT EXISTS (SELECT 1 FROM awa.attempt_state))
              AND st.job_id = a.id AND st.run_lease = a.lease) st ON true
     WHERE l.job_id IS NOT NULL
        OR (a.c_open AND a.claim_slot IN (SELECT k.claim_slot FROM closed k))
), dropped AS (
    DELETE FROM awa.attempt_state s USING ended e
     WHERE (SELECT EXISTS (SELECT 1 FROM awa.attempt_state))
       AND s.job_id = e.id AND s.run_lease = e.run_lease
       AND s.job_id = ANY(p_ids::bigint[])
)
, uq_take AS (
    INSERT INTO awa.job_unique_claims (unique_key, job_id)
    SELECT e.unique_key, e.id FROM ended e
     WHERE e.unique_key IS NOT NULL
       AND COALESCE(awa.qs_in_mask(e.unique_states, p_to_state::awa.job_state), false)
       AND NOT awa.qs_in_mask(e.unique_states, 'running')
       AND NOT EXISTS (SELECT 1 FROM awa.job_unique_claims x
                        WHERE x.unique_key = e.unique_key AND x.job_id = e.id)
), uq_give AS (
    DELETE FROM awa.job_unique_claims x USING ended e
     WHERE e.unique_key IS NOT NULL AND x.unique_key = e.unique_key AND x.job_id = e.id
       AND NOT COALESCE(awa.qs_in_mask(e.unique_states, p_to_state::awa.job_state), false)
       -- probe the keys by index, never a scan of every claim held
       AND x.unique_key = ANY(ARRAY(SELECT k.unique_key FROM ended k
                                     WHERE k.unique_key IS NOT NULL))
)

, done AS (INSERT INTO awa.done_entries (ready_slot, id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, progress, claimed_by, ready_id)
SELECT (SELECT awa.qs_slot('queue')), e.id AS id, e.kind, e.queue, CASE WHEN awa.qs_done_names_entry(p_to_state, e.entry_slot, (SELECT awa.qs_slot('queue'))) THEN NULL ELSE e.args END, p_to_state::awa.job_state, e.priority, e.attempt, e.max_attempts, e.run_at, e.heartbeat_at, e.deadline_at, e.attempted_at, now(), e.created_at, e.errors, e.metadata, e.tags, e.unique_key, e.unique_states, e.callback_id, e.callback_timeout_at, e.callback_filter, e.callback_on_complete, e.callback_on_fail, e.callback_transform, e.run_lease, CASE WHEN p_to_state::awa.job_state = 'completed' THEN NULL ELSE e.progress END, e.claimed_by, CASE WHEN awa.qs_done_names_entry(p_to_state, e.entry_slot, (SELECT awa.qs_slot('queue'))) THEN e.entry_id END
  FROM ended e
 WHERE p_to_state::awa.job_state IN ('completed', 'failed', 'cancelled')
RETURNING id)
, deferred AS (INSERT INTO awa.deferred_jobs (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
SELECT e.id AS id, e.kind, e.queue, e.args, p_to_state::awa.job_state, e.priority, CASE WHEN p_to_state::awa.job_state = 'scheduled' THEN greatest(e.attempt - 1, 0) ELSE e.attempt END, e.max_attempts, now() + e.delay_s * interval '1 second', NULL, NULL, e.attempted_at, CASE WHEN p_to_state::awa.job_state = 'scheduled' THEN NULL ELSE now() END, e.created_at, e.errors, e.metadata, e.tags, e.unique_key, e.unique_states, NULL, NULL, NULL, NULL, NULL, NULL, e.run_lease, e.progress
  FROM ended e
 WHERE p_to_state::awa.job_state IN ('retryable', 'scheduled')
RETURNING id)
, dead AS (INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, progress,
                             dlq_reason, dlq_at, original_run_lease)
SELECT e.id AS job_id, e.kind, e.queue, e.args, 'failed'::awa.job_state, e.priority, e.attempt, e.max_attempts, e.run_at, e.heartbeat_at, e.deadline_at, e.attempted_at, now(), e.created_at, e.errors, e.metadata, e.tags, e.unique_key, e.unique_states, e.callback_id, e.callback_timeout_at, e.callback_filter, e.callback_on_complete, e.callback_on_fail, e.callback_transform, e.run_lease, e.progress,
       e.reason, now(), e.run_lease
  FROM ended e
 WHERE p_to_state IS NULL
RETURNING job_id)
, fresh AS (
    SELECT awa.qs_append_ready(e.id, e.kind, e.queue, e.args, e.priority, 0::smallint,
                               e.max_attempts, now(), e.attempted_at, e.created_at, e.errors,
                               e.metadata, e.tags, e.unique_key, e.unique_states, e.run_lease,
                               e.progress) AS id
      FROM (SELECT * FROM ended ORDER BY id) e
     WHERE p_to_state::awa.job_state = 'available'
)
SELECT id FROM done UNION ALL SELECT id FROM deferred UNION ALL SELECT job_id FROM dead
UNION ALL SELECT id FROM fresh UNION ALL SELECT id FROM contested;
END $fn$;

-- End attempts as their callback resolves (complete_external, fail_external, retry_external,
-- an operator's retry of a waiting job): qs_end_attempts, p_from_states saying which lease
-- states may end, after the callback's timeout is cleared from the attempt's lease, so a
-- terminal row keeps the callback as a record with no timeout pending (as canonical).
CREATE OR REPLACE FUNCTION awa.qs_resolve_callbacks(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[], p_outcome text, p_from_states awa.job_state[], p_to_state awa.job_state) RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
BEGIN
    PERFORM awa.qs_lock_leases(p_ids, p_leases);
    UPDATE awa.leases l SET callback_timeout_at = NULL
     WHERE l.job_id = ANY(p_ids::bigint[])
       AND (l.job_id, l.run_lease) IN (SELECT * FROM unnest(p_ids::bigint[], p_leases::bigint[]))
       AND l.state = ANY(p_from_states::awa.job_state[])
       AND l.callback_timeout_at IS NOT NULL;
    RETURN QUERY SELECT * FROM awa.qs_end_attempts(p_ids, p_leases, p_delay, p_error, p_progress,
                                                   p_meta, p_reason, p_outcome, p_from_states,
                                                   p_to_state);
END $fn$;

-- The common completion: nothing buffered, so only ids and leases are sent.  When no
-- attempt of the batch has a lease, attempt state or per-receipt closure, the short path
-- reads only the receipt and the ready entry (a receipt closed already makes the closure
-- row contested, and the engine runs qs_end_attempts for those attempts); else
-- qs_end_attempts itself, over ids and leases only.  Each emptiness test first asks
-- whether the table holds anything (one probe per partition) before probing every id.
CREATE OR REPLACE FUNCTION awa.qs_finalize_plain(p_ids bigint[], p_leases bigint[], p_outcome text, p_from_states awa.job_state[], p_to_state awa.job_state) RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
#variable_conflict use_column
BEGIN
    IF (NOT EXISTS (SELECT 1 FROM awa.leases)
 OR NOT EXISTS (SELECT 1 FROM awa.leases l WHERE l.job_id = ANY(p_ids::bigint[])))
AND (NOT EXISTS (SELECT 1 FROM awa.attempt_state)
     OR NOT EXISTS (SELECT 1 FROM awa.attempt_state s WHERE s.job_id = ANY(p_ids::bigint[])))
AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures) THEN
    RETURN QUERY WITH att AS MATERIALIZED (
    SELECT c.claim_slot, c.receipt_id, c.job_id, c.run_lease, c.attempt, c.claimed_at,
           c.deadline_at, c.ready_slot, c.ready_id, c.claimed_by
      FROM unnest(p_ids::bigint[], p_leases::bigint[]) AS u(id, lease)
      CROSS JOIN LATERAL (
           SELECT * FROM awa.lease_claims c
            WHERE c.job_id = u.id AND c.run_lease = u.lease LIMIT 1) c
)
, closed AS (
    INSERT INTO awa.lease_claim_closure_batches (claim_slot, receipt_ranges, outcome)
    SELECT o.claim_slot, range_agg(int8range(o.receipt_id, o.receipt_id, '[]')), p_outcome::text
      FROM att o GROUP BY o.claim_slot ORDER BY o.claim_slot
    ON CONFLICT DO NOTHING
    RETURNING claim_slot
), contested AS (
    SELECT NULL::bigint AS id
     WHERE (SELECT count(DISTINCT o.claim_slot) FROM att o)
           > (SELECT count(*) FROM closed)
)
, ended AS MATERIALIZED (
    -- The columns of the full statement's ``ended`` (the ELSE branch), as they are for
    -- an attempt that never materialized (no lease: heartbeat and deadline are the
    -- receipt's, no callback).
    SELECT a.job_id AS id, r.kind, r.queue, r.args, r.priority, a.attempt, r.max_attempts,
           r.run_at, a.claimed_at AS heartbeat_at, a.deadline_at,
           a.claimed_at AS attempted_at, r.created_at, r.errors, r.metadata, r.tags,
           r.unique_key, r.unique_states, NULL::uuid AS callback_id,
           NULL::timestamptz AS callback_timeout_at, NULL::text AS callback_filter,
           NULL::text AS callback_on_complete, NULL::text AS callback_on_fail,
           NULL::text AS callback_transform, a.run_lease, r.progress, a.claimed_by,
           a.ready_slot AS entry_slot, a.ready_id AS entry_id
      FROM closed k JOIN att a ON a.claim_slot = k.claim_slot
      CROSS JOIN LATERAL (
           SELECT * FROM awa.ready_entries r
            WHERE r.job_id = a.job_id AND r.ready_slot = a.ready_slot AND r.ready_id = a.ready_id LIMIT 1) r
)
, uq_take AS (
    INSERT INTO awa.job_unique_claims (unique_key, job_id)
    SELECT e.unique_key, e.id FROM ended e
     WHERE e.unique_key IS NOT NULL
       AND COALESCE(awa.qs_in_mask(e.unique_states, p_to_state::awa.job_state), false)
       AND NOT awa.qs_in_mask(e.unique_states, 'running')
       AND NOT EXISTS (SELECT 1 FROM awa.job_unique_claims x
                        WHERE x.unique_key = e.unique_key AND x.job_id = e.id)
), uq_give AS (
    DELETE FROM awa.job_unique_claims x USING ended e
     WHERE e.unique_key IS NOT NULL AND x.unique_key = e.unique_key AND x.job_id = e.id
       AND NOT COALESCE(awa.qs_in_mask(e.unique_states, p_to_state::awa.job_state), false)
       -- probe the keys by index, never a scan of every claim held
       AND x.unique_key = ANY(ARRAY(SELECT k.unique_key FROM ended k
                                     WHERE k.unique_key IS NOT NULL))
)

, fin AS (INSERT INTO awa.done_entries (ready_slot, id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, progress, claimed_by, ready_id)
SELECT (SELECT awa.qs_slot('queue')), e.id AS id, e.kind, e.queue, CASE WHEN awa.qs_done_names_entry(p_to_state, e.entry_slot, (SELECT awa.qs_slot('queue'))) THEN NULL ELSE e.args END, p_to_state::awa.job_state, e.priority, e.attempt, e.max_attempts, e.run_at, e.heartbeat_at, e.deadline_at, e.attempted_at, now(), e.created_at, e.errors, e.metadata, e.tags, e.unique_key, e.unique_states, e.callback_id, e.callback_timeout_at, e.callback_filter, e.callback_on_complete, e.callback_on_fail, e.callback_transform, e.run_lease, CASE WHEN p_to_state::awa.job_state = 'completed' THEN NULL ELSE e.progress END, e.claimed_by, CASE WHEN awa.qs_done_names_entry(p_to_state, e.entry_slot, (SELECT awa.qs_slot('queue'))) THEN e.entry_id END
  FROM ended e
RETURNING id)
SELECT * FROM fin UNION ALL SELECT id FROM contested;
ELSE
    -- Unbuffered writes: no delay, error, progress, metadata or reason (unnest pads the
    -- empty arrays with NULLs).
    RETURN QUERY SELECT * FROM awa.qs_end_attempts(p_ids, p_leases, '{}', '{}', '{}', '{}', '{}',
                                                   p_outcome, p_from_states, p_to_state);
END IF;
END $fn$;

-- Park materialized running attempts waiting for their callback (waiting_external, the
-- callback timeout applies instead of the deadline); buffered progress replaces, metadata
-- merges into attempt_state.
CREATE OR REPLACE FUNCTION awa.qs_park(p_ids bigint[], p_leases bigint[], p_callback_ids uuid[], p_progress jsonb[], p_meta jsonb[]) RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM awa.qs_lock_leases(p_ids, p_leases);
    RETURN QUERY WITH u AS MATERIALIZED (
    SELECT * FROM unnest(p_ids::bigint[], p_leases::bigint[], p_callback_ids::uuid[],
                         p_progress::jsonb[], p_meta::jsonb[])
           AS u(id, lease, callback_id, progress, meta)
), hit AS (
    UPDATE awa.leases l SET state = 'waiting_external', deadline_at = NULL  -- timeout applies
      FROM u
     WHERE l.job_id = u.id AND l.run_lease = u.lease AND l.state = 'running'
       AND l.callback_id = u.callback_id
    RETURNING l.job_id, l.run_lease
)
, st AS (
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, metadata)
    SELECT u.id, u.lease, u.progress, COALESCE(u.meta, '{}'::jsonb)
      FROM u JOIN hit h ON h.job_id = u.id AND h.run_lease = u.lease
     WHERE u.progress IS NOT NULL OR u.meta IS NOT NULL
    ON CONFLICT (job_id, run_lease) DO UPDATE
       SET progress = COALESCE(EXCLUDED.progress, s.progress),
           metadata = s.metadata || EXCLUDED.metadata, updated_at = now()
)
SELECT job_id FROM hit;
END $fn$;

-- A heartbeat materializes an open receipt into a lease (closing the receipt
-- 'materialized'; contested when another closer won) or refreshes the lease it already
-- has; buffered progress and metadata go to attempt_state.
CREATE OR REPLACE FUNCTION awa.qs_heartbeat(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[]) RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM awa.qs_lock_leases(p_ids, p_leases);
    RETURN QUERY WITH att AS MATERIALIZED (
    SELECT * FROM awa.qs_attempts(p_ids, p_leases, p_delay, p_error, p_progress, p_meta,
                                  p_reason)
), opened AS (
    SELECT claim_slot, receipt_id FROM att WHERE c_open
)
, closed AS (
    INSERT INTO awa.lease_claim_closure_batches (claim_slot, receipt_ranges, outcome)
    SELECT o.claim_slot, range_agg(int8range(o.receipt_id, o.receipt_id, '[]')), 'materialized'
      FROM opened o GROUP BY o.claim_slot ORDER BY o.claim_slot
    ON CONFLICT DO NOTHING
    RETURNING claim_slot
), contested AS (
    SELECT NULL::bigint AS id
     WHERE (SELECT count(DISTINCT o.claim_slot) FROM opened o)
           > (SELECT count(*) FROM closed)
)
, fresh AS (
    INSERT INTO awa.leases (lease_slot, job_id, run_lease, queue, state, attempt, claim_slot,
                            receipt_id, ready_slot, ready_id, claimed_at, heartbeat_at,
                            deadline_at, claimed_by)
    SELECT (SELECT awa.qs_slot('lease')), a.id, a.lease, a.c_queue, 'running', a.c_attempt,
           a.claim_slot,
           a.receipt_id, a.ready_slot, a.ready_id, a.claimed_at, now(), a.c_deadline,
           a.c_claimed_by
      FROM att a
     WHERE (a.c_open AND a.claim_slot IN (SELECT k.claim_slot FROM closed k))
    RETURNING job_id, run_lease
), beat AS (
    UPDATE awa.leases l SET heartbeat_at = now()
      FROM att a
     WHERE l.job_id = a.id AND l.run_lease = a.lease
       AND l.state IN ('running', 'waiting_external')
    RETURNING l.job_id, l.run_lease
), hit AS (
    SELECT job_id, run_lease FROM fresh UNION ALL SELECT job_id, run_lease FROM beat
)
, st AS (
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, metadata)
    SELECT u.id, u.lease, u.progress, COALESCE(u.meta, '{}'::jsonb)
      FROM att u JOIN hit h ON h.job_id = u.id AND h.run_lease = u.lease
     WHERE u.progress IS NOT NULL OR u.meta IS NOT NULL
    ON CONFLICT (job_id, run_lease) DO UPDATE
       SET progress = COALESCE(EXCLUDED.progress, s.progress),
           metadata = s.metadata || EXCLUDED.metadata, updated_at = now()
)
SELECT job_id FROM hit UNION ALL SELECT id FROM contested;
END $fn$;

-- Buffered progress (replaces) and metadata (merges) of attempts still open, receipt or
-- lease, into attempt_state.
CREATE OR REPLACE FUNCTION awa.qs_flush_progress(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[]) RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY WITH att AS MATERIALIZED (
    SELECT * FROM awa.qs_attempts(p_ids, p_leases, p_delay, p_error, p_progress, p_meta,
                                  p_reason)
)
, hit AS (
    SELECT a.id AS job_id, a.lease AS run_lease FROM att a WHERE a.c_open
    UNION ALL
    SELECT l.job_id, l.run_lease FROM awa.leases l JOIN att a
        ON l.job_id = a.id AND l.run_lease = a.lease
     WHERE l.state IN ('running', 'waiting_external')
)
, st AS (
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, metadata)
    SELECT u.id, u.lease, u.progress, COALESCE(u.meta, '{}'::jsonb)
      FROM att u JOIN hit h ON h.job_id = u.id AND h.run_lease = u.lease
     WHERE u.progress IS NOT NULL OR u.meta IS NOT NULL
    ON CONFLICT (job_id, run_lease) DO UPDATE
       SET progress = COALESCE(EXCLUDED.progress, s.progress),
           metadata = s.metadata || EXCLUDED.metadata, updated_at = now()
)
SELECT job_id FROM hit;
END $fn$;
