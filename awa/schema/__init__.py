"""Numbered, idempotent SQL migrations and the version check.

Each ``NNNN_description.sql`` file beside this module is one migration (``catalogue``).  They
run one transaction each, under the migration advisory lock, with every lock taken up
front (``ddl``), so several processes migrating at once serialise: each migration is applied
by exactly one of them (whichever reaches it first; the others re-check and skip it), and a
live fleet's statements wait a bounded time and never deadlock.
``layout`` tells whose layout a database has, so a foreign one is refused before anything is
written.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import psycopg

from awa import config
from awa.job import SchemaNotMigrated
from awa.schema.catalogue import (
    CREATE_VERSION_TABLE,
    Migration,
    current_migration_version,
    migration_sql,
    migrations,
    migrations_range,
)
from awa.schema.ddl import MigrationBusy, locked_step
from awa.schema.layout import (
    CONTROL_SCHEMA,
    StorageLayout,
    describe_layout,
    describe_layout_steps,
    describe_layout_sync,
)
from awa.statements import Query, Steps, run_async, run_sync, transaction

__all__ = ["CREATE_VERSION_TABLE", "Migration", "MigrationBusy", "current_migration_version",
           "migration_sql", "migrations", "migrations_range", "migrate", "migrate_sync",
           "not_migrated_error", "ensure_migrated", "ensure_migrated_sync", "migrate_steps"]

LOCK = "SELECT pg_advisory_xact_lock(%s)"
APPLIED_VERSIONS = "SELECT version FROM awa.schema_version"
RECORD_VERSION = """
INSERT INTO awa.schema_version (version, description) VALUES (%s, %s)
ON CONFLICT (version) DO NOTHING"""


def migrate_steps() -> Steps[list[int]]:
    """The migrations this database lacks, each in a transaction of its own that takes its
    locks up front (``ddl.locked_step``: never a deadlock with a live fleet); the versions
    applied (``migrate`` and ``migrate_sync``, and a step of ``awa.storage.migrate``)."""
    missing = yield from transaction(_missing())
    applied = []
    for m in missing:
        if (yield from locked_step(partial(_apply, m), [CONTROL_SCHEMA],
                                   f"migration {m.version}")):
            applied.append(m.version)
    return applied


def _missing() -> Steps[list[Migration]]:
    yield Query(LOCK, (config.ADVISORY_LOCK_MIGRATE,))
    _refuse_foreign((yield from describe_layout_steps()))
    yield Query(CREATE_VERSION_TABLE)
    done = {r["version"] for r in (yield Query(APPLIED_VERSIONS))}
    return [m for m in migrations() if m.version not in done]


def _apply(m: Migration) -> Steps[bool]:
    """Migration ``m`` unless another migrator applied it meanwhile; whether this did."""
    if m.version in {r["version"] for r in (yield Query(APPLIED_VERSIONS))}:
        return False
    yield Query(m.sql)
    yield Query(RECORD_VERSION, (m.version, m.description))
    return True


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """Apply every missing migration; returns the versions this call applied.

    A database laid out by another awa distribution raises ``ForeignSchema``
    before anything is written (the advisory lock is taken first, so the check
    and the migration see the same schema).
    """
    return await run_async(conn, migrate_steps())


def migrate_sync(conn: psycopg.Connection[Any]) -> list[int]:
    """``migrate`` on a blocking connection."""
    return run_sync(conn, migrate_steps())


def not_migrated_error(found: int | None,
                       layout: StorageLayout | None = None) -> SchemaNotMigrated:
    """The error naming the fix; ``layout``: when only its engine's own layout is behind,
    that is what it says."""
    if (layout is not None and layout.engine_behind
            and (found or 0) >= current_migration_version()):
        return SchemaNotMigrated(
            f"database has {layout.engine} layout version {layout.engine_layout}, this code "
            f"needs version {layout.engine_layout_needed}: run `awa migrate` (or "
            f"client.migrate()) first")
    have = "no awa schema" if found is None else f"schema version {found}"
    return SchemaNotMigrated(
        f"database has {have}, this code needs version {current_migration_version()}: "
        f"run `awa migrate` (or client.migrate()) first")


async def ensure_migrated(conn: psycopg.AsyncConnection[Any], *,
                          accept_foreign: bool = False) -> int:
    """The schema version; ``SchemaNotMigrated`` with the fix when the database is behind.

    A foreign layout (or an engine this code lacks) raises ``ForeignSchema``.
    ``accept_foreign=True`` is for read-only ops tools that read such a layout
    through the troubleshooting guide's own queries: they get its version.
    """
    return _checked(await describe_layout(conn), accept_foreign)


def ensure_migrated_sync(conn: psycopg.Connection[Any], *, accept_foreign: bool = False) -> int:
    """``ensure_migrated`` on a synchronous connection."""
    return _checked(describe_layout_sync(conn), accept_foreign)


def _refuse_foreign(layout: StorageLayout) -> None:
    if layout.foreign:
        refused = layout.refusal()
        assert refused is not None  # a foreign layout is always refused
        raise refused


def _checked(layout: StorageLayout, accept_foreign: bool) -> int:
    if layout.foreign and accept_foreign and layout.schema_version is not None:
        return layout.schema_version
    refused = layout.refusal()
    if refused is not None:
        raise refused
    if layout.schema_version is None or layout.behind:
        raise not_migrated_error(layout.schema_version, layout)
    return layout.schema_version
