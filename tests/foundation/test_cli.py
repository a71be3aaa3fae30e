"""The `awa` command, run for real: as subprocesses and through click's runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import awa
from awa import schema
from awa.cli import main

from .conftest import SendEmail

AWA = str(Path(sys.executable).parent / "awa")


def awa_cmd(*args: str, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run([AWA, *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})})


def cli(*args: str, **kwargs):
    return CliRunner().invoke(main, list(args), **kwargs)


def assert_one_line_error(stderr: str, *fragments: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], stderr


def test_migrate_then_up_to_date(empty_database_url):
    first = awa_cmd("migrate", "--database-url", empty_database_url)
    assert first.returncode == 0 and "applied migrations" in first.stdout, first.stderr
    again = awa_cmd("--database-url", empty_database_url, "migrate")
    assert again.returncode == 0 and "already up to date" in again.stdout


def test_four_processes_migrate_at_once(empty_database_url):
    procs = [subprocess.Popen([AWA, "--database-url", empty_database_url, "migrate"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    outputs = sorted(out for out, _ in results)
    # each migration is applied by exactly one process (one transaction per migration, so
    # two migrators may share them); the others say the schema was already up to date
    applied = sorted(int(v) for o in outputs if o.startswith("applied migrations")
                     for v in o.removeprefix("applied migrations ").split(";")[0].split(", "))
    assert applied == [m.version for m in schema.migrations()], outputs
    assert all(o.startswith(("applied migrations", "schema already up to date"))
               for o in outputs), outputs
    import psycopg
    with psycopg.connect(empty_database_url) as conn:
        versions = conn.execute("SELECT version FROM awa.schema_version ORDER BY 1").fetchall()
        assert [v[0] for v in versions] == [m.version for m in schema.migrations()]
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'awa'"
                            ).fetchone()[0] == 1


def test_migrate_sql_needs_no_database():
    result = awa_cmd("migrate", "--sql", "--database-url", "postgresql://nowhere:1/x")
    assert result.returncode == 0
    assert "CREATE TABLE IF NOT EXISTS awa.jobs_hot" in result.stdout
    assert "awa.schema_version" in result.stdout


def test_database_url_before_or_after_the_subcommand_and_from_env(database_url):
    for args in (["--database-url", database_url, "queue", "stats", "--json"],
                 ["queue", "stats", "--json", "--database-url", database_url],
                 ["queue", "--database-url", database_url, "stats", "--json"]):
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == []
    from_env = awa_cmd("queue", "stats", "--json", env={"DATABASE_URL": database_url})
    assert from_env.returncode == 0 and json.loads(from_env.stdout) == []


def test_db_names_the_database_with_password_redacted(database_url):
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    parts = conninfo_to_dict(database_url)
    as_url = (f"postgresql://{parts['user']}:s3cret@{parts['host']}:{parts['port']}/"
              f"{parts['dbname']}")
    for secret_url in (as_url, make_conninfo(database_url, password="s3cret")):
        result = cli("db", "--database-url", secret_url)
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output and "***" in result.output
        assert "--database-url" in result.output and "up to date" in result.output
    as_json = json.loads(cli("db", "--json", "--database-url", database_url).stdout)
    assert as_json["schema_version"] == schema.current_migration_version()


def test_job_commands(database_url):
    with awa.Client(database_url) as client:
        first = client.insert(SendEmail("a"), queue="email")
        second = client.insert(SendEmail("b"), queue="email")
    listed = json.loads(cli("job", "list", "--json", "--database-url", database_url).stdout)
    assert [j["id"] for j in listed] == [second.id, first.id]
    assert listed[0]["state"] == "available" and "args" not in listed[0]  # never fetched
    table = cli("job", "list", "--queue", "email", "--limit", "1", "--database-url", database_url)
    assert str(second.id) in table.stdout and "send_email" in table.stdout
    assert "1 job(s)" in table.stdout

    dump = cli("job", "dump", str(first.id), "--database-url", database_url)
    assert (dump.exit_code == 0 and f"job {first.id}" in dump.stdout
            and "errors: none" in dump.stdout)
    assert json.loads(cli("job", "dump", str(first.id), "--json", "--database-url",
                          database_url).stdout)["kind"] == "send_email"

    cancel = cli("job", "cancel", str(first.id), "--database-url", database_url)
    assert cancel.exit_code == 0 and "cancelled job" in cancel.stdout
    again = cli("job", "cancel", str(first.id), "--database-url", database_url)
    assert again.exit_code == 1
    assert_one_line_error(again.stderr, f"job {first.id} is cancelled")
    retry = cli("job", "retry", str(first.id), "--database-url", database_url)
    assert retry.exit_code == 0 and "available again" in retry.stdout

    import psycopg
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now()")
    result = cli("job", "retry-failed", "--queue", "email", "--database-url", database_url)
    assert result.exit_code == 0 and "retried 2 of 2" in result.stdout
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now()")
    result = cli("job", "discard", "--kind", "send_email", "--database-url", database_url)
    assert result.exit_code == 0 and "discarded 2" in result.stdout


def test_queue_commands(database_url):
    with awa.Client(database_url) as client:
        client.insert_many([SendEmail("a"), SendEmail("b")], queue="email")
    stats = cli("queue", "stats", "--database-url", database_url)
    assert stats.exit_code == 0 and "email" in stats.stdout
    assert cli("queue", "pause", "email", "--by", "me", "--database-url",
               database_url).exit_code == 0
    [row] = json.loads(cli("queue", "stats", "--json", "--database-url", database_url).stdout)
    assert row["paused"] is True and row["available"] == 2 and row["total_queued"] == 2
    assert cli("queue", "resume", "email", "--database-url", database_url).exit_code == 0
    drained = cli("queue", "drain", "email", "--database-url", database_url)
    assert "cancelled 2" in drained.stdout
    [row] = json.loads(cli("queue", "stats", "--json", "--database-url", database_url).stdout)
    assert row["paused"] is False and row["available"] == 0


def test_dlq_commands(database_url):
    import psycopg
    with awa.Client(database_url) as client:
        jobs = client.insert_many([SendEmail(str(i)) for i in range(3)], queue="email")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now()")
    url = ["--database-url", database_url]
    refused = cli("dlq", "move", *url)
    assert refused.exit_code == 2
    assert_one_line_error(refused.stderr, "--all")
    assert "moved job" in cli("dlq", "move", str(jobs[0].id), "--reason", "poison", *url).stdout
    assert "moved 2" in cli("dlq", "move", "--queue", "email", "--reason", "backfill", *url).stdout
    depth = json.loads(cli("dlq", "depth", "--json", *url).stdout)
    assert depth == {"total": 3, "by_queue": {"email": 3}}
    listed = json.loads(cli("dlq", "list", "--json", *url).stdout)
    assert {e["reason"] for e in listed} == {"poison", "backfill"}
    assert "poison" in cli("dlq", "list", "--queue", "email", *url).stdout
    assert "is available again" in cli("dlq", "retry", str(jobs[0].id), *url).stdout
    missing = cli("dlq", "retry", str(jobs[0].id), *url)
    assert missing.exit_code == 1
    assert_one_line_error(missing.stderr, "not in the DLQ")
    purge = cli("dlq", "purge", *url)
    assert purge.exit_code == 2
    assert_one_line_error(purge.stderr, "--all")
    assert json.loads(cli("dlq", "depth", "--json", *url).stdout)["total"] == 2
    assert "retried 2" in cli("dlq", "retry-bulk", "--queue", "email", "--kind", "send_email",
                              *url).stdout
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now()")
    assert "moved 3" in cli("dlq", "move", "--all", *url).stdout
    assert "purged 0 DLQ entries" in cli("dlq", "purge", "--queue", "email", "--tag", "none",
                                         *url).stdout
    assert "purged 3 DLQ entries" in cli("dlq", "purge", "--all", *url).stdout
    assert json.loads(cli("dlq", "depth", "--json", *url).stdout)["total"] == 0


@pytest.mark.parametrize("args, fragments", [
    (["job", "dump", "424242"], ["job 424242 not found"]),
    (["job", "cancel", "424242"], ["job 424242 not found"]),
    (["job", "retry", "424242"], ["job 424242 not found"]),
])
def test_unknown_job_ids_are_one_line(database_url, args, fragments):
    result = awa_cmd(*args, "--database-url", database_url)
    assert result.returncode == 1
    assert_one_line_error(result.stderr, *fragments)


@pytest.mark.parametrize("args, fragments", [
    (["job", "list", "--state", "done"], ["'done' is not one of"]),
    (["job", "list", "--limit", "0"], ["--limit"]),
    (["job", "list", "--frobnicate"], ["No such option"]),
    (["job", "dump", "abc"], ["'abc' is not a valid integer"]),
    (["job", "retry-failed"], ["--kind, --queue or --fingerprint"]),
    (["job", "discard"], ["--kind"]),
    (["dlq", "purge"], ["--all"]),
    (["dlq", "retry-bulk"], ["--all"]),
    (["dlq", "retry", "1", "--priority", "5"], ["--priority"]),
    (["nonsense"], ["No such command"]),
])
def test_usage_mistakes_are_one_line_before_touching_the_database(args, fragments):
    # The URL is never used: each mistake is caught before connecting.
    result = cli("--database-url", "postgresql://postgres@127.0.0.1:1/unused", *args)
    assert result.exit_code == 2, result.output
    assert_one_line_error(result.stderr, *fragments)


@pytest.mark.parametrize("url, fragment", [
    ("postgresql://postgres@127.0.0.1:1/nowhere", "cannot connect"),
    ("postgresql://postgres@127.0.0.1/this_database_does_not_exist", "does not exist"),
    ("not a url", "cannot connect"),
])
def test_bad_database_urls_are_one_line(url, fragment):
    result = awa_cmd("--database-url", url, "queue", "stats")
    assert result.returncode == 1
    assert_one_line_error(result.stderr, fragment)


def test_unmigrated_database_is_one_line(empty_database_url):
    result = awa_cmd("job", "list", "--database-url", empty_database_url)
    assert result.returncode == 1
    assert_one_line_error(result.stderr, "awa migrate")
    db_info = awa_cmd("db", "--database-url", empty_database_url)
    assert db_info.returncode == 0 and "not migrated" in db_info.stdout


def test_commands_from_the_entry_point_group(tmp_path):
    (tmp_path / "awa_demo_plugin.py").write_text(
        "import click\n"
        "@click.command()\n"
        "def hello():\n"
        "    'Say hello from a plugin.'\n"
        "    click.echo('hello from a plugin')\n")
    dist = tmp_path / "awa_demo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: awa-demo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[awa.commands]\nhello = awa_demo_plugin:hello\n")
    env = {"PYTHONPATH": str(tmp_path)}
    result = awa_cmd("hello", env=env)
    assert result.returncode == 0 and result.stdout.strip() == "hello from a plugin"
    assert "hello" in awa_cmd("--help", env=env).stdout
