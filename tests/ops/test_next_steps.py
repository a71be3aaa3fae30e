"""Exact, safe next steps (issue 33): each suggested redrive matches where the jobs sit
(DLQ or failed), is scoped to exactly one cause (error fingerprint), names the database the
tool used, and -- run with --dry-run -- would touch exactly that cause's jobs."""

from __future__ import annotations

import json
import os
import re
import shlex

from click.testing import CliRunner

from awa import db as awa_db
from awa.cli import main as awa_cli
from ops.ops_helpers import run_ops
from support.arrange import insert_job

REPEATS = 3  # identical attempts per job: a poison job (config.OPS_POISON_REPEATS)


def errors(message: str) -> list[str]:
    return [json.dumps({"error": message, "attempt": n, "at": "2026-01-15T12:00:00+00:00"})
            for n in range(1, REPEATS + 1)]


def dead_letter(db, job_id: int, queue: str, kind: str, message: str) -> int:
    db.execute("""INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, attempt, errors,
                      dlq_reason, dlq_at, created_at, run_at, finalized_at)
                  VALUES (%s, %s, %s, '{}', 'failed', %s, %s::jsonb[], 'max_attempts_exhausted',
                          now(), now(), now(), now())""",
               [job_id, kind, queue, REPEATS, errors(message)])
    return job_id


def arrange(db) -> dict[str, set[int]]:
    """Two causes in one queue's DLQ (the issue's `--queue imports` would redrive both), and
    failed jobs, not dead-lettered, of a third cause."""
    causes = {
        "bad-date": {dead_letter(db, 91_000 + i, "imports", "import_rows",
                                 f"cannot parse row {17 + i}: bad date '2024-13-0{i}'")
                     for i in range(1, 6)},
        "refused": {dead_letter(db, 92_000 + i, "imports", "import_rows",
                                f"connection refused by 10.0.0.{i}:5432")
                    for i in range(1, 5)},
        "timeout": {insert_job(db, "failed", kind="crawl", queue="crawler", attempt=REPEATS,
                               max_attempts=REPEATS, errors=[json.loads(e) for e in errors(
                                   f"timeout after {30 + i}s fetching /pages/{i}")])
                    for i in range(1, 4)},
    }
    return causes


def dry_run(command: str) -> set[int]:
    args = shlex.split(command)
    assert args[0] == "awa", command
    out = CliRunner().invoke(awa_cli, [*args[1:], "--dry-run"])
    assert out.exit_code == 0, out.output
    assert "nothing changed" in out.output
    match = re.search(r"job ids: ([\d, ]+)", out.output)
    return {int(i) for i in match.group(1).split(", ")} if match else set()


def test_each_redrive_suggestion_touches_exactly_its_causes_jobs(database_url, db, tmp_path):
    causes = arrange(db)
    env = {k: v for k, v in os.environ.items() if k != awa_db.DATABASE_URL_ENV}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    result = run_ops("diagnose", "dlq", "--database-url", database_url, "--json", env=env)
    steps = [f["next_step"] for f in result.findings() if "repeated error" in f["summary"]]
    assert len(steps) == 3, result.stdout
    touched: list[set[int]] = []
    for step in steps:
        assert "$DATABASE_URL" not in step  # it was not set: the database used is named
        assert database_url in step  # as given, runnable as printed
        commands = step.split("then: ", 1)[1].split(" ; ")
        assert len(commands) == 1, step  # each cause sits in one place here
        command = commands[0]
        ids = dry_run(command)
        touched.append(ids)
        if ids <= causes["timeout"]:
            assert " job retry-failed " in command  # failed, not dead-lettered
        else:
            assert " dlq retry-bulk " in command
    assert sorted(map(sorted, touched)) == sorted(map(sorted, causes.values()))


def test_bulk_commands_dry_run_and_fingerprint(database_url, db):
    from awa.fingerprint import fingerprint

    causes = arrange(db)
    url = ["--database-url", database_url]
    print_ = fingerprint("connection refused by 10.0.0.1:5432")
    for command in (["dlq", "retry-bulk"], ["dlq", "purge"]):
        ids = dry_run(shlex.join(["awa", *command, "--fingerprint", print_, *url]))
        assert ids == causes["refused"]
    # The real thing acts on exactly those (no terminal here, so no question asked).
    out = CliRunner().invoke(awa_cli, ["dlq", "purge", "--fingerprint", print_, *url])
    assert out.exit_code == 0 and "purged 4 DLQ entries" in out.output, out.output
    left = {r["job_id"] for r in db.execute("SELECT job_id FROM awa.dlq_entries")}
    assert left == causes["bad-date"]
    # The queue-wide form previews both causes' entries before touching them.
    assert dry_run(shlex.join(["awa", "dlq", "retry-bulk", "--queue", "imports", *url])) == \
        causes["bad-date"]
    timeout = fingerprint("timeout after 31s fetching /pages/1")
    assert dry_run(shlex.join(["awa", "dlq", "move", "--fingerprint", timeout, *url])) == \
        causes["timeout"]
    assert dry_run(shlex.join(["awa", "job", "discard", "--kind", "crawl", *url])) == \
        causes["timeout"]
    out = CliRunner().invoke(awa_cli, ["job", "retry-failed", "--fingerprint", timeout, *url])
    assert out.exit_code == 0 and "retried 3 of 3 failed job(s)" in out.output, out.output


def test_dlq_bulk_commands_filter_by_reason(database_url, db):
    causes = arrange(db)  # every entry max_attempts_exhausted
    terminal = {dead_letter(db, 93_000 + i, "imports", "import_rows", "schema mismatch")
                for i in range(1, 3)}
    db.execute("UPDATE awa.dlq_entries SET dlq_reason = 'terminal_error' WHERE job_id = ANY(%s)",
               [sorted(terminal)])
    url = ["--database-url", database_url]
    assert dry_run(shlex.join(["awa", "dlq", "purge", "--queue", "imports", "--reason",
                               "terminal_error", *url])) == terminal
    out = CliRunner().invoke(awa_cli, ["dlq", "retry-bulk", "--reason", "terminal_error", *url])
    assert out.exit_code == 0 and "retried 2 DLQ job(s)" in out.output, out.output
    left = {r["job_id"] for r in db.execute("SELECT job_id FROM awa.dlq_entries")}
    assert left == causes["bad-date"] | causes["refused"]


def test_queue_drain_dry_run_counts_and_changes_nothing(database_url):
    import awa

    with awa.Client(database_url) as client:
        client.insert_many([{}] * 4, kind="fast", queue="mail")
        out = CliRunner().invoke(awa_cli, ["queue", "drain", "mail", "--dry-run",
                                           "--database-url", database_url])
        assert out.exit_code == 0 and "would cancel 4 waiting job(s)" in out.output
        assert [s.available for s in client.queue_stats() if s.queue == "mail"] == [4]
