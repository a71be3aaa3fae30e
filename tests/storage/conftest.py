"""The engine conformance suite: every test here runs against every engine.

A test takes ``engine`` (the engine under test) and ``engine_url`` (a fresh
database laid out for it); behaviour differences between engines are bugs.
Queue storage runs twice: in schema ``awa`` and, as ``queue_storage@awa_qs``,
with its tables in a schema of their own (``awa migrate --queue-storage-schema``).
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.storage.canonical import CanonicalEngine
from awa.storage.engine import Engine
from awa.storage.queue_storage import QueueStorageEngine

OWN_SCHEMA = "awa_qs"
ENGINES: dict[str, Callable[[], Engine]] = {
    "canonical": CanonicalEngine, "queue_storage": QueueStorageEngine,
    f"queue_storage@{OWN_SCHEMA}": lambda: QueueStorageEngine(OWN_SCHEMA)}


@pytest.fixture(autouse=True)
def _queue_storage_arrangers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """The queue-storage arrangers of the modules that arrange jobs per engine."""
    module = request.module
    for name in ENGINES:
        _, _, schema = name.partition("@")
        if not name.startswith("queue_storage"):
            continue
        if hasattr(module, "ARRANGERS") and name not in module.ARRANGERS:
            from storage.queue_storage_arrange import maintenance_arranger
            monkeypatch.setitem(module.ARRANGERS, name, maintenance_arranger(
                module.ARRANGERS["canonical"], schema or "awa"))
        if hasattr(module, "ARRANGE") and name not in module.ARRANGE:
            from storage.queue_storage_arrange import reads_arranger
            monkeypatch.setitem(module.ARRANGE, name,
                                reads_arranger(module.ARRANGE["canonical"], schema or "awa"))


@pytest.fixture(params=sorted(ENGINES))
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engine(engine_name: str):
    return ENGINES[engine_name]()


@pytest.fixture
def test_engine(engine_name: str) -> str:
    """This suite's databases are laid out for the engine under test."""
    return engine_name


@pytest.fixture
def engine_url(database_url: str) -> str:
    """A fresh database laid out for the engine under test."""
    return database_url


@pytest.fixture
async def aconn(engine_url: str):
    """An autocommit async connection with dict rows to the engine's database."""
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True,
                                                     row_factory=dict_row) as conn:
        yield conn
