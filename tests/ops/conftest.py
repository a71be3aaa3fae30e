"""Fixtures for awa-ops tests."""

from __future__ import annotations

import os

import pytest

from ops.ops_helpers import OpsRun, run_ops


@pytest.fixture
def ops(database_url, tmp_path):
    """`awa-ops diagnose <check> --json` against this test's database."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def diagnose(check: str, *extra: str) -> OpsRun:
        return run_ops("diagnose", check, "--database-url", database_url, "--json", *extra, env=env)
    return diagnose


PG_BIN = "/usr/lib/postgresql/15/bin"


@pytest.fixture(scope="session")
def prepared_xacts_server():
    """A second, throwaway PostgreSQL cluster with max_prepared_transactions > 0.

    The shared server must not be reconfigured (no ALTER SYSTEM), so prepared
    transactions get their own cluster, initialised and run as the postgres OS user.
    """
    import shutil
    import socket
    import subprocess
    import tempfile
    from pathlib import Path

    # Not under pytest's tmp dir: the postgres user must be able to reach it.
    base = Path(tempfile.mkdtemp(prefix="awa-ops-pg2-"))
    data = base / "data"
    shutil.chown(base, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_pg, f"{PG_BIN}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, capture_output=True)
    subprocess.run([*as_pg, f"{PG_BIN}/pg_ctl", "-D", str(data), "-w", "-l", str(base / "log"),
                    "-o", f"-p {port} -c listen_addresses=127.0.0.1 -k {base} "
                          f"-c max_prepared_transactions=5 -c fsync=off", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_pg, f"{PG_BIN}/pg_ctl", "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
