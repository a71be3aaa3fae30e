"""mvcc-horizon names every holder; dead-tuples links bloat to the pinned horizon."""

from __future__ import annotations

import os
import time

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from awa import schema
from ops.ops_helpers import run_ops, summaries


def test_mvcc_horizon_names_each_holder(prepared_xacts_server, tmp_path):
    admin = prepared_xacts_server
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE DATABASE horizon")
    url = make_conninfo(admin, dbname="horizon")
    with psycopg.connect(url, autocommit=True) as conn:
        schema.migrate_sync(conn)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}

    clean = run_ops("diagnose", "mvcc-horizon", "--database-url", url, "--json", env=env)
    assert clean.code == 0, clean.stdout

    writer = psycopg.connect(url, application_name="stuck-writer")
    reader = psycopg.connect(url, application_name="rr-report")
    preparer = psycopg.connect(url, autocommit=True)
    try:
        # holds an xid, then idles
        writer.execute("INSERT INTO awa.queue_meta (queue) VALUES ('q1')")
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM awa.jobs_hot")  # takes and keeps its snapshot
        preparer.execute("BEGIN")
        preparer.execute("INSERT INTO awa.queue_meta (queue) VALUES ('q2')")
        preparer.execute("PREPARE TRANSACTION 'awa-ops-test-gid'")
        time.sleep(1.2)

        result = run_ops("diagnose", "mvcc-horizon", "--database-url", url, "--json",
                         "--min-age", "1", env=env)
        assert result.code == 1, result.stdout
        text = summaries(result.data)
        findings = result.data["findings"]
        writer_pid = writer.info.backend_pid
        reader_pid = reader.info.backend_pid

        idle = next(f for f in findings if f"pid {writer_pid} " in f["summary"])
        assert idle["summary"].startswith("idle-in-transaction session holding an xid")
        assert "stuck-writer" in idle["summary"] and "xid " in idle["summary"]
        assert f"pg_terminate_backend({writer_pid})" in idle["next_step"]

        rr = next(f for f in findings if f"pid {reader_pid} " in f["summary"])
        assert "rr-report" in rr["summary"] and "xmin" in rr["summary"]
        assert f"pg_terminate_backend({reader_pid})" in rr["next_step"]

        prepared = next(f for f in findings if "prepared transaction" in f["summary"])
        assert "'awa-ops-test-gid'" in prepared["summary"]
        assert "ROLLBACK PREPARED 'awa-ops-test-gid'" in prepared["next_step"]
        assert all(f["severity"] == "warning" for f in findings), text
    finally:
        writer.close()
        reader.close()
        preparer.execute("ROLLBACK PREPARED 'awa-ops-test-gid'")
        preparer.close()
    after = run_ops("diagnose", "mvcc-horizon", "--database-url", url, "--json", "--min-age", "1",
                    env=env)
    assert after.code == 0, after.stdout


def test_churn_under_a_pinned_horizon_points_at_mvcc_horizon(database_url, ops):
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as db, \
            psycopg.connect(database_url, application_name="pinning-reader") as reader:
        assert ops("dead-tuples").code == 0
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT 1 FROM awa.jobs_hot LIMIT 1")
        # Queue churn: jobs arrive and are deleted (as completion + cleanup would).
        # Written into the table itself on purpose: the check measures that table's dead tuples.
        for _ in range(4):
            db.execute("INSERT INTO awa.jobs_hot (kind, state, finalized_at) "
                       "SELECT 'churn', 'completed', now() FROM generate_series(1, 2000)")
            db.execute("DELETE FROM awa.jobs_hot WHERE kind = 'churn'")
        db.execute("VACUUM awa.jobs_hot")  # runs, but cannot reclaim what the reader may see
        db.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(1.1)

        result = ops("dead-tuples", "--min-age", "1")
        assert result.code == 1, result.stdout
        finding = next(f for f in result.findings() if f["summary"].startswith("jobs_hot:"))
        assert finding["next_step"].startswith("awa-ops diagnose mvcc-horizon")
        row = finding["evidence"][0]
        assert row["n_dead_tup"] > row["autovacuum_trigger"]
        assert "pinning-reader" in finding["why"]
        reader.rollback()
