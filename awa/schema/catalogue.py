"""The numbered migrations shipped beside this module, read from their files.

The lowest layer of the schema package: the layout check (``awa.schema.layout``) compares a
database's ``awa.schema_version`` against this catalogue, and ``awa.schema`` applies it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

_FILE_NAME = re.compile(r"^(\d{4})_(\w+)\.sql$")

CREATE_VERSION_TABLE = """
CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.schema_version (
    version     integer PRIMARY KEY,
    description text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)"""


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


def migration_header(m: Migration) -> str:
    """The comment line above a migration's SQL, as awa-pg 0.6.9 printed it."""
    return f"-- Migration V{m.version}: {m.description}"


def migration_sql() -> str:
    """Every migration as one script, for ``awa migrate --sql``."""
    parts = [CREATE_VERSION_TABLE + ";"]
    for m in migrations():
        parts.append(f"{migration_header(m)}\n{m.sql}")
        parts.append(f"INSERT INTO awa.schema_version (version, description) "
                     f"VALUES ({m.version}, '{m.description}') ON CONFLICT (version) DO NOTHING;")
    return "\n".join(parts)
