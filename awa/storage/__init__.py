"""Storage engines: every job-table statement lives below this package.

``open_engine`` decides from the database which engine serves it; the
client, the CLI, ``awa-ops``, ``awa-tui`` and ``awa serve`` all go through it.

The decision reads only what is in schema ``awa`` (``describe_layout``):
``awa.schema_version`` says whether *this* distribution laid the schema out
(every version this code knows must carry this code's description; the
Rust-core awa 0.6 writes versions 1..40+ with its own descriptions), and
``awa.active_queue_storage_schema()`` / ``awa.runtime_storage_backends`` name
the engine.  ``ENGINES`` maps an engine name to its loader, so a second
engine plugs in with one entry.  A foreign layout, or an engine missing from
``ENGINES``, is refused with one line (``ForeignSchema``) and never changed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from awa import config
from awa import schema as migrations
from awa.job import ForeignSchema, ValidationError
from awa.storage.engine import Engine

CANONICAL = "canonical"
QUEUE_STORAGE = "queue_storage"
NO_ENGINE = "none"
CONTROL_SCHEMA = "awa"

OURS = "awa-py"
RUST_CORE = "the Rust-core awa"
OTHER = "another awa distribution"
# The Rust core's first migration; seen with its awa.storage_status(), it names the distribution.
RUST_CORE_FIRST_MIGRATION = "Canonical schema with UI indexes"

# One round trip: which awa objects exist, so later queries never name a missing relation.
PROBE = """
SELECT
    to_regclass('awa.schema_version') IS NOT NULL AS has_schema_version,
    to_regclass('awa.runtime_storage_backends') IS NOT NULL AS has_backends,
    to_regprocedure('awa.active_queue_storage_schema()') IS NOT NULL AS has_active_fn,
    to_regprocedure('awa.storage_status()') IS NOT NULL AS has_storage_status,
    to_regprocedure('awa.qs_layout_version()') IS NOT NULL AS has_qs_layout_version"""
VERSIONS = "SELECT version, description FROM awa.schema_version ORDER BY version"
ACTIVE_SCHEMA = "SELECT awa.active_queue_storage_schema() AS schema_name"
QS_LAYOUT_VERSION = "SELECT awa.qs_layout_version() AS layout_version"
BACKENDS = """
SELECT backend, schema_name, updated_at FROM awa.runtime_storage_backends
ORDER BY updated_at DESC, backend"""


def _canonical(schema: str) -> Engine:
    from awa.storage.canonical import ENGINE  # imported on use: canonical imports awa modules

    return ENGINE


def _queue_storage(schema: str) -> Engine:
    from awa.storage import queue_storage  # imported on use, like canonical

    return queue_storage.load(schema)


# Engine name -> loader, given the schema the layout names for the engine's tables.
ENGINES: dict[str, Callable[[str], Engine]] = {CANONICAL: _canonical,
                                               QUEUE_STORAGE: _queue_storage}


@dataclass(frozen=True)
class StorageLayout:
    """What schema ``awa`` of one database holds, as far as choosing an engine goes."""

    engine: str  # canonical | queue_storage | ... | none (never migrated)
    schema: str  # where the engine keeps its job tables
    schema_version: int | None  # max(awa.schema_version.version), None when absent or empty
    foreign: bool  # laid out by another awa distribution
    distribution: str  # OURS, RUST_CORE or OTHER ("" when nothing is installed)
    code_version: int  # the newest migration this code has
    # Ours on queue storage: the layout version it has (0 before versions were recorded)
    # and the one this code needs; None for other engines.
    engine_layout: int | None = None
    engine_layout_needed: int | None = None

    @property
    def installed(self) -> bool:
        return self.engine != NO_ENGINE

    @property
    def engine_behind(self) -> bool:
        """Ours, and the engine's own layout is older than this code's."""
        return (not self.foreign and self.engine_layout_needed is not None
                and (self.engine_layout or 0) < self.engine_layout_needed)

    @property
    def behind(self) -> bool:
        """Ours, and older than this code (``awa migrate`` fixes it)."""
        return (not self.foreign and (self.schema_version or 0) < self.code_version
                or self.engine_behind)

    @property
    def supported(self) -> bool:
        """Ours, and served by an engine this code has."""
        return not self.foreign and self.engine in ENGINES

    def describe(self) -> str:
        """E.g. ``schema version 40, engine queue_storage in schema awa_qs``."""
        if not self.installed:
            return "no awa schema"
        where = "" if self.schema == CONTROL_SCHEMA else f" in schema {self.schema}"
        return f"schema version {self.schema_version}, engine {self.engine}{where}"

    def describe_engine(self) -> str:
        """E.g. ``queue_storage`` or ``queue_storage (schema awa_qs)``."""
        where = "" if self.schema == CONTROL_SCHEMA else f" (schema {self.schema})"
        return self.engine + where

    def refusal(self) -> ForeignSchema | None:
        """The one-line error for a layout this code must not touch, else None."""
        if self.foreign:
            return ForeignSchema(
                f"database laid out by {self.distribution} ({self.describe()}), not by awa-py: "
                f"left unchanged; give awa-py a database of its own (--database-url / "
                f"DATABASE_URL) and run `awa migrate` there, or keep using {self.distribution} "
                f"on this one")
        if self.installed and self.engine not in ENGINES:
            return ForeignSchema(
                f"database served by the storage engine {self.engine!r} ({self.describe()}), "
                f"which this awa-py lacks (it has {', '.join(sorted(ENGINES))}): left "
                f"unchanged; upgrade awa-py (pip install -U awa-py)")
        return None


def classify(probe: Mapping[str, Any], versions: list[tuple[int, str]],
             active_schema: str | None, backends: list[tuple[str, str]],
             qs_layout: int | None = None) -> StorageLayout:
    """The layout from the probe's facts (no I/O; the async and sync readers share it).

    ``backends`` is ``(backend, schema_name)``, newest first; ``qs_layout`` what
    ``awa.qs_layout_version()`` returned (None: the function is not there).
    """
    code_version = migrations.current_migration_version()
    if not versions:
        return StorageLayout(NO_ENGINE, CONTROL_SCHEMA, None, False, "", code_version)
    ours = {m.version: m.description for m in migrations.migrations()}
    found = dict(versions)
    first, newest_known = min(ours), max(ours)
    # Ours: our first migration is there, and every version up to our newest is one of ours
    # with our description.  Versions past our newest are a newer awa-py (accepted, as before).
    foreign = (found.get(first) != ours[first]
               or any(ours.get(v) != d for v, d in found.items() if v <= newest_known))
    if not foreign:
        distribution = OURS
    elif probe.get("has_storage_status") or found.get(1) == RUST_CORE_FIRST_MIGRATION:
        distribution = RUST_CORE
    else:
        distribution = OTHER
    engine, schema = CANONICAL, CONTROL_SCHEMA
    if active_schema:
        engine, schema = QUEUE_STORAGE, active_schema
    else:
        named = [b for b in backends if b[0] != CANONICAL]
        if named:
            engine, schema = named[0]
    if engine == QUEUE_STORAGE and not foreign:
        from awa.storage.queue_storage.schema import LAYOUT_VERSION  # engines load on use

        return StorageLayout(engine, schema, max(found), foreign, distribution, code_version,
                             qs_layout or 0, LAYOUT_VERSION)
    return StorageLayout(engine, schema, max(found), foreign, distribution, code_version)


async def describe_layout(conn: psycopg.AsyncConnection[Any]) -> StorageLayout:
    """Read the layout (2 to 5 plain SELECTs; nothing is written)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(PROBE)
        probe = await cur.fetchone()
        assert probe is not None  # a SELECT without FROM returns one row
        versions: list[tuple[int, str]] = []
        active: str | None = None
        backends: list[tuple[str, str]] = []
        if probe["has_schema_version"]:
            await cur.execute(VERSIONS)
            versions = [(r["version"], r["description"]) for r in await cur.fetchall()]
        if versions and probe["has_active_fn"]:
            await cur.execute(ACTIVE_SCHEMA)
            row = await cur.fetchone()
            active = row["schema_name"] if row else None
        if versions and probe["has_backends"]:
            await cur.execute(BACKENDS)
            backends = [(r["backend"], r["schema_name"]) for r in await cur.fetchall()]
        qs_layout: int | None = None
        if active and probe["has_qs_layout_version"]:
            await cur.execute(QS_LAYOUT_VERSION)
            row = await cur.fetchone()
            qs_layout = row["layout_version"] if row else None
    return classify(probe, versions, active, backends, qs_layout)


