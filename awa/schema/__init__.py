"""Numbered, idempotent SQL migrations and the version check.

Each ``NNNN_description.sql`` file beside this module is one migration.  They
run under a transaction-scoped advisory lock, so several processes migrating
at once serialise and all but the first find nothing left to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import psycopg

from awa import config
from awa.job import SchemaNotMigrated

if TYPE_CHECKING:
    from awa.storage import StorageLayout

_FILE_NAME = re.compile(r"^(\d{4})_(\w+)\.sql$")

CREATE_VERSION_TABLE = """
CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.schema_version (
    version     integer PRIMARY KEY,
    description text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)"""
LOCK = "SELECT pg_advisory_xact_lock(%s)"
APPLIED_VERSIONS = "SELECT version FROM awa.schema_version"
RECORD_VERSION = """
INSERT INTO awa.schema_version (version, description) VALUES (%s, %s)
ON CONFLICT (version) DO NOTHING"""
VERSION_TABLE_EXISTS = "SELECT to_regclass('awa.schema_version') IS NOT NULL"
CURRENT_VERSION_QUERY = "SELECT max(version) FROM awa.schema_version"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    found = []
    for entry in resources.files(__package__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2).replace("_", " "),
                                   entry.read_text()))
    return tuple(sorted(found, key=lambda m: m.version))


def current_migration_version() -> int:
    return migrations()[-1].version


def migrations_range(from_version: int, to_version: int) -> list[Migration]:
    return [m for m in migrations() if from_version < m.version <= to_version]


def migration_sql() -> str:
    """Every migration as one script, for ``awa migrate --sql``."""
    parts = [CREATE_VERSION_TABLE + ";"]
    for m in migrations():
        parts.append(f"-- migration {m.version}: {m.description}\n{m.sql}")
        parts.append(f"INSERT INTO awa.schema_version (version, description) "
                     f"VALUES ({m.version}, '{m.description}') ON CONFLICT (version) DO NOTHING;")
    return "\n".join(parts)


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """Apply every missing migration; returns the versions this call applied.

    A database laid out by another awa distribution raises ``ForeignSchema``
    before anything is written (the advisory lock is taken first, so the check
    and the migration see the same schema).
    """
    from awa.storage import describe_layout  # awa.storage builds on this module's catalogue

    async with conn.transaction():
        await conn.execute(LOCK, (config.ADVISORY_LOCK_MIGRATE,))
        _refuse_foreign(await describe_layout(conn))
        await conn.execute(CREATE_VERSION_TABLE)
        cur = await conn.execute(APPLIED_VERSIONS)
        done = {_first(row) for row in await cur.fetchall()}
        applied = []
        for m in migrations():
            if m.version in done:
                continue
            await conn.execute(m.sql)
            await conn.execute(RECORD_VERSION, (m.version, m.description))
            applied.append(m.version)
        return applied


def migrate_sync(conn: psycopg.Connection[Any]) -> list[int]:
    """``migrate`` on a synchronous connection."""
    from awa.storage import describe_layout_sync  # awa.storage builds on this module's catalogue

    with conn.transaction():
        conn.execute(LOCK, (config.ADVISORY_LOCK_MIGRATE,))
        _refuse_foreign(describe_layout_sync(conn))
        conn.execute(CREATE_VERSION_TABLE)
        done = {_first(row) for row in conn.execute(APPLIED_VERSIONS).fetchall()}
        applied = []
        for m in migrations():
            if m.version not in done:
                conn.execute(m.sql)
                conn.execute(RECORD_VERSION, (m.version, m.description))
                applied.append(m.version)
        return applied


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


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
    from awa.storage import describe_layout  # awa.storage builds on this module's catalogue

    return _checked(await describe_layout(conn), accept_foreign)


def ensure_migrated_sync(conn: psycopg.Connection[Any], *, accept_foreign: bool = False) -> int:
    """``ensure_migrated`` on a synchronous connection."""
    from awa.storage import describe_layout_sync  # awa.storage builds on this module's catalogue

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
