"""Test databases: every test gets its own, created from a migrated template.

The server comes from AWA_TEST_DATABASE_URL / DATABASE_URL, else a local
PostgreSQL on 127.0.0.1:5432, else the embedded server (DESIGN §9).
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from awa import schema
from support.databases import _admin_url, create_database, drop_database


@pytest.fixture(scope="session")
def admin_url() -> str:
    return _admin_url()


@pytest.fixture(scope="session")
def template_db(admin_url: str):
    name = create_database(admin_url)
    with psycopg.connect(make_conninfo(admin_url, dbname=name), autocommit=True) as conn:
        schema.migrate_sync(conn)
    yield name
    drop_database(admin_url, name)


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
