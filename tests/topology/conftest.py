"""A real PgBouncer (transaction mode) in front of the test server, per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict

from support.pgbouncer import PgBouncer


@pytest.fixture
def bouncer(admin_url: str) -> Iterator[PgBouncer]:
    target = conninfo_to_dict(admin_url)
    with PgBouncer(target_host=str(target.get("host") or "127.0.0.1"),
                   target_port=int(target.get("port") or 5432)) as running:
        yield running


@pytest.fixture
def pooled_url(bouncer: PgBouncer, database_url: str) -> str:
    """This test's database, through the pooler."""
    return bouncer.url(str(conninfo_to_dict(database_url)["dbname"]))
