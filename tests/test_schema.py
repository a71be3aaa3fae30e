"""The canonical schema: migrations, the version check, and the seed's SQL verbatim."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

import awa
from awa import schema

# The troubleshooting guide's queries that name canonical tables (seed 004), verbatim.
SEED_RUNNING = """SELECT id, kind, queue, attempt, heartbeat_at, deadline_at
FROM awa.jobs
WHERE state = 'running'
ORDER BY heartbeat_at ASC;"""
SEED_RUNTIME_HEALTH = """SELECT
    instance_id,
    hostname,
    pid,
    last_seen_at,
    healthy,
    postgres_connected,
    poll_loop_alive,
    heartbeat_alive,
    maintenance_alive,
    leader,
    shutting_down
FROM awa.runtime_instances
ORDER BY leader DESC, last_seen_at DESC;"""
SEED_UNIQUE_WEDGE = """SELECT j.id AS stuck_job, j.kind, j.queue, j.unique_key,
       c.job_id AS claim_holder, h.state AS holder_state
FROM awa.jobs_hot j
JOIN awa.job_unique_claims c ON c.unique_key = j.unique_key AND c.job_id <> j.id
LEFT JOIN awa.jobs h ON h.id = c.job_id
WHERE j.state = 'running';"""
SEED_SHARDS_UPSERT = """INSERT INTO awa.queue_meta (queue, enqueue_shards)
VALUES ('<queue>', 4)
ON CONFLICT (queue)
DO UPDATE SET enqueue_shards = EXCLUDED.enqueue_shards;"""
SEED_SHARDS_READ = "SELECT queue, enqueue_shards FROM awa.queue_meta WHERE queue = '<queue>';"
SEED_BACKENDS = """SELECT
    backend,
    schema_name,
    updated_at
FROM awa.runtime_storage_backends;"""


@pytest.mark.parametrize("sql", [SEED_RUNNING, SEED_RUNTIME_HEALTH, SEED_UNIQUE_WEDGE,
                                 SEED_SHARDS_UPSERT, SEED_SHARDS_READ, SEED_BACKENDS])
def test_seed_sql_runs_verbatim(db, sql):
    db.execute(sql)


def test_shards_upsert_then_read(db):
    db.execute(SEED_SHARDS_UPSERT)
    row = db.execute(SEED_SHARDS_READ).fetchone()
    assert row == {"queue": "<queue>", "enqueue_shards": 4}


def test_schema_version_recorded(db):
    rows = db.execute("SELECT version FROM awa.schema_version ORDER BY version").fetchall()
    assert [r["version"] for r in rows] == [m.version for m in schema.migrations()]


def test_migrate_is_idempotent(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert schema.migrate_sync(conn) == []
        assert schema.ensure_migrated_sync(conn) == schema.current_migration_version()


def test_unmigrated_database_names_the_fix(empty_database_url):
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        with pytest.raises(awa.SchemaNotMigrated, match="awa migrate"):
            schema.ensure_migrated_sync(conn)


def test_concurrent_migrations_leave_one_schema(empty_database_url):
    code = ("import sys, psycopg; from awa import schema\n"
            "c = psycopg.connect(sys.argv[1], autocommit=True)\n"
            "print(' '.join(map(str, schema.migrate_sync(c))))")
    procs = [subprocess.Popen([sys.executable, "-c", code, empty_database_url],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    # each migration ran exactly once, in whichever process reached it first (one
    # transaction per migration, so two migrators may share the work between them)
    applied = sorted(int(v) for out in outputs for v in out)
    assert applied == [m.version for m in schema.migrations()]
    with psycopg.connect(empty_database_url) as conn:
        n = conn.execute("SELECT count(*) FROM awa.schema_version").fetchone()[0]
        assert n == len(schema.migrations())


def test_unique_claim_trigger_takes_and_releases(db):
    # The table's own trigger is under test, so the rows are written into the table itself.
    insert = ("INSERT INTO awa.jobs_hot (kind, unique_key, unique_states) "
              "VALUES ('k', '\\x01', B'11111000') RETURNING id")
    first = db.execute(insert).fetchone()["id"]
    with pytest.raises(psycopg.errors.UniqueViolation, match="idx_awa_jobs_unique"):
        db.execute(insert)
    db.execute("UPDATE awa.jobs_hot SET state = 'cancelled' WHERE id = %s", (first,))
    assert db.execute("SELECT count(*) AS n FROM awa.job_unique_claims").fetchone()["n"] == 0
    db.execute(insert)
