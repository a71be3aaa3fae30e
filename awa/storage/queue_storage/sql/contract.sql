-- Queue storage: the contract step, `awa migrate --contract`.  Drops what compat.sql keeps
-- for older releases; run only when no live runtime speaks an older layout
-- (awa.storage.contract), after which installs of this layout leave compat.sql out.

DROP FUNCTION IF EXISTS awa.qs_finalize(bigint[], bigint[], float8[], jsonb[], jsonb[], jsonb[], text[], text, awa.job_state[], awa.job_state);
DROP FUNCTION IF EXISTS awa.qs_retry(bigint[], bigint[], float8[], jsonb[], jsonb[], jsonb[], text[], text, awa.job_state[], awa.job_state);
DROP FUNCTION IF EXISTS awa.qs_snooze(bigint[], bigint[], float8[], jsonb[], jsonb[], jsonb[], text[], text, awa.job_state[], awa.job_state);
DROP FUNCTION IF EXISTS awa.qs_dead_letter(bigint[], bigint[], float8[], jsonb[], jsonb[], jsonb[], text[], text, awa.job_state[], awa.job_state);
