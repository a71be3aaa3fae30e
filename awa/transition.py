"""The storage-transition members awa-pg 0.6.9's clients had, on this distribution's engines.

A client mixin (``AsyncClient`` and the REST API's admin layer use it), kept apart from
``awa.compat``'s module-level functions: those build an ``AsyncClient``, which is built from
this mixin, and one module holding both would import itself in a circle.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from awa import config, storage
from awa.admin import QueueStat
from awa.job import ValidationError
from awa.storage.engine import Engine


class _Client(Protocol):
    """What the mixin needs of the class it is mixed into."""

    async def _get_engine(self) -> Engine: ...

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool: ...

    async def queue_stats(self) -> list[QueueStat]: ...


class _MigratingClient(_Client, Protocol):
    async def migrate(self, engine: str | None = None,
                      queue_storage_schema: str | None = None) -> list[int]: ...


class StorageTransitionMixin:
    """The reference's storage-transition client members.

    ``storage_status`` describes the engine serving the database (queue storage
    or canonical) with awa-pg 0.6.9's keys; ``install_queue_storage`` switches a
    drained canonical database to queue storage (``awa migrate --engine
    queue_storage``); ``prepare_queue_storage_schema`` only validates: queue
    storage here has no separately prepared schema (installing is one step).
    Both return ``()``, as 0.6.9's did (its annotation said ``None``).
    """

    async def storage_status(self: _Client) -> str:
        """A pretty JSON storage report with the keys awa-pg 0.6.9 used, for the live engine."""
        await self._get_engine()  # the schema check, and the foreign-layout refusal
        pool = await self._get_pool()
        async with pool.connection() as conn:
            layout = await storage.describe_layout(conn)
        now = _utc_now()
        if layout.engine == storage.QUEUE_STORAGE:
            return json.dumps(_status(
                "queue_storage", "active", 1, {"schema": layout.schema}, now, finalized_at=now,
                backlog=0, prepared=layout.schema,
                blockers=[_ACTIVE_BLOCKER % layout.schema]), indent=2)
        stats = await self.queue_stats()
        backlog = sum(s.total_queued + s.running + s.waiting_external for s in stats)
        return json.dumps(_status("canonical", "canonical", 0, {}, now, finalized_at=None,
                                  backlog=backlog, prepared=None,
                                  blockers=[_CANONICAL_BLOCKER]), indent=2)

    async def install_queue_storage(self: _MigratingClient, *,
                                    schema: str = config.DEFAULT_QUEUE_STORAGE_SCHEMA,
                                    queue_slot_count: int = 16, lease_slot_count: int = 8,
                                    reset: bool = False) -> tuple[()]:
        """Switch this database to the queue-storage engine (``awa migrate --engine
        queue_storage``); idempotent.  Refused while the canonical tables hold jobs."""
        _check_slots(queue_slot_count, lease_slot_count)
        storage.check_queue_storage_schema(schema)
        if reset:
            raise ValidationError("install_queue_storage(reset=True) is not supported: queue "
                                  "storage is laid out in place; migrate a new database instead")
        await self.migrate(storage.QUEUE_STORAGE, schema)
        storage.forget_engine(await self._get_pool())  # the pool's engine changed
        return ()

    async def prepare_queue_storage_schema(self: _Client, *,
                                           schema: str = config.DEFAULT_QUEUE_STORAGE_SCHEMA,
                                           queue_slot_count: int = 16,
                                           lease_slot_count: int = 8) -> tuple[()]:
        """Validate the arguments; nothing to prepare (``install_queue_storage`` is one step)."""
        _check_slots(queue_slot_count, lease_slot_count)
        storage.check_queue_storage_schema(schema)
        await self._get_engine()
        return ()

    async def flush_admin_metadata(self: _Client) -> None:
        """No-op: ``queue_stats()`` here reads live counts, not a cache (awa-pg 0.6.9
        needed this call before ``queue_stats()`` in tests)."""
        await self._get_engine()


_CANONICAL_BLOCKER = ("the canonical engine serves this database: switch a drained database "
                      "with install_queue_storage() (awa migrate --engine queue_storage); "
                      "there is no mixed transition")
_ACTIVE_BLOCKER = "queue storage in schema %r already serves this database"


def _utc_now() -> str:
    """0.6.9's timestamp spelling: ISO 8601 in UTC with a ``Z``."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _status(engine: str, state: str, epoch: int, details: dict[str, Any], now: str, *,
            finalized_at: str | None, backlog: int, prepared: str | None,
            blockers: list[str]) -> dict[str, Any]:
    """awa-pg 0.6.9's storage_status document, key for key and in its order."""
    return {
        "current_engine": engine, "active_engine": engine, "prepared_engine": None,
        "state": state, "transition_epoch": epoch, "details": details,
        "entered_at": now, "updated_at": now, "finalized_at": finalized_at,
        "canonical_live_backlog": backlog,
        "prepared_queue_storage_schema": prepared, "prepared_schema_ready": prepared is not None,
        "live_runtime_capability_counts": {}, "can_enter_mixed_transition": False,
        "enter_mixed_transition_blockers": blockers, "can_finalize": False,
        "finalize_blockers": blockers,
    }


def _check_slots(*counts: int) -> None:
    for n in counts:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValidationError(f"slot counts must be positive integers, got {n!r}")
