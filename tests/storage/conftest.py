"""The engine conformance suite: every test here runs against every engine.

A test takes ``engine`` (the engine under test) and ``engine_url`` (a fresh
database laid out for it); behaviour differences between engines are bugs.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.storage.canonical import CanonicalEngine

ENGINES = {"canonical": CanonicalEngine}


@pytest.fixture(params=sorted(ENGINES))
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engine(engine_name: str):
    return ENGINES[engine_name]()


@pytest.fixture
def engine_url(engine_name: str, database_url: str) -> str:
    """A fresh database migrated for the engine under test."""
    return database_url


@pytest.fixture
async def aconn(engine_url: str):
    """An autocommit async connection with dict rows to the engine's database."""
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True,
                                                     row_factory=dict_row) as conn:
        yield conn
