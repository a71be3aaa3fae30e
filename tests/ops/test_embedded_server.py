"""The embedded PostgreSQL (pgserver) is the newcomer's first database: every
check must run there too, although that build lacks optional features such
as libxml."""

from __future__ import annotations

import psycopg
import pytest

from awa import schema
from awa_ops.diagnose import run_all
from awa_ops.session import OpsSession


@pytest.fixture
def embedded_url(tmp_path):
    pgserver = pytest.importorskip("pgserver")
    server = pgserver.get_server(str(tmp_path / "pgdata"), cleanup_mode="stop")
    try:
        server.psql("CREATE DATABASE awa_embedded")
        yield server.get_uri("awa_embedded")
    finally:
        server.cleanup()


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
