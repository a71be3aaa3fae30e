"""dead-tuples on a table whose autovacuum is off (issue 46's matrix scenario
dead_tuples_climbing): the advice turns autovacuum back on -- a bare VACUUM reclaims the
rows once and the table bloats again."""

from __future__ import annotations

import psycopg
import pytest

from awa import config


@pytest.mark.engine("canonical")
def test_dead_tuples_with_autovacuum_off_advise_turning_it_back_on(database_url, ops):
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("ALTER TABLE awa.jobs_hot SET (autovacuum_enabled = false)")
        rows = config.OPS_DEAD_TUPLES_MIN + 2000
        # Written into the table itself on purpose: the check measures that table's dead tuples.
        db.execute("INSERT INTO awa.jobs_hot (kind, state, finalized_at) "
                   "SELECT 'churn', 'completed', now() FROM generate_series(1, %s)", (rows,))
        db.execute("DELETE FROM awa.jobs_hot WHERE kind = 'churn'")
        db.execute("SELECT pg_stat_force_next_flush()")
        server_on = db.execute("SELECT current_setting('autovacuum')::bool").fetchone()[0]
    result = ops("dead-tuples")
    assert result.code == 1, result.stdout + result.stderr
    finding = next(f for f in result.findings() if f["summary"].startswith("jobs_hot:"))
    assert "autovacuum is disabled" in finding["summary"]
    step = finding["next_step"]
    # the table's own setting, or the server's when autovacuum is off for the whole server
    # (as on the shared test server; the incident matrix's servers have it on)
    turn_on = ("ALTER TABLE awa.jobs_hot RESET (autovacuum_enabled)" if server_on
               else "ALTER SYSTEM SET autovacuum = on")
    assert turn_on in step
    assert step.index(turn_on) < step.index("VACUUM (VERBOSE) awa.jobs_hot")
