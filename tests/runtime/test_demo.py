"""The README's main command: the demo runs, works jobs and stops by itself."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_for_a_while_and_stops(database_url, db):
    out = subprocess.run([sys.executable, "-m", "awa.demo", "--duration", "6", "--workers", "2",
                          "--no-tui", "--database-url", database_url],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "queue stats" in out.stdout and "jobs inserted" in out.stdout
    states = {r["kind"]: r["n"] for r in db.execute(
        "SELECT kind, count(*) AS n FROM awa.jobs WHERE state = 'completed' GROUP BY kind")}
    assert states.get("send_email", 0) > 10, states
    # Every worker process shut down cleanly.
    alive = db.execute("SELECT count(*) AS n FROM awa.runtime_instances "
                       "WHERE NOT shutting_down").fetchone()["n"]
    assert alive == 0
