"""Test databases: every test gets its own, created from a migrated template.

The server comes from AWA_TEST_DATABASE_URL / DATABASE_URL, else a local
PostgreSQL on 127.0.0.1:5432, else the embedded server (docs/architecture.md §12).

A test database is laid out the way `awa migrate` lays out a new one
(``config.DEFAULT_STORAGE_ENGINE``); ``AWA_TEST_ENGINE`` overrides it for a
whole run.  A test that arranges one engine's tables directly says so with
``@pytest.mark.engine("canonical")`` (the conformance suite in tests/storage
is where behaviour is checked on every engine).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from awa import config, storage
from support.databases import _admin_url, create_database, drop_database
from support.server_connections import DEFAULT_RESERVATION, ConnectionBudget, server_budget

TEST_ENGINE = os.environ.get("AWA_TEST_ENGINE") or config.DEFAULT_STORAGE_ENGINE


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engine(name): the test arranges this storage engine's tables directly, "
                   "so its database is laid out for that engine whatever the default")
    config.addinivalue_line(
        "markers", "connections(n): the most connections the test holds on the shared test "
                   "server at once, when more than the default reservation "
                   "(tests/support/server_connections.py)")


@pytest.fixture(scope="session")
def admin_url() -> str:
    return _admin_url()


@pytest.fixture(scope="session")
def connection_budget(admin_url: str, tmp_path_factory: pytest.TempPathFactory
                      ) -> ConnectionBudget:
    """The shared server's connections, one budget for every xdist worker of the run (their
    base temporary directories share a parent)."""
    base = tmp_path_factory.getbasetemp()
    run_dir = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return server_budget(admin_url, run_dir / "server-connections")


@pytest.fixture(autouse=True)
def _reserved_connections(request: pytest.FixtureRequest,
                          connection_budget: ConnectionBudget) -> Iterator[None]:
    """Wait for room on the server for this test's connections before its fixtures run."""
    marker = request.node.get_closest_marker("connections")
    with connection_budget.reserve(int(marker.args[0]) if marker else DEFAULT_RESERVATION):
        yield


class _Templates:
    """One migrated template database per engine, made on first use."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.names: dict[str, str] = {}

    def get(self, engine: str) -> str:
        """``engine``: an engine name, or ``queue_storage@<schema>`` for queue storage laid
        out in a schema of its own (``awa migrate --queue-storage-schema``)."""
        if engine not in self.names:
            name = create_database(self.admin_url)
            engine_name, _, schema = engine.partition("@")
            with psycopg.connect(make_conninfo(self.admin_url, dbname=name),
                                 autocommit=True) as conn:
                storage.migrate_sync(conn, engine_name, schema or None)
            self.names[engine] = name
        return self.names[engine]


@pytest.fixture(scope="session")
def templates(admin_url: str) -> Iterator[_Templates]:
    made = _Templates(admin_url)
    yield made
    for name in made.names.values():
        drop_database(admin_url, name)


@pytest.fixture
def test_engine(request: pytest.FixtureRequest) -> str:
    """The storage engine of this test's database."""
    marker = request.node.get_closest_marker("engine")
    return str(marker.args[0]) if marker else TEST_ENGINE


@pytest.fixture
def template_db(templates: _Templates, test_engine: str) -> str:
    return templates.get(test_engine)


@pytest.fixture
def database_url(admin_url: str, template_db: str):
    """A fresh, migrated database owned by this test."""
    name = create_database(admin_url, template=template_db)
    yield make_conninfo(admin_url, dbname=name)
    drop_database(admin_url, name)


@pytest.fixture
def empty_database_url(admin_url: str):
    """A fresh database with no awa schema at all."""
    name = create_database(admin_url)
    yield make_conninfo(admin_url, dbname=name)
    drop_database(admin_url, name)


@pytest.fixture
def db(database_url: str):
    """A synchronous autocommit connection (dict rows) to this test's database."""
    from psycopg.rows import dict_row
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
async def client(database_url: str):
    import awa
    c = awa.AsyncClient(database_url)
    yield c
    await c.close()


@pytest.fixture(scope="module")
def replica_pair():
    """A private primary + hot standby (``pg_basebackup -R``) with a migrated database
    ``awa`` on both (``support.standby.ReplicaPair``): ``.primary_url``, ``.standby_url``,
    ``.wait_replayed()``.  One pair per test module (it takes a few seconds to build)."""
    from support.standby import ReplicaPair
    with ReplicaPair(engine=TEST_ENGINE) as pair:
        yield pair
