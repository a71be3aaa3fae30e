"""Names awa-pg 0.6.9 exposed that this distribution answers in its own way.

* the module-level migration functions, in the reference's shapes (tuples);
* the storage-transition members of the clients (``storage_status``,
  ``install_queue_storage``, ``prepare_queue_storage_schema``): they accept the
  reference's arguments and report the engine serving the database.  Today
  that is always the canonical engine; **this module is the one place to
  repoint** when the queue-storage engine lands (``STORAGE`` below);
* ``flush_admin_metadata`` (our admin reads are live, there is no cache to flush).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from awa import schema

DEFAULT_QUEUE_STORAGE_SCHEMA = "awa"


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
    from awa.client import AsyncClient
    client = AsyncClient(database_url)
    try:
        return tuple(await client.migrate())
    finally:
        await client.close()


class StorageTransitionMixin:
    """The reference's storage-transition client members, reporting the canonical engine.

    Repoint here when the queue-storage engine exists: ``storage_status`` should
    then describe the live engine, and ``install_queue_storage`` /
    ``prepare_queue_storage_schema`` lay it out.
    """

    async def _get_engine(self) -> Any: ...  # provided by AsyncClient

    async def storage_status(self) -> str:
        """A pretty JSON storage report with the keys awa-pg 0.6.9 used."""
        stats = await self.queue_stats()  # type: ignore[attr-defined]
        backlog = sum(s.total_queued + s.running + s.waiting_external for s in stats)
        now = datetime.now(UTC).isoformat()
        status: dict[str, Any] = {
            "current_engine": "canonical", "active_engine": "canonical",
            "prepared_engine": None, "state": "canonical", "transition_epoch": 0,
            "details": {}, "entered_at": now, "updated_at": now, "finalized_at": None,
            "canonical_live_backlog": backlog,
            "prepared_queue_storage_schema": None, "prepared_schema_ready": False,
            "live_runtime_capability_counts": {}, "can_enter_mixed_transition": False,
            "enter_mixed_transition_blockers": ["this version serves only the canonical engine"],
            "can_finalize": False,
            "finalize_blockers": ["this version serves only the canonical engine"],
        }
        return json.dumps(status, indent=2)

    async def install_queue_storage(self, *, schema: str = DEFAULT_QUEUE_STORAGE_SCHEMA,
                                    queue_slot_count: int = 16, lease_slot_count: int = 8,
                                    reset: bool = False) -> None:
        """Accepted for compatibility; the canonical engine keeps serving."""
        _check_slots(queue_slot_count, lease_slot_count)
        await self._get_engine()

    async def prepare_queue_storage_schema(self, *,
                                           schema: str = DEFAULT_QUEUE_STORAGE_SCHEMA,
                                           queue_slot_count: int = 16,
                                           lease_slot_count: int = 8) -> None:
        """Accepted for compatibility; the canonical engine keeps serving."""
        _check_slots(queue_slot_count, lease_slot_count)
        await self._get_engine()

    async def flush_admin_metadata(self) -> None:
        """No-op: ``queue_stats()`` here reads live counts, not a cache (awa-pg 0.6.9
        needed this call before ``queue_stats()`` in tests)."""
        await self._get_engine()


def _check_slots(*counts: int) -> None:
    from awa.job import ValidationError
    for n in counts:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValidationError(f"slot counts must be positive integers, got {n!r}")
