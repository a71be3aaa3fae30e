-- Queue storage: jobs placed in a given state, and ring times set, for tests (layout 10).
--
-- A test that needs a job the public API takes minutes to produce (a running attempt with
-- an old heartbeat, a waiting one whose callback times out soon, a job finalized days ago)
-- arranges it with these functions instead of writing the engine's tables itself, so the
-- rows are the engine's own shape wherever the layout goes.  The engine never calls them;
-- tests/support/arrange.py does.  A state a job image can take goes through awa.qs_place
-- (the awa.jobs view's own placement); an attempt is placed the way a claim leaves it and
-- a heartbeat materializes it.

-- Job p_job (an awa.jobs row as jsonb; keys left out are NULL, a missing id takes the next
-- one) in its state; returns its id.  A running or waiting_external attempt is its ready
-- entry at the attempt and run lease before it, the claim's receipt (claimed at
-- p_claimed_at), closed 'materialized', and the lease (claimed at the image's
-- attempted_at), with the unique claim the attempt's state holds.
CREATE OR REPLACE FUNCTION awa.qs_arrange_job(p_job jsonb, p_claimed_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    j awa.jobs := jsonb_populate_record(NULL::awa.jobs, p_job);
    lane record;
    entry record;
    receipt record;
BEGIN
    j.id := COALESCE(j.id, nextval('awa.jobs_id_seq'));
    IF j.state NOT IN ('running', 'waiting_external') THEN
        PERFORM awa.qs_place(j);
        RETURN j.id;
    END IF;
    -- The entry the attempt was claimed from (awa.qs_place's, without the unique claim an
    -- available job would take: the attempt's state decides that, below).
    SELECT * INTO lane FROM awa.qs_reserve_lane(j.queue, j.priority);
    INSERT INTO awa.ready_entries (ready_slot, ready_id, job_id, queue, priority, shard,
                                   lane_seq, kind, args, attempt, max_attempts, run_at,
                                   attempted_at, created_at, errors, metadata, tags,
                                   unique_key, unique_states, run_lease, progress)
    VALUES (awa.qs_slot('queue'), nextval('awa.qs_ready_id_seq'), j.id, j.queue, j.priority,
            lane.lane_shard, lane.base, j.kind, j.args, greatest(j.attempt - 1, 0),
            j.max_attempts, j.run_at, CASE WHEN j.attempt > 1 THEN j.attempted_at END,
            j.created_at, j.errors, j.metadata, j.tags, j.unique_key, j.unique_states,
            greatest(j.run_lease - 1, 0), j.progress)
    RETURNING ready_slot, ready_id, shard, lane_seq INTO entry;
    INSERT INTO awa.lease_claims (claim_slot, receipt_id, job_id, run_lease, queue, priority,
                                  attempt, claimed_at, deadline_at, ready_slot, ready_id, shard,
                                  lane_seq)
    VALUES (awa.qs_slot('claim'), nextval('awa.qs_receipt_id_seq'), j.id, j.run_lease, j.queue,
            j.priority, j.attempt, p_claimed_at, j.deadline_at, entry.ready_slot,
            entry.ready_id, entry.shard, entry.lane_seq)
    RETURNING claim_slot, receipt_id INTO receipt;
    INSERT INTO awa.lease_claim_closure_batches (claim_slot, receipt_ranges, outcome)
    VALUES (receipt.claim_slot,
            int8multirange(int8range(receipt.receipt_id, receipt.receipt_id, '[]')),
            'materialized');
    INSERT INTO awa.leases (lease_slot, job_id, run_lease, queue, state, attempt, claim_slot,
                            receipt_id, ready_slot, ready_id, claimed_at, heartbeat_at,
                            deadline_at, callback_id, callback_timeout_at, callback_filter,
                            callback_on_complete, callback_on_fail, callback_transform)
    VALUES (awa.qs_slot('lease'), j.id, j.run_lease, j.queue, j.state, j.attempt,
            receipt.claim_slot, receipt.receipt_id, entry.ready_slot, entry.ready_id,
            COALESCE(j.attempted_at, p_claimed_at), COALESCE(j.heartbeat_at, now()),
            j.deadline_at, j.callback_id, j.callback_timeout_at, j.callback_filter,
            j.callback_on_complete, j.callback_on_fail, j.callback_transform);
    -- The unique claim the attempt's state holds (a key another job holds raises
    -- unique_violation, as awa.qs_place does).
    IF j.unique_key IS NOT NULL AND awa.qs_in_mask(j.unique_states, j.state) THEN
        INSERT INTO awa.job_unique_claims (unique_key, job_id) VALUES (j.unique_key, j.id);
    END IF;
    RETURN j.id;
END $$;

-- Job p_job_id's times moved: its lease's heartbeat, deadline and claim time, its done
-- entry's finalization (each NULL: left as it is).  Returns whether it had either row.
CREATE OR REPLACE FUNCTION awa.qs_arrange_times(p_job_id bigint, p_heartbeat_at timestamptz,
                                                p_deadline_at timestamptz,
                                                p_claimed_at timestamptz,
                                                p_finalized_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    found_any boolean;
BEGIN
    UPDATE awa.leases
       SET heartbeat_at = COALESCE(p_heartbeat_at, heartbeat_at),
           deadline_at = COALESCE(p_deadline_at, deadline_at),
           claimed_at = COALESCE(p_claimed_at, claimed_at)
     WHERE job_id = p_job_id;
    found_any := FOUND;
    UPDATE awa.done_entries SET finalized_at = COALESCE(p_finalized_at, finalized_at)
     WHERE id = p_job_id;
    RETURN found_any OR FOUND;
END $$;

-- Ring p_ring's last rotation set at p_rotated_at (its slot and generation unchanged);
-- returns whether the ring exists.
CREATE OR REPLACE FUNCTION awa.qs_arrange_rotated_at(p_ring text, p_rotated_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE awa.queue_ring_state SET rotated_at = p_rotated_at WHERE ring = p_ring;
    RETURN FOUND;
END $$;
