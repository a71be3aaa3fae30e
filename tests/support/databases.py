"""Per-test databases on the test server: created from a template, dropped afterwards.

The server comes from AWA_TEST_DATABASE_URL / DATABASE_URL, else a local
PostgreSQL on 127.0.0.1:5432, else the embedded server (docs/architecture.md §12).  Shared by
tests/conftest.py and the conformance suite's engine-specific templates.
"""

from __future__ import annotations

import itertools
import os
import uuid

import psycopg
from psycopg.conninfo import make_conninfo

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