def describe_layout_sync(conn: psycopg.Connection[Any]) -> StorageLayout:
    """``describe_layout`` on a synchronous connection."""
    with conn.cursor(row_factory=dict_row) as cur:
        probe = cur.execute(PROBE).fetchone()
        assert probe is not None  # a SELECT without FROM returns one row
        versions: list[tuple[int, str]] = []
        active: str | None = None
        backends: list[tuple[str, str]] = []
        if probe["has_schema_version"]:
            versions = [(r["version"], r["description"])
                        for r in cur.execute(VERSIONS).fetchall()]
        if versions and probe["has_active_fn"]:
            row = cur.execute(ACTIVE_SCHEMA).fetchone()
            active = row["schema_name"] if row else None
        if versions and probe["has_backends"]:
            backends = [(r["backend"], r["schema_name"])
                        for r in cur.execute(BACKENDS).fetchall()]
        qs_layout: int | None = None
        if active and probe["has_qs_layout_version"]:
            row = cur.execute(QS_LAYOUT_VERSION).fetchone()
            qs_layout = row["layout_version"] if row else None
    return classify(probe, versions, active, backends, qs_layout)


def engine_for(layout: StorageLayout) -> Engine:
    """The engine serving ``layout``; ``ForeignSchema`` when this code must not touch it.

    A never-migrated database gets the canonical engine: the schema check
    (``awa.schema.ensure_migrated``) is what names `awa migrate` as the fix.
    """
    refused = layout.refusal()
    if refused is not None:
        raise refused
    return ENGINES[layout.engine if layout.installed else CANONICAL](layout.schema)


