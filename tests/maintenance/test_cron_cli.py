"""`awa cron ...` as an operator runs it: a real subprocess against the test database."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import awa


@dataclass
class Digest:
    team: str


def awa_cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from awa.cli import main; main()",
                           "cron", *args, "--database-url", database_url],
                          capture_output=True, text=True, timeout=60)


def test_cron_cli_lists_pauses_resumes_triggers_and_removes(database_url, db):
    with awa.Client(database_url) as client:
        client.periodic("digest", "0 9 * * 1-5", Digest, Digest(team="ops"),
                        timezone="Europe/Paris", queue="mail")
        client.sync_cron_jobs()

    listed = awa_cli(database_url, "list")
    assert listed.returncode == 0, listed.stderr
    assert "digest" in listed.stdout and "Europe/Paris" in listed.stdout

    assert awa_cli(database_url, "pause", "digest", "--by", "alice").returncode == 0
    [row] = json.loads(awa_cli(database_url, "list", "--json").stdout)
    assert row["paused"] is True and row["paused_by"] == "alice"
    assert awa_cli(database_url, "resume", "digest").returncode == 0
    assert db.execute("SELECT paused_at FROM awa.cron_jobs").fetchone()["paused_at"] is None

    triggered = awa_cli(database_url, "trigger", "digest", "--json")
    assert triggered.returncode == 0, triggered.stderr
    job = json.loads(triggered.stdout)
    assert job["kind"] == "digest" and job["queue"] == "mail"
    assert db.execute("SELECT state::text FROM awa.jobs WHERE id = %s",
                      (job["id"],)).fetchone()["state"] == "available"

    missing = awa_cli(database_url, "pause", "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == ("error: no cron job named 'nope'; "
                                      "`awa cron list` shows the schedules")
    assert "Traceback" not in missing.stderr

    assert awa_cli(database_url, "remove", "digest").returncode == 0
    assert awa_cli(database_url, "remove", "digest").returncode == 1
    assert db.execute("SELECT count(*) AS n FROM awa.cron_jobs").fetchone()["n"] == 0
