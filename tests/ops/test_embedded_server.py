"""The embedded PostgreSQL (pgserver) is the newcomer's first database: every
check must run there too, although that build lacks optional features such
as libxml."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from awa import schema
from awa_ops.diagnose import run_all
from awa_ops.session import OpsSession


@pytest.fixture
def embedded_url():
    pgserver = pytest.importorskip("pgserver")
    # Not under pytest's tmp dir: as root, pgserver runs the server as its own OS user, which
    # must reach the data directory, and every pytest session that starts on this machine
    # makes /tmp/pytest-of-<user> private again (0700), even while our initdb runs.
    base = Path(tempfile.mkdtemp(prefix="awa-embedded-"))
    base.chmod(0o755)
    server = pgserver.get_server(str(base / "pgdata"), cleanup_mode="stop")
    try:
        server.psql("CREATE DATABASE awa_embedded")
        yield server.get_uri("awa_embedded")
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


async def test_every_check_runs_on_the_embedded_server(embedded_url):
    with psycopg.connect(embedded_url, autocommit=True) as conn:
        schema.migrate_sync(conn)
    session = await OpsSession.open(embedded_url)
    try:
        results = await run_all(session)
    finally:
        await session.close()
    could_not_run = {r.check: r.error for r in results if r.error is not None}
    assert could_not_run == {}
    assert {r.check for r in results} >= {"schema", "runtime", "stuck-running", "mvcc-horizon"}
