"""Storage engines: every job-table statement lives below this package.

``open_engine`` decides from the database which engine serves it; the
client, the CLI, ``awa-ops``, ``awa-tui`` and ``awa serve`` all go through it.

The decision is ``awa.schema.layout``'s (``describe_layout``: whose layout the
database has and which engine it names), re-exported here for the engines'
users.  ``ENGINES`` maps an engine name to its loader, so a second engine
plugs in with one entry (and its name in ``layout.ENGINE_NAMES``).  A foreign
layout, or an engine missing from ``ENGINES``, is refused with one line
(``ForeignSchema``) and never changed.

Only this package reaches into an engine (``canonical``, ``queue_storage``, ``rust_core``):
the rest of awa, awa-ops and awa-tui take an engine from ``open_engine``, the
operators' read side from ``read_engine_for`` (which serves a Rust-core awa 0.6 layout
too, read-only), and ``awa adopt`` goes through ``awa.storage.adopt``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import psycopg

from awa import config, schema
from awa.job import ValidationError
from awa.schema.layout import (
    CANONICAL,
    CONTROL_SCHEMA,
    NO_ENGINE,
    OTHER,
    OURS,
    QUEUE_STORAGE,
    RUST_CORE,
    RUST_CORE_FIRST_MIGRATION,
    StorageLayout,
    classify,
    describe_layout,
    describe_layout_steps,
    describe_layout_sync,
)
from awa.statements import Query, Steps, run_async, run_sync
from awa.storage.engine import Engine, ReadEngine

__all__ = ["CANONICAL", "CONTROL_SCHEMA", "NO_ENGINE", "OTHER", "OURS", "QUEUE_STORAGE",
           "RUST_CORE", "RUST_CORE_FIRST_MIGRATION", "StorageLayout", "classify",
           "describe_layout", "describe_layout_sync", "ENGINES", "engine_for", "open_engine",
           "open_engine_sync", "forget_engine", "read_engine_for", "rust_core_engine",
           "migrate", "migrate_sync", "check_queue_storage_schema", "ConnectionSource",
           "ContractRefused", "contract_steps", "FleetVersions", "fleet_steps",
           "transition_status"]


def _canonical(schema: str) -> Engine:
    from awa.storage.canonical import ENGINE  # imported on use: canonical imports awa modules

    return ENGINE


def _queue_storage(schema: str) -> Engine:
    from awa.storage import queue_storage  # imported on use, like canonical

    return queue_storage.load(schema)


# Engine name -> loader, given the schema the layout names for the engine's tables.
ENGINES: dict[str, Callable[[str], Engine]] = {CANONICAL: _canonical,
                                               QUEUE_STORAGE: _queue_storage}


def check_queue_storage_schema(name: str) -> None:
    """``ValidationError`` (one line) unless ``name`` may hold a queue-storage layout."""
    from awa.storage.queue_storage.schema import check_schema  # engines load on use

    check_schema(name)


def engine_for(layout: StorageLayout) -> Engine:
    """The engine serving ``layout``; ``ForeignSchema`` when this code must not touch it.

    A never-migrated database gets the canonical engine: the schema check
    (``awa.schema.ensure_migrated``) is what names `awa migrate` as the fix.
    """
    refused = layout.refusal()
    if refused is not None:
        raise refused
    return ENGINES[layout.engine if layout.installed else CANONICAL](layout.schema)


def rust_core_engine(layout: StorageLayout) -> Engine:
    """The read-only engine of a Rust-core layout (``layout.distribution`` is
    ``rust_core``): an ``Engine`` whose every write is refused in one line naming the
    Rust-core CLI command (what the CLI's admin commands run on such a database)."""
    from awa.storage.rust_core import rust_core_engine as reader  # engines load on use

    return reader(layout)


def read_engine_for(layout: StorageLayout) -> ReadEngine:
    """The engine whose read side serves ``layout`` for operators (awa-ops, awa-tui, CLI reads).

    A Rust-core layout gets its read-only engine (``rust_core_engine``); every other
    layout the engine ``open_engine`` would give (``ForeignSchema`` for one nothing here
    can read).  Our runtime and client keep going through ``open_engine``, which refuses
    every foreign layout.
    """
    if layout.foreign and layout.distribution == RUST_CORE:
        return rust_core_engine(layout)
    return engine_for(layout)


class ConnectionSource(Protocol):
    """A pool, or anything lending connections the same way."""

    def connection(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...


# Decided once per pool: a pool's database does not change its engine under it, but for
# the live switch, which the transition layer follows by itself (awa.storage.transition).
_SOURCE_ENGINES: weakref.WeakKeyDictionary[ConnectionSource, Engine] = (
    weakref.WeakKeyDictionary())


def _engine_steps() -> Steps[Engine]:
    """The layout, then (from migration 0008 on) the transition state: a database on
    canonical or in a transition gets the transition layer over the engines, one on queue
    storage with no transition in progress its engine itself."""
    from awa.storage import transition

    layout = yield from describe_layout_steps()
    engine = engine_for(layout)
    if not layout.supported or layout.behind:
        return engine
    state = yield from transition.read_steps(layout)
    if state is None or state.state == transition.ACTIVE:
        return engine
    return transition.engine_over(ENGINES[CANONICAL](CONTROL_SCHEMA), state,
                                  ENGINES[QUEUE_STORAGE])


async def open_engine(conn_or_pool: psycopg.AsyncConnection[Any] | ConnectionSource) -> Engine:
    """The engine that serves this database; ``ForeignSchema`` for a layout it must not touch.

    Given a pool, the answer is kept for the pool's lifetime (no query on later calls).
    """
    if isinstance(conn_or_pool, psycopg.AsyncConnection):
        return await run_async(conn_or_pool, _engine_steps())
    engine = _SOURCE_ENGINES.get(conn_or_pool)
    if engine is None:
        async with conn_or_pool.connection() as conn:
            engine = await run_async(conn, _engine_steps())
        _SOURCE_ENGINES[conn_or_pool] = engine
    return engine


def open_engine_sync(conn: psycopg.Connection[Any]) -> Engine:
    """``open_engine`` for a blocking connection (the bridge on a user's sync connection)."""
    return run_sync(conn, _engine_steps())


def forget_engine(source: ConnectionSource) -> None:
    """Drop the engine ``open_engine`` keeps for this pool (after its database changed
    engine, e.g. ``install_queue_storage``)."""
    _SOURCE_ENGINES.pop(source, None)


def migrate_steps(engine: str | None = None,
                  queue_storage_schema: str | None = None) -> Steps[list[int]]:
    """``awa migrate``: our numbered migrations, then the engine's own layout.

    ``engine`` None keeps the database's engine (``config.DEFAULT_STORAGE_ENGINE``
    when new).  Queue storage is laid out again after every migration
    (idempotent), since a migration may replace the ``awa.jobs`` view it extends;
    ``queue_storage_schema`` is where a new layout goes (an existing one stays put).
    """
    before = yield from describe_layout_steps()
    if before.ahead and engine in (None, before.engine):
        return []  # a newer release's layout: left as it is (StorageLayout.describe_ahead)
    wanted = _wanted_engine(before, engine, queue_storage_schema)
    applied = yield from schema.migrate_steps()
    if wanted == QUEUE_STORAGE:
        from awa.storage.queue_storage.schema import install_steps
        from awa.storage.transition import note_installed_steps

        laid_out = yield from install_steps(queue_storage_schema)
        yield from note_installed_steps(laid_out)
    return applied


async def migrate(conn: psycopg.AsyncConnection[Any], engine: str | None = None,
                  queue_storage_schema: str | None = None) -> list[int]:
    """``migrate_steps`` on an async connection."""
    return await run_async(conn, migrate_steps(engine, queue_storage_schema))


def migrate_sync(conn: psycopg.Connection[Any], engine: str | None = None,
                 queue_storage_schema: str | None = None) -> list[int]:
    """``migrate_steps`` on a blocking connection (test templates, benchmarks, ``awa.migrate``)."""
    return run_sync(conn, migrate_steps(engine, queue_storage_schema))


# Live runtimes (the ops rule: a snapshot within OPS_RUNTIME_LIVE_FACTOR of its own interval,
# never under OPS_RUNTIME_LIVE_MIN_S) whose code needs an older schema or engine layout than
# this code's; NULL: a release from before runtimes recorded them.
OLDER_LIVE_RUNTIMES = """
SELECT hostname, pid, version, schema_version, layout_version
  FROM awa.runtime_instances
 WHERE last_seen_at > now() - make_interval(secs => greatest(
           %(factor)s * snapshot_interval_ms / 1000.0, %(min_s)s))
   AND (schema_version IS NULL OR schema_version < %(schema)s
        OR (%(layout)s::int IS NOT NULL
            AND (layout_version IS NULL OR layout_version < %(layout)s::int)))
 ORDER BY hostname, pid"""


class ContractRefused(ValidationError):
    """``awa migrate --contract`` while a live runtime speaks an older layout."""


def contract_steps() -> Steps[str]:
    """``awa migrate --contract``: drop what this layout keeps for older releases' runtimes
    (the engine's compat objects), once no live runtime speaks an older layout; else
    ``ContractRefused`` naming them, in one line.  Returns what it did, in one line."""
    layout = yield from describe_layout_steps()
    if not layout.installed or layout.behind or layout.ahead:
        refused = layout.refusal()
        if refused is not None:
            raise refused
        raise ContractRefused(f"contract refused: the database ({layout.describe()}) is not "
                              f"at this code's layout: run `awa migrate` with this release "
                              f"first")
    needed = layout.engine_layout_needed
    yield from _refuse_older_runtimes(layout)
    if layout.engine != QUEUE_STORAGE:
        return (f"nothing to contract: the {layout.engine} engine keeps nothing for older "
                f"releases")
    from awa.storage.queue_storage.schema import contract_steps as queue_storage_contract

    # Asked again under the step's locks (runtime_instances among them), so no runtime of an
    # older release registers between the answer and the drop.
    dropped = yield from queue_storage_contract(layout.schema,
                                                partial(_refuse_older_runtimes, layout))
    return (f"contracted: dropped {dropped} object(s) kept for older releases' runtimes "
            f"(queue storage layout {needed})")


# Live runtimes grouped by what they speak (read through the row's JSON: a schema from
# before migration 0007 has no such columns).
LIVE_FLEET = """
SELECT version, (to_jsonb(r) ->> 'schema_version')::int AS schema_version,
       (to_jsonb(r) ->> 'layout_version')::int AS layout_version, count(*) AS runtimes
  FROM awa.runtime_instances r
 WHERE last_seen_at > now() - make_interval(secs => greatest(
           %(factor)s * snapshot_interval_ms / 1000.0, %(min_s)s))
 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"""


@dataclass(frozen=True)
class FleetVersions:
    """What the live runtimes speak, and what the layout still keeps for older ones."""

    groups: list[dict[str, Any]]  # version, schema_version, layout_version, runtimes
    kept_for_older: int  # objects `awa migrate --contract` would drop

    def describe(self) -> str:
        """E.g. ``2 runtimes on awa-py 0.1.0 (layout not recorded), 2 on awa-py 0.2.0
        (layout 8)``."""
        if not self.groups:
            return "no live runtime"
        return ", ".join(
            f"{g['runtimes']} runtime(s) on awa-py {g['version']} ("
            + ("layout not recorded" if g["schema_version"] is None
               else f"layout {g['layout_version']}" if g["layout_version"] is not None
               else f"schema {g['schema_version']}") + ")"
            for g in self.groups)


def fleet_steps(layout: StorageLayout) -> Steps[FleetVersions]:
    """The live fleet's versions and the contract step's work left (``awa db``)."""
    groups = [dict(r) for r in (yield Query(LIVE_FLEET, {
        "factor": config.OPS_RUNTIME_LIVE_FACTOR, "min_s": config.OPS_RUNTIME_LIVE_MIN_S}))]
    kept = 0
    if layout.engine == QUEUE_STORAGE and not layout.foreign:
        from awa.storage.queue_storage.schema import compat_kept_steps

        kept = yield from compat_kept_steps(layout.schema)
    return FleetVersions(groups, kept)


def _refuse_older_runtimes(layout: StorageLayout) -> Steps[None]:
    """``ContractRefused`` naming every live runtime that speaks an older layout."""
    older = yield Query(OLDER_LIVE_RUNTIMES, {
        "factor": config.OPS_RUNTIME_LIVE_FACTOR, "min_s": config.OPS_RUNTIME_LIVE_MIN_S,
        "schema": layout.code_version, "layout": layout.engine_layout_needed})
    if older:
        names = ", ".join(
            f"{r['hostname']}:{r['pid']} (awa-py {r['version']}, "
            + (f"layout {r['layout_version']})" if r["layout_version"] is not None
               else f"schema {r['schema_version']})" if r["schema_version"] is not None
               else "a release before versions were recorded)")
            for r in older)
        raise ContractRefused(
            f"contract refused: {len(older)} live runtime(s) speak an older layout: {names}; "
            f"roll them to this release (or stop them), then run `awa migrate --contract` "
            f"again")


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
        check_queue_storage_schema(queue_storage_schema)
        if wanted != QUEUE_STORAGE:
            raise ValidationError(f"a queue-storage schema was given, but this database is "
                                  f"migrated for the {wanted} engine: leave the schema out, or "
                                  f"migrate with --engine queue_storage")
    return wanted


async def transition_status(conn: psycopg.AsyncConnection[Any]) -> Any:
    """The live switch's status (``awa.storage.transition.TransitionStatus``), None on a
    schema from before it; ``ForeignSchema`` for a layout this code must not touch."""
    from awa.storage import transition

    layout = await describe_layout(conn)
    refused = layout.refusal()
    if refused is not None:
        raise refused
    return await run_async(conn, transition.status_steps(layout))
