"""The storage-transition members awa-pg 0.6.9's clients had, on this distribution's engines.

A client mixin (``AsyncClient`` and the REST API's admin layer use it) over the live switch
of engines, ``awa.storage.transition`` (``awa storage ...``, docs/architecture.md §5).  Kept
apart from ``awa.compat``'s module-level functions: those build an ``AsyncClient``, which is
built from this mixin, and one module holding both would import itself in a circle.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from awa import config, storage
from awa.admin import QueueStat
from awa.job import ValidationError
from awa.statements import run_async
from awa.storage import transition
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
    """The reference's storage-transition client members, truthful on this distribution.

    ``storage_status`` reports the database's place in the live switch of engines
    (``awa.storage.transition``: canonical, prepared, mixed_transition, aborting, active) with
    awa-pg 0.6.9's keys, its real blockers and the live runtimes' capabilities;
    ``prepare_queue_storage_schema`` is ``awa storage prepare``; ``install_queue_storage``
    switches a drained canonical database offline (``awa migrate --engine queue_storage``),
    and is refused while a live switch is in progress.  Both return ``()``, as 0.6.9's did
    (its annotation said ``None``).  The live steps themselves (enter-mixed, finalize, abort)
    are operator commands: ``awa storage ...``.
    """

    async def storage_status(self: _Client) -> str:
        """A pretty JSON storage report with the keys awa-pg 0.6.9 used."""
        await self._get_engine()  # the schema check, and the foreign-layout refusal
        pool = await self._get_pool()
        async with pool.connection() as conn:
            status = await storage.transition_status(conn)
        if status is None:  # unreachable past the schema check; said in one line if reached
            raise ValidationError("this database's schema is older than this code: run "
                                  "`awa migrate`")
        return json.dumps(status.report(datetime.now(UTC)), indent=2)

    async def install_queue_storage(self: _MigratingClient, *,
                                    schema: str = config.DEFAULT_QUEUE_STORAGE_SCHEMA,
                                    queue_slot_count: int = 16, lease_slot_count: int = 8,
                                    reset: bool = False) -> tuple[()]:
        """Switch this database to the queue-storage engine (``awa migrate --engine
        queue_storage``); idempotent.  Refused while the canonical tables hold jobs (switch
        live instead: ``awa storage``) and while a live switch is in progress.

        ``reset=True`` then empties queue storage, as awa-pg 0.6.9's reset (which dropped and
        re-laid the schema) did: every job, DLQ entry, unique claim, queue setting and
        runtime snapshot goes (the engine's ``clean_for_tests``); its test suites call it
        before each test."""
        _check_slots(queue_slot_count, lease_slot_count)
        storage.check_queue_storage_schema(schema)
        pool = await self._get_pool()
        async with pool.connection() as conn:
            status = await storage.transition_status(conn)
        if status is not None and status.in_progress:
            raise ValidationError(f"install_queue_storage refused: a live switch of engines is "
                                  f"in progress ({status.state.state}); go on with `awa "
                                  f"storage status`")
        await self.migrate(storage.QUEUE_STORAGE, schema)
        storage.forget_engine(pool)  # the pool's engine changed
        if reset:
            engine = await self._get_engine()
            async with pool.connection() as conn:
                await engine.clean_for_tests(conn)
        return ()

    async def prepare_queue_storage_schema(self: _Client, *,
                                           schema: str = config.DEFAULT_QUEUE_STORAGE_SCHEMA,
                                           queue_slot_count: int = 16,
                                           lease_slot_count: int = 8) -> tuple[()]:
        """``awa storage prepare``: choose the queue-storage schema of a live switch (state
        ``prepared``); nothing moves until ``awa storage enter-mixed``.  On a database already
        served by queue storage, nothing to do (the arguments are still checked)."""
        _check_slots(queue_slot_count, lease_slot_count)
        storage.check_queue_storage_schema(schema)
        await self._get_engine()
        pool = await self._get_pool()
        async with pool.connection() as conn:
            layout = await storage.describe_layout(conn)
            if layout.engine == storage.QUEUE_STORAGE:
                return ()  # already served by queue storage: nothing left to prepare
            await run_async(conn, transition.prepare_steps(layout, schema, dry_run=False))
        return ()

    async def flush_admin_metadata(self: _Client) -> None:
        """No-op: ``queue_stats()`` here reads live counts, not a cache (awa-pg 0.6.9
        needed this call before ``queue_stats()`` in tests)."""
        await self._get_engine()


def _check_slots(*counts: int) -> None:
    for n in counts:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValidationError(f"slot counts must be positive integers, got {n!r}")
