"""The human side of `awa-ops diagnose`: readable panels, the summary table, --watch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ops.ops_helpers import run_ops


def test_human_output_explains_and_exits_with_the_worst_status(database_url, db):
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,
                  last_seen_at, leader, maintenance_alive)
                  VALUES (gen_random_uuid(), 'h1', 7, now() - interval '1 hour',
                          now() - interval '10 minutes', true, true)""")
    result = run_ops("diagnose", "all", "--database-url", database_url)
    assert result.code == 2 and "Traceback" not in result.stderr
    out = result.stdout
    assert "awa-ops diagnose all" in out and "stuck-running" in out and "mvcc-horizon" in out
    assert "no live runtime: the most recent, h1:7" in out  # the critical check's panel
    assert "why:" in out and "runbooks/runtime.md" in out

    one = run_ops("diagnose", "schema", "--database-url", database_url)
    assert one.code == 0 and "schema version" in one.stdout


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_watch_reruns_until_interrupted(database_url, tmp_path, sigint):
    """``--watch`` stops on SIGINT, promptly, also when the process started with SIGINT
    ignored, as every child of a background job of a shell without job control does (CI
    runs the suite that way: the watch loop then never stopped, issue 33)."""
    def start_with_sigint_ignored() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-m", "awa_ops.cli", "diagnose", "dlq", "--json",
                             "--watch", "0.5", "--database-url", database_url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
                            preexec_fn=start_with_sigint_ignored if sigint == "ignored" else None)
    # Interrupted once it has run twice (a loaded machine may take seconds to start it).
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while "".join(read).count('"check": "dlq"') < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    try:
        err = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    out = "".join(read)
    assert proc.returncode == 0, err
    assert out.count('"check": "dlq"') >= 2  # ran more than once
    assert "Traceback" not in err


def test_unknown_flag_values_are_one_line_errors(database_url):
    bad = run_ops("diagnose", "all", "--database-url", database_url, "--watch", "-1")
    assert bad.code == 2 and "Traceback" not in bad.stderr and "--watch" in bad.stderr
    garbage = run_ops("diagnose", "schema", "--database-url", "not a url at all")
    assert garbage.code == 3 and len(garbage.stderr.strip().splitlines()) == 1


def test_every_check_links_an_existing_runbook():
    from pathlib import Path

    from awa_ops.diagnose import CHECKS, check_module

    root = Path(__file__).resolve().parents[2]
    for name in CHECKS:
        module = check_module(name)
        assert name == module.NAME
        assert (root / module.RUNBOOK).is_file(), module.RUNBOOK


def test_usage_mistakes_are_one_error_line():
    for argv in (("diagnose", "nosuchcheck"), ("diagnose", "all", "--bogus"), ("nosuchcommand",)):
        result = run_ops(*argv, "--database-url", "postgresql://x@127.0.0.1:1/x")
        lines = result.stderr.strip().splitlines()
        assert result.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), argv
        assert "Usage:" not in result.stderr and "Traceback" not in result.stderr
