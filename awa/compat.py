"""Module-level names awa-pg 0.6.9 exposed, answered in this distribution's way.

* the migration functions, in the reference's shapes (tuples);
* ``migrate(database_url)``, awaitable as in the reference.

The storage-transition members of the clients (``storage_status``, ``install_queue_storage``,
``prepare_queue_storage_schema``, ``flush_admin_metadata``) are ``awa.storage_transition``'s
mixin: this module builds a client, so the client cannot be built from this module.
"""

from __future__ import annotations

from awa import schema
from awa.client import AsyncClient


def migrations() -> list[tuple[int, str, str]]:
    """Every migration as ``(version, description, sql)``, oldest first (as awa-pg 0.6.9)."""
    return [(m.version, m.description, m.sql) for m in schema.migrations()]


def migrations_range(from_version: int, to_version: int) -> list[tuple[int, str, str]]:
    """The migrations after ``from_version`` up to ``to_version``, as tuples."""
    return [(m.version, m.description, m.sql)
            for m in schema.migrations_range(from_version, to_version)]


def schema_patches() -> list[tuple[int, str, str]]:
    """awa-pg 0.6.9's out-of-band schema patches; this distribution has none."""
    return []


async def migrate(database_url: str) -> tuple[int, ...]:
    """Apply every missing migration to ``database_url`` (awaitable, as awa-pg 0.6.9);
    the versions applied, as a tuple (empty when the schema was current)."""
    client = AsyncClient(database_url)
    try:
        return tuple(await client.migrate())
    finally:
        await client.close()
