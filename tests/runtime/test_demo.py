"""The README's main command: the demo runs, works jobs and stops by itself."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.connections(33)
def test_demo_runs_for_a_while_and_stops(database_url, db):
    out = subprocess.run([sys.executable, "-m", "awa_tui.demo", "--duration", "6", "--workers", "2",
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


@pytest.mark.connections(20)
def test_demo_piped_prints_its_stats_while_it_runs(database_url):
    """Piped (no terminal to redraw a live table in), the demo prints a whole stats table
    every few seconds while it runs, not nothing until it stops."""
    import threading
    import time

    from awa import config

    proc = subprocess.Popen([sys.executable, "-m", "awa_tui.demo", "--duration", "30", "--workers",
                             "1", "--no-tui", "--database-url", database_url],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        reader.join(timeout=120)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    tables = [when for when, line in lines if "queue stats" in line]
    stopping = next(when for when, line in lines if line.startswith("stopping producers"))
    started = lines[0][0]
    # While it ran: tables at the set pace (with room for a loaded machine), then the last.
    during = [when for when in tables if when < stopping]
    assert len(during) >= 3, [line for _, line in lines]
    assert during[0] - started < 15
    assert max(b - a for a, b in zip(during, during[1:])) < 3 * config.DEMO_PIPED_EVERY_S + 5
    assert "\x1b[" not in "".join(line for _, line in lines)  # plain text, no control codes
