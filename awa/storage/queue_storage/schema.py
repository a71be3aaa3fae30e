"""Installing the queue-storage layout, the engine-selection hook, and its schema.

``install_queue_storage`` lays a database out for queue storage: the
canonical migrations first (they own the shared tables: ``awa.queue_meta``,
``awa.job_unique_claims``, ``awa.dlq_entries``, ``awa.cron_jobs``, runtime
and descriptor tables), then the engine's files in ``sql/`` (``procedures.FILES``),
which name the engine in ``awa.runtime_storage_backends`` and replace the
``awa.jobs`` view with one covering both engines' tables.  Idempotent.

The layout's own tables, sequences and functions live in the engine's schema
(``awa`` unless the operator chose another).  The SQL beside the engine names
them ``awa.<name>`` as the seeds do; ``in_schema`` moves exactly those names
to the engine's schema, so a database laid out in ``awa`` runs the text as
written, and one schema rule serves the layout and every statement.  Which
names those are has one source, the files that make them: ``layout_objects``
reads every ``CREATE``/``ALTER``/``DROP`` of ``awa.<name>`` in the engine's
files, less what the control schema keeps (what the canonical migrations name,
and the version record); a table added to ``layout.sql`` moves with no list to
edit.  (A spelling of its own in the SQL, a marker, would need every file that
names a layout object rewritten, the hot path's included.)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from functools import cache, partial
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa import config
from awa import schema as migrations
from awa.job import ValidationError
from awa.schema.ddl import locked_step
from awa.schema.layout import (
    CONTROL_SCHEMA,
    QUEUE_STORAGE_LAYOUT_VERSION,
    describe_layout_steps,
)
from awa.statements import Query, Steps, first_value, run_async, run_sync, transaction
from awa.storage.queue_storage import procedures

DEFAULT_SCHEMA = config.DEFAULT_QUEUE_STORAGE_SCHEMA
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# What a statement makes, alters or drops: the name after ``awa.``.
_MADE = re.compile(r"\b(?:CREATE(?: OR REPLACE)?|ALTER|DROP)(?: UNIQUE)? "
                   r"(?:TABLE|SEQUENCE|FUNCTION|VIEW|INDEX)(?: IF(?: NOT)? EXISTS)? awa\.(\w+)")
_NAMED = re.compile(r"\bawa\.(\w+)")


@cache
def layout_objects() -> frozenset[str]:
    """The layout's own objects, read from the files that make them: every name the engine's
    files (``procedures.FILES`` and ``CONTRACT``) create, alter or drop as ``awa.<name>``,
    less the control schema's, which stay in ``awa``: every ``awa.<name>`` the canonical
    migrations write (they own schema ``awa``: ``awa.jobs``, which the engine replaces,
    ``awa.active_queue_storage_schema()``, ...) and the layout's version record
    (``procedures.VERSION``: ``awa.qs_layout_version()``, read in ``awa`` before anyone
    knows where the layout is)."""
    made = "\n".join(procedures.read(name) for name in (*procedures.FILES, procedures.CONTRACT))
    control = migrations.migration_sql() + procedures.read(procedures.VERSION)
    return frozenset(_MADE.findall(made)) - frozenset(_NAMED.findall(control))


@cache
def _layout_object() -> re.Pattern[str]:
    """``awa.`` before one of ``layout_objects`` or a partition of one (``<name>_<slot>``,
    made by layout.sql's partition loop): where ``in_schema`` puts the layout's schema."""
    names = "|".join(sorted(layout_objects(), key=lambda n: (-len(n), n)))
    return re.compile(rf"\bawa\.(?=(?:{names})(?:_\d+)?\b)")


# What the installer sends besides the installed files (sql/installer.sql).
CANONICAL_ROWS = procedures.named("installer.sql", "canonical_rows")
LOCK = procedures.named("installer.sql", "lock")
HAS_TRANSITION = procedures.named("installer.sql", "has_transition")
TRANSITION_UNDERWAY = procedures.named("installer.sql", "transition_underway")
HAS_ACTIVE_FN = procedures.named("installer.sql", "has_active_fn")
ACTIVE_SCHEMA = procedures.named("installer.sql", "active_schema")
INSTALLED = procedures.named("installer.sql", "installed")
RECORD_INSTALL = procedures.named("installer.sql", "record_install")
RECORD_CONTRACT = procedures.named("installer.sql", "record_contract")
COMPAT_PRESENT = procedures.named("installer.sql", "compat_present")

def in_schema(statement: str, schema: str) -> str:
    """``statement`` with the layout's objects in ``schema`` (itself for ``awa``)."""
    return statement if schema == DEFAULT_SCHEMA else _moved(statement, schema)


@cache
def _moved(statement: str, schema: str) -> str:
    check_schema(schema)
    return _layout_object().sub(f'"{schema}".', statement)


class InSchema:
    """What every part of the queue-storage engine shares: the schema its tables are in,
    and ``sql``, through which each statement it sends passes."""

    schema: str = DEFAULT_SCHEMA

    def sql(self, statement: str) -> str:
        """``statement`` as this engine's schema spells it."""
        return in_schema(statement, self.schema)

    async def _rows(self, conn: psycopg.AsyncConnection[Any], statement: str,
                    params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """``statement``'s rows as dicts (none for a statement returning nothing)."""
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self.sql(statement), params)
            return await cur.fetchall() if cur.description is not None else []

    async def _row(self, conn: psycopg.AsyncConnection[Any], statement: str,
                   params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """``statement``'s first row, or None."""
        rows = await self._rows(conn, statement, params)
        return rows[0] if rows else None


@cache
def install_sql(schema: str = DEFAULT_SCHEMA, compat: bool = True) -> str:
    """What the engine installs (``procedures.script``: the files in ``sql/``, the layout
    first and its version last), for the layout in ``schema``; ``compat``: with what is kept
    for older releases (until the contract step)."""
    return "\n".join(sql for _, sql in install_files(schema, compat))


@cache
def install_files(schema: str = DEFAULT_SCHEMA,
                  compat: bool = True) -> tuple[tuple[str, str], ...]:
    """``install_sql`` file by file, ``(name, sql)``: each is one step of ``install_steps``."""
    found = [(name, in_schema(procedures.read(name), schema))
             for name in procedures.files(compat)]
    if schema != DEFAULT_SCHEMA:
        found.insert(0, ("schema", f'CREATE SCHEMA IF NOT EXISTS "{schema}";'))
    return tuple(found)


def fingerprint(schema: str, compat: bool) -> str:
    """The script's half of what ``awa.layout_installs`` records of an install (the other:
    ``OBJECTS_DIGEST`` of what it left): the same install over the same objects is not run
    again, while one another release's `awa migrate` changed is."""
    return hashlib.sha256(install_sql(schema, compat).encode()).hexdigest()


def check_schema(schema: str) -> None:
    """``ValidationError`` unless ``schema`` is a plain lower-case identifier (it is
    spliced into SQL as a quoted identifier, so nothing else may pass)."""
    if not isinstance(schema, str) or not _IDENTIFIER.match(schema):
        raise ValidationError(f"queue-storage schema {schema!r} is not a plain lower-case "
                              f"identifier: use letters, digits and _ (e.g. awa_qs)")
    if schema.startswith("pg_"):
        raise ValidationError(f"queue-storage schema {schema!r}: names starting with pg_ are "
                              f"PostgreSQL's own; choose another (e.g. awa_qs)")


def install_steps(schema: str | None = None) -> Steps[str]:
    """Lay the database out for queue storage (canonical migrations first); idempotent.
    ``schema``: where the layout goes (None: where it is, else the default).  The schema
    it is in is returned.

    Each file of the layout is a step of its own, its locks taken up front
    (``awa.schema.ddl``), so a live fleet waits a bounded time and never deadlocks with it;
    the layout version comes last, so a layout that has it is complete.  An install of the
    same script as last time (``awa.layout_installs``) is skipped: a repeated ``awa
    migrate`` takes no lock at all.

    Refuses a database whose canonical tables hold jobs: they would keep
    running on canonical SQL nobody executes any more.
    """
    if schema is not None:
        check_schema(schema)
    yield from migrations.migrate_steps()
    target, compat, current = yield from transaction(_plan(schema))
    if current:
        return target
    schemas = _schemas(target)
    for name, sql in install_files(target, compat):
        yield from locked_step(partial(_run, sql), schemas, f"queue storage {name}")
    yield from transaction(_record(target, compat))
    return target


def _plan(schema: str | None) -> Steps[tuple[str, bool, bool]]:
    """The schema to lay out, whether compat.sql goes with it, whether it is installed as is."""
    yield Query(LOCK, (config.ADVISORY_LOCK_MIGRATE,))
    if first_value((yield Query(CANONICAL_ROWS))) and not (yield from _switching()):
        raise ValidationError(_CANONICAL_BUSY)
    target = _target((yield from active_schema_steps()), schema)
    [state] = yield Query(INSTALLED, {"schemas": _schemas(target)})
    compat = (state["contracted_layout"] or 0) < QUEUE_STORAGE_LAYOUT_VERSION
    layout = yield from describe_layout_steps()
    current = (layout.engine_layout == QUEUE_STORAGE_LAYOUT_VERSION
               and state["fingerprint"] == f"{fingerprint(target, compat)}:{state['objects']}")
    return target, compat, current


def _switching() -> Steps[bool]:
    """A live switch is under way (awa.storage.transition): canonical's jobs keep running
    there, drained by the runtimes, so laying queue storage out beside them is its step."""
    if not first_value((yield Query(HAS_TRANSITION))):
        return False
    return bool(first_value((yield Query(TRANSITION_UNDERWAY))))


def _run(sql: str) -> Steps[None]:
    yield Query(sql)


def _record(target: str, compat: bool) -> Steps[None]:
    yield Query(RECORD_INSTALL, {"script": fingerprint(target, compat),
                                 "schemas": _schemas(target)})


def _schemas(target: str) -> list[str]:
    """The schemas an install writes: the control schema and the layout's."""
    return sorted({CONTROL_SCHEMA, target})


_DROPPED = re.compile(r"^DROP FUNCTION IF EXISTS (\S+\(.*\));$", re.MULTILINE)


def compat_kept_steps(schema: str) -> Steps[int]:
    """How many of the objects ``contract.sql`` drops are installed."""
    sql = in_schema(procedures.read(procedures.CONTRACT), schema)
    found = first_value((yield Query(COMPAT_PRESENT, {"signatures": _DROPPED.findall(sql)})))
    return int(found or 0)


def contract_steps(schema: str, check: Callable[[], Steps[None]]) -> Steps[int]:
    """Drop what compat.sql keeps for older releases (``contract.sql``), locks taken up front,
    and record it; how many functions were dropped.  ``check`` (the fleet's) runs first,
    under the same locks, and raises to refuse."""
    def drop() -> Steps[int]:
        yield from check()
        found = yield from compat_kept_steps(schema)
        yield Query(in_schema(procedures.read(procedures.CONTRACT), schema))
        yield Query(RECORD_CONTRACT, {"script": fingerprint(schema, False),
                                      "schemas": _schemas(schema),
                                      "layout": QUEUE_STORAGE_LAYOUT_VERSION})
        return found

    dropped: int = yield from locked_step(drop, _schemas(schema),
                                          "the contract step")
    return dropped


async def install_queue_storage(conn: psycopg.AsyncConnection[Any],
                                schema: str | None = None) -> str:
    """``install_steps`` on an async connection."""
    return await run_async(conn, install_steps(schema))


def install_queue_storage_sync(conn: psycopg.Connection[Any],
                               schema: str | None = None) -> str:
    """``install_steps`` on a blocking connection (tests' templates, the CLI)."""
    return run_sync(conn, install_steps(schema))


_CANONICAL_BUSY = ("the canonical job tables hold jobs: drain them before switching this "
                   "database to queue storage offline, or switch it live (`awa storage "
                   "prepare`, then `awa storage enter-mixed`)")


def _target(active: str | None, wanted: str | None) -> str:
    """The schema to lay out: the one in use, which a request may only repeat."""
    if active and wanted and active != wanted:
        raise ValidationError(f"this database's queue storage is in schema {active!r}, not "
                              f"{wanted!r}: moving it is not supported; leave out the schema "
                              f"(or give {active!r}), or lay a new database out in {wanted!r}")
    return active or wanted or DEFAULT_SCHEMA


def active_schema_steps() -> Steps[str | None]:
    """The queue-storage schema of this database, or None when canonical serves it."""
    if not first_value((yield Query(HAS_ACTIVE_FN))):
        return None
    name: str | None = first_value((yield Query(ACTIVE_SCHEMA)))
    return name


async def active_schema(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """``active_schema_steps`` on an async connection."""
    return await run_async(conn, active_schema_steps())
