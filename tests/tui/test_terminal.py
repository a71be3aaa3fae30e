"""Smoke test: the installed `awa-tui` command in a real terminal (tmux), read with capture-pane."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tui.conftest import add_running, add_runtime

AWA_TUI = Path(sys.executable).with_name("awa-tui")


@pytest.fixture(scope="module")
def tmux() -> str:
    """tmux, installed from Debian when this machine lacks it."""
    if shutil.which("tmux") is None:
        subprocess.run(["apt-get", "update"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "tmux"], check=True, capture_output=True)
    path = shutil.which("tmux")
    assert path, "tmux could not be installed"
    return path


class Terminal:
    """One tmux server on a private socket, one window (160x45 unless told) running a command."""

    def __init__(self, tmux: str, command: list[str], width: int = 160, height: int = 45,
                 cwd: str | None = None) -> None:
        self.base = [tmux, "-L", f"awa-tui-test-{uuid.uuid4().hex[:8]}"]
        env = {**os.environ, "TERM": "xterm-256color"}
        subprocess.run(self.base + ["new-session", "-d", "-s", "tui", "-x", str(width),
                                    "-y", str(height), *(["-c", cwd] if cwd else []),
                                    subprocess.list2cmdline(command)], check=True, env=env)

    def screen(self) -> str:
        out = subprocess.run(self.base + ["capture-pane", "-p", "-t", "tui"],
                             capture_output=True, text=True)
        return out.stdout

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{screen}")
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        subprocess.run(self.base + ["send-keys", "-t", "tui", *keys], check=True)

    def alive(self) -> bool:
        return subprocess.run(self.base + ["has-session", "-t", "tui"],
                              capture_output=True).returncode == 0

    def close(self) -> None:
        subprocess.run(self.base + ["kill-server"], capture_output=True)


def test_awa_tui_runs_in_a_real_terminal(tmux, database_url, db):
    now = datetime.now(UTC)
    add_runtime(db, host="bastion-worker", pid=4242, leader=True, last_seen=now)
    job = add_running(db, kind="nightly_report", heartbeat_age=0, running_for=0, deadline_in=0)
    db.execute("UPDATE awa.jobs SET heartbeat_at = now(), attempted_at = now() - interval "
               "'40 seconds', deadline_at = now() + interval '10 minutes' WHERE id = %s", [job])
    term = Terminal(tmux, [str(AWA_TUI), "--database-url", database_url, "--refresh", "1"])
    try:
        screen = term.wait_for("★ LEADER")
        assert "bastion-worker" in screen and "Overview" in screen
        assert "NO LEADER" not in screen
        term.keys("2")
        screen = term.wait_for("nightly_report")
        assert "alive" in screen and "Running" in screen
        term.keys("?")
        term.wait_for("Running: keys")
        term.keys("Escape")
        deadline = time.monotonic() + 10
        while "Running: keys" in term.screen() and time.monotonic() < deadline:
            time.sleep(0.1)  # a key right after Escape would read as alt+key
        term.keys("q")
        deadline = time.monotonic() + 10
        while term.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not term.alive(), "awa-tui did not exit on q"
    finally:
        term.close()


def test_bad_flags_are_one_line_errors(database_url):
    out = subprocess.run([str(AWA_TUI), "--database-url", database_url, "--refresh", "0.01"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "Invalid value for --refresh: must be between 0.5 and 60 seconds" in out.stderr
    assert "Traceback" not in out.stderr
    out = subprocess.run([str(AWA_TUI), "--database-url", database_url, "--min-age", "soon"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "'soon' is not a duration" in out.stderr


def test_awa_tui_at_80x24_shows_the_running_heartbeat_column(tmux, database_url, db):
    """The SSH default terminal: the Running screen keeps Heartbeat age, Deadline in, Running."""
    now = datetime.now(UTC)
    add_runtime(db, host="bastion-worker", pid=4242, leader=True, last_seen=now,
                queues=["default"])
    job = add_running(db, kind="nightly_report", heartbeat_age=0, running_for=0, deadline_in=0)
    db.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '3 seconds', "
               "attempted_at = now() - interval '40 seconds', "
               "deadline_at = now() + interval '10 minutes' WHERE id = %s", [job])
    term = Terminal(tmux, [str(AWA_TUI), "--database-url", database_url, "--refresh", "1"],
                    width=80, height=24)
    try:
        term.wait_for("★ LEADER")
        term.keys("2")
        screen = term.wait_for("nightly_report")
        lines = screen.splitlines()
        header = next(line for line in lines if "Heartbeat age" in line)
        assert "Deadline in" in header and "Running" in header and "Status" in header
        row = next(line for line in lines if "nightly_report" in line)
        # the cell under the "Heartbeat age" header is an age in seconds, ticking
        start = header.index("Heartbeat age")
        heartbeat = row[start:start + len("Heartbeat age")].strip()
        assert heartbeat.endswith("s") and heartbeat[:-1].isdigit(), (heartbeat, screen)
        start = header.index("Deadline in")
        assert row[start:start + len("Deadline in")].strip().startswith(("9m", "10m")), screen
        footer = lines[-1]
        assert "? Help" in footer and "q Quit" in footer, footer
        assert all(len(line) <= 80 for line in lines)
        term.keys("q")
        deadline = time.monotonic() + 10
        while term.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not term.alive(), "awa-tui did not exit on q"
    finally:
        term.close()
