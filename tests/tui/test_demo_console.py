"""The demo with the console: --duration ends the TUI too; /metrics for workers and the
exporter with a ready prometheus.yml; the embedded server's fate said on exit; screenshots
land in the current directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from awa_tui import demo
from tui.conftest import press, running_console, screen_text, seed_system
from tui.test_terminal import Terminal, tmux  # noqa: F401  (the fixture)


@pytest.mark.connections(18)
def test_demo_duration_ends_the_tui_and_says_what_is_left(tmux, database_url, db, tmp_path):  # noqa: F811
    script = tmp_path / "run.sh"
    script.write_text(f"{sys.executable} -m awa_tui.demo --duration 8 --workers 1 "
                      f"--database-url '{database_url}'; echo DEMO-EXIT=$?; sleep 60\n")
    term = Terminal(tmux, ["sh", str(script)], width=80, height=24)
    try:
        term.wait_for("awa-tui Overview", timeout=60)  # the TUI, not the stats table
        screen = term.wait_for("DEMO-EXIT=0", timeout=60)  # it ended by itself
        assert "jobs inserted" in screen
        assert "the demo leaves it as it is" in screen  # our database, not the embedded one
        assert "Traceback" not in screen and "RuntimeWarning" not in screen
    finally:
        term.close()


@pytest.mark.connections(29)
def test_demo_serves_metrics_and_writes_prometheus_yml(database_url, db):
    proc = subprocess.Popen([sys.executable, "-m", "awa_tui.demo", "--duration", "20", "--workers",
                             "2", "--no-tui", "--database-url", database_url],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        while not any(line.startswith("prometheus:") for line in lines):
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        metrics = next(line for line in lines if line.startswith("metrics:"))
        urls = re.findall(r"http://[\d.]+:\d+/metrics", metrics)
        assert len(urls) == 3  # two workers and the exporter
        config = Path(next(line for line in lines if line.startswith("prometheus:"))
                      .split("--config.file=")[1].strip())
        text = config.read_text()
        for url in urls:
            assert url.split("//")[1].removesuffix("/metrics") in text
        assert "job_name: awa-workers" in text and "job_name: awa-exporter" in text
        seen: dict[str, str] = {}

        def served() -> bool:  # every endpoint answers, with the exporter's and a worker's series
            return (len(seen) == 3 and "awa_" in seen[urls[-1]]
                    and any("awa_" in seen[u] for u in urls[:2]))

        # A worker serves /metrics before its first measurement: poll until the series appear.
        deadline = time.monotonic() + 60
        while not served() and time.monotonic() < deadline:
            for url in urls:
                try:
                    seen[url] = httpx.get(url, timeout=2).text
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        assert len(seen) == 3, seen.keys()
        assert "awa_" in seen[urls[-1]]  # the exporter's series
        assert any("awa_" in body for body in list(seen.values())[:2])  # a worker's series
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_exit_message_names_the_running_embedded_server_and_how_to_stop_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    data = tmp_path / "awa" / "pgdata"
    data.mkdir(parents=True)
    assert "is not running" in demo.embedded_server_status()
    (data / "postmaster.pid").write_text(f"{os.getpid()}\n{data}\n")  # a live pid stands in
    text = demo.embedded_server_status()
    assert f"still running (pid {os.getpid()}" in text
    assert f"Stop it with: kill -INT {os.getpid()}" in text


async def test_screenshot_goes_to_the_current_directory(database_url, db, tmp_path, monkeypatch):
    seed_system(db)
    monkeypatch.chdir(tmp_path)
    async with running_console(database_url) as (app, pilot):
        app.deliver_screenshot()
        await press(app, pilot)
        shots = list(tmp_path.glob("*.svg"))
        assert len(shots) == 1 and shots[0].name.startswith("awa-tui")
        assert shots[0].read_text().startswith("<svg")
        assert f"screenshot saved to {shots[0]}" in screen_text(app)
