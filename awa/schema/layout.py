"""What schema ``awa`` of a database holds: whose layout it is, which engine serves it, and
whether it is behind this code.

The decision reads only what is in schema ``awa``: ``awa.schema_version`` says whether *this*
distribution laid the schema out (every version this code knows must carry this code's
description; the Rust-core awa 0.6 writes versions 1..40+ with its own descriptions), and
``awa.active_queue_storage_schema()`` / ``awa.runtime_storage_backends`` name the engine.  It
lives with the migrations (not with the engines in ``awa.storage``) because applying them and
checking a database against them need it, and the engines are built on the migrations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from awa.job import ForeignSchema
from awa.schema import catalogue
from awa.statements import Query, Steps, first_value, run_async, run_sync

CANONICAL = "canonical"
QUEUE_STORAGE = "queue_storage"
# The engines this code has; awa.storage.ENGINES maps each to its loader.
ENGINE_NAMES = (CANONICAL, QUEUE_STORAGE)
NO_ENGINE = "none"
CONTROL_SCHEMA = "awa"

OURS = "awa-py"
RUST_CORE = "the Rust-core awa"
OTHER = "another awa distribution"
# The Rust core's first migration; seen with its awa.storage_status(), it names the distribution.
RUST_CORE_FIRST_MIGRATION = "Canonical schema with UI indexes"

QUEUE_STORAGE_LAYOUT_VERSION = 10
"""The queue-storage layout this code needs (``awa.qs_layout_version()`` says which a database
has).  Raised with every change to the engine's layout or to a function it calls, so
that a database laid out by older code is refused with `awa migrate` as the fix
(``awa.schema.ensure_migrated``) instead of failing at its first statement.  0: laid out before
the version was recorded (no ``awa.qs_layout_version()``); 1: ``awa.qs_insert_plain``, the
short path of ``awa.qs_finalize_plain``; 2: closures in ``lease_claim_closure_batches`` only,
guarded by each partition's exclusion constraint; 3: dispatchers woken by
``awa.qs_reserve_lane`` (no trigger on ``ready_entries``), entries found by job id (no
``ready_id`` index), no ``claimed_at`` index on receipts, ``awa.qs_claimed_run_end``; 4: open
receipts read from the gaps between closed ranges past a watermark (``awa.qs_open_receipts``,
``awa.qs_receipt_watermark``, receipts indexed by ``receipt_id``); 5: ``awa.qs_settle_lane``,
called by batch moves; 6: the open-receipt rule as ``awa.qs_receipt_is_open`` and
``awa.qs_attempt_receipt``, the ``awa.jobs`` update trigger through ``awa.qs_heartbeat``; 7:
every ending of an attempt through ``awa.qs_end_attempts`` (``qs_finalize``, ``qs_retry``,
``qs_snooze`` and ``qs_dead_letter`` dropped); 8: one copy of history, a completed job's done
entry naming its ready entry (``ready_id``; ``awa.qs_done_names_entry``) instead of repeating
its args, read through ``awa.qs_done_rows``; 9: ``awa.qs_enqueue_plain``, a plain batch's
reservation and rows in one call returning the count (COPY's paths send their batches as
arrays: one round trip instead of a reservation, a COPY and a transaction); 10: callbacks
resolved by ``awa.qs_resolve_callbacks`` over ``awa.qs_end_attempts``, which takes
``available`` (a fresh start, ``awa.qs_append_ready``), the ``att`` step as
``awa.qs_attempts``.  Kept here, so that
checking a database needs no engine loaded; ``awa/storage/queue_storage/sql/layout_version.sql``
installs the same number (a test checks)."""

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
    def ahead(self) -> bool:
        """Ours, and migrated by a newer awa-py than this code: ``awa migrate`` leaves it
        unchanged (a rollback keeps the newer layout, which still serves this code)."""
        return (not self.foreign and self.installed
                and ((self.schema_version or 0) > self.code_version
                     or (self.engine_layout or 0) > (self.engine_layout_needed or 0)))

    def describe_ahead(self) -> str:
        """The one line ``awa migrate`` prints for a database ``ahead`` of this code."""
        have = f"schema version {self.schema_version}"
        needed = f"schema version {self.code_version}"
        if self.engine_layout_needed is not None:
            have += f", {self.engine} layout {self.engine_layout}"
            needed += f", layout {self.engine_layout_needed}"
        return (f"database is ahead of this awa-py ({have}; this code has {needed}): nothing "
                f"changed; its layout keeps what this release calls")

    @property
    def supported(self) -> bool:
        """Ours, and served by an engine this code has."""
        return not self.foreign and self.engine in ENGINE_NAMES

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
                f"on this one" + (", or move it over with `awa adopt --dry-run` then "
                                  "`awa adopt` (docs/compat.md)"
                                  if self.distribution == RUST_CORE else ""))
        if self.installed and self.engine not in ENGINE_NAMES:
            return ForeignSchema(
                f"database served by the storage engine {self.engine!r} ({self.describe()}), "
                f"which this awa-py lacks (it has {', '.join(sorted(ENGINE_NAMES))}): left "
                f"unchanged; upgrade awa-py (pip install -U awa-py)")
        return None


def classify(probe: Mapping[str, Any], versions: list[tuple[int, str]],
             active_schema: str | None, backends: list[tuple[str, str]],
             qs_layout: int | None = None) -> StorageLayout:
    """The layout from the probe's facts (no I/O; the async and sync readers share it).

    ``backends`` is ``(backend, schema_name)``, newest first; ``qs_layout`` what
    ``awa.qs_layout_version()`` returned (None: the function is not there).
    """
    code_version = catalogue.current_migration_version()
    if not versions:
        return StorageLayout(NO_ENGINE, CONTROL_SCHEMA, None, False, "", code_version)
    ours = {m.version: m.description for m in catalogue.migrations()}
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
        return StorageLayout(engine, schema, max(found), foreign, distribution, code_version,
                             qs_layout or 0, QUEUE_STORAGE_LAYOUT_VERSION)
    return StorageLayout(engine, schema, max(found), foreign, distribution, code_version)


def describe_layout_steps() -> Steps[StorageLayout]:
    """Read the layout (2 to 5 plain SELECTs; nothing is written): ``describe_layout`` and
    ``describe_layout_sync``, and a step of longer sequences (``migrate``)."""
    [probe] = yield Query(PROBE)  # a SELECT without FROM returns one row
    versions: list[tuple[int, str]] = []
    active: str | None = None
    backends: list[tuple[str, str]] = []
    if probe["has_schema_version"]:
        versions = [(r["version"], r["description"]) for r in (yield Query(VERSIONS))]
    if versions and probe["has_active_fn"]:
        active = first_value((yield Query(ACTIVE_SCHEMA)))
    if versions and probe["has_backends"]:
        backends = [(r["backend"], r["schema_name"]) for r in (yield Query(BACKENDS))]
    qs_layout: int | None = None
    if active and probe["has_qs_layout_version"]:
        qs_layout = first_value((yield Query(QS_LAYOUT_VERSION)))
    return classify(probe, versions, active, backends, qs_layout)


async def describe_layout(conn: psycopg.AsyncConnection[Any]) -> StorageLayout:
    """The database's layout (``describe_layout_steps``)."""
    return await run_async(conn, describe_layout_steps())


def describe_layout_sync(conn: psycopg.Connection[Any]) -> StorageLayout:
    """``describe_layout`` on a blocking connection."""
    return run_sync(conn, describe_layout_steps())