class ConnectionSource(Protocol):
    """A pool, or anything lending connections the same way (e.g. awa_ops' session pool)."""

    def connection(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...


# Decided once per pool: a pool's database does not change its engine under it.
_SOURCE_ENGINES: weakref.WeakKeyDictionary[ConnectionSource, Engine] = (
    weakref.WeakKeyDictionary())


async def open_engine(conn_or_pool: psycopg.AsyncConnection[Any] | ConnectionSource) -> Engine:
    """The engine that serves this database; ``ForeignSchema`` for a layout it must not touch.

    Given a pool, the answer is kept for the pool's lifetime (no query on later calls).
    """
    if isinstance(conn_or_pool, psycopg.AsyncConnection):
        return engine_for(await describe_layout(conn_or_pool))
    engine = _SOURCE_ENGINES.get(conn_or_pool)
    if engine is None:
        async with conn_or_pool.connection() as conn:
            engine = engine_for(await describe_layout(conn))
        _SOURCE_ENGINES[conn_or_pool] = engine
    return engine


def open_engine_sync(conn: psycopg.Connection[Any]) -> Engine:
    """``open_engine`` for a blocking connection (the bridge on a user's sync connection)."""
    return engine_for(describe_layout_sync(conn))


def forget_engine(source: ConnectionSource) -> None:
    """Drop the engine ``open_engine`` keeps for this pool (after its database changed
    engine, e.g. ``install_queue_storage``)."""
    _SOURCE_ENGINES.pop(source, None)


async def migrate(conn: psycopg.AsyncConnection[Any], engine: str | None = None,
                  queue_storage_schema: str | None = None) -> list[int]:
    """``awa migrate``: our numbered migrations, then the engine's own layout.

    ``engine`` None keeps the database's engine (``config.DEFAULT_STORAGE_ENGINE``
    when new).  Queue storage is laid out again after every migration
    (idempotent), since a migration may replace the ``awa.jobs`` view it extends;
    ``queue_storage_schema`` is where a new layout goes (an existing one stays put).
    """
    from awa import schema  # awa.schema builds on this package's layout detection

    before = await describe_layout(conn)
    wanted = _wanted_engine(before, engine, queue_storage_schema)
    applied = await schema.migrate(conn)
    if wanted == QUEUE_STORAGE:
        from awa.storage.queue_storage.schema import install_queue_storage

        await install_queue_storage(conn, queue_storage_schema)
    return applied


def migrate_sync(conn: psycopg.Connection[Any], engine: str | None = None,
                 queue_storage_schema: str | None = None) -> list[int]:
    """``migrate`` on a blocking connection (test templates, benchmarks, ``awa.migrate``)."""
    from awa import schema  # awa.schema builds on this package's layout detection

    before = describe_layout_sync(conn)
    wanted = _wanted_engine(before, engine, queue_storage_schema)
    applied = schema.migrate_sync(conn)
    if wanted == QUEUE_STORAGE:
        from awa.storage.queue_storage.schema import install_queue_storage_sync

        install_queue_storage_sync(conn, queue_storage_schema)
    return applied


def _wanted_engine(before: StorageLayout, engine: str | None,
                   queue_storage_schema: str | None = None) -> str:
    if engine is not None and engine not in ENGINES:
        raise ValidationError(f"unknown storage engine {engine!r}: choose one of "
                              f"{', '.join(sorted(ENGINES))}")
    if engine == CANONICAL and before.installed and before.engine not in (CANONICAL, NO_ENGINE):
        raise ValidationError(f"this database is served by the {before.engine} engine; moving "
                              f"it back to canonical is not supported: migrate a new database "
                              f"with --engine canonical instead")
    wanted = engine or (before.engine if before.installed else config.DEFAULT_STORAGE_ENGINE)
    if queue_storage_schema is not None:
        from awa.storage.queue_storage.schema import check_schema

        check_schema(queue_storage_schema)
        if wanted != QUEUE_STORAGE:
            raise ValidationError(f"a queue-storage schema was given, but this database is "
                                  f"migrated for the {wanted} engine: leave the schema out, or "
                                  f"migrate with --engine queue_storage")
    return wanted
