-- Queue storage: what older releases call and this layout replaced, kept as thin wrappers
-- over the new functions (expand/contract, docs/architecture.md "Releases that roll").
--
-- A runtime of an older release keeps running on a database this code migrated (a rolling
-- upgrade, or a rollback) only if every function it calls is still there, with its
-- signature and its meaning.  Each function here is one an older release calls
-- (tests/upgrade/manifests/<release>-queue_storage.json lists them all; a test checks
-- that every one is installed) and this code no longer does.  They stay until
-- `awa migrate --contract`, which runs contract.sql once no live runtime speaks an older
-- layout, and are left out of every later install of this layout.

-- Layouts 0-6 (awa-py up to 32a8704): one function per destination, where layout 7 ends
-- every attempt through awa.qs_end_attempts.  Each older call passed the p_to_state its
-- function implied (retry: retryable, snooze: scheduled, dead-letter: NULL).
CREATE OR REPLACE FUNCTION awa.qs_finalize(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[], p_outcome text, p_from_states awa.job_state[], p_to_state awa.job_state) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT * FROM awa.qs_end_attempts(p_ids, p_leases, p_delay, p_error, p_progress, p_meta,
                                      p_reason, p_outcome, p_from_states, p_to_state)
$$;
CREATE OR REPLACE FUNCTION awa.qs_retry(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[], p_outcome text, p_from_states awa.job_state[], p_to_state awa.job_state) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT * FROM awa.qs_end_attempts(p_ids, p_leases, p_delay, p_error, p_progress, p_meta,
                                      p_reason, p_outcome, p_from_states, 'retryable')
$$;
CREATE OR REPLACE FUNCTION awa.qs_snooze(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[], p_outcome text, p_from_states awa.job_state[], p_to_state awa.job_state) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT * FROM awa.qs_end_attempts(p_ids, p_leases, p_delay, p_error, p_progress, p_meta,
                                      p_reason, p_outcome, p_from_states, 'scheduled')
$$;
CREATE OR REPLACE FUNCTION awa.qs_dead_letter(p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], p_progress jsonb[], p_meta jsonb[], p_reason text[], p_outcome text, p_from_states awa.job_state[], p_to_state awa.job_state) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT * FROM awa.qs_end_attempts(p_ids, p_leases, p_delay, p_error, p_progress, p_meta,
                                      p_reason, p_outcome, p_from_states, NULL)
$$;
