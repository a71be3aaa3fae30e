"""Test databases: every test gets its own, created from a migrated template.

The server comes from AWA_TEST_DATABASE_URL / DATABASE_URL, else a local
PostgreSQL on 127.0.0.1:5432, else the embedded server (DESIGN §9).
"""

from __future__ import annotations

import itertools
import os
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from awa import schema

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
_counter = itertools.count()
_RUN = uuid.uuid4().hex[:8]


def _admin_url() -> str:
    for var in ("AWA_TEST_DATABASE_URL", "DATABASE_URL"):
        if os.environ.get(var):
            return make_conninfo(os.environ[var], dbname="postgres")
    try:
        psycopg.connect(LOCAL_SERVER, connect_timeout=3).close()
        return LOCAL_SERVER
    except psycopg.Error:
        from awa.db import embedded_database_url
        return make_conninfo(embedded_database_url(), dbname="postgres")


def _exec(url: str, sql: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def create_database(admin_url: str, template: str | None = None) -> str:
    name = f"awa_test_{_RUN}_{next(_counter)}"
    tpl = f" TEMPLATE {template}" if template else ""
    _exec(admin_url, f"CREATE DATABASE {name}{tpl}")
    return name


def drop_database(admin_url: str, name: str) -> None:
    _exec(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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
