"""Installing the queue-storage layout, and the engine-selection hook.

``install_queue_storage`` lays a database out for queue storage: the
canonical migrations first (they own the shared tables: ``awa.queue_meta``,
``awa.job_unique_claims``, ``awa.dlq_entries``, ``awa.cron_jobs``, runtime
and descriptor tables), then ``awa/schema/queue_storage.sql``, which names
the engine in ``awa.runtime_storage_backends`` and replaces the ``awa.jobs``
view with one covering both engines' tables.  Idempotent.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import psycopg

from awa import config
from awa import schema as migrations
from awa.job import ValidationError

DEFAULT_SCHEMA = "awa"
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# Canonical rows present: installing would hide them behind the other engine.
CANONICAL_ROWS = """
SELECT EXISTS (SELECT 1 FROM awa.jobs_hot) OR EXISTS (SELECT 1 FROM awa.scheduled_jobs) AS busy"""
LOCK = "SELECT pg_advisory_xact_lock(%s)"
HAS_ACTIVE_FN = "SELECT to_regprocedure('awa.active_queue_storage_schema()') IS NOT NULL AS present"
ACTIVE_SCHEMA = "SELECT awa.active_queue_storage_schema() AS schema_name"


LAYOUT_VERSION = 2
"""The queue-storage layout this code needs (``awa.qs_layout_version()`` says which a database
has).  Raised with every change to ``queue_storage.sql`` or to a function the engine calls, so
that a database laid out by older code is refused with `awa migrate` as the fix
(``awa.schema.ensure_migrated``) instead of failing at its first statement.  0: laid out before
the version was recorded (no ``awa.qs_layout_version()``); 1: ``awa.qs_insert_plain``, the
short path of ``awa.qs_finalize_plain``; 2: closures in ``lease_claim_closure_batches`` only,
guarded by each partition's exclusion constraint."""

# Written last, in the install's transaction: a layout that has it is complete.
LAYOUT_VERSION_FN = """
CREATE OR REPLACE FUNCTION awa.qs_layout_version() RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT %d $$;"""


@cache
def install_sql() -> str:
    """The layout script (``awa/schema/queue_storage.sql``), the hot-path statements as
    functions (``enqueue.PROCEDURES``, ``execution.PROCEDURES``), then the layout version."""
    # Both are built on this layout.
    from awa.storage.queue_storage import enqueue, execution

    layout = (resources.files(migrations.__name__) / "queue_storage.sql").read_text()
    return (layout + "\n" + "\n".join(p.ddl for p in enqueue.PROCEDURES + execution.PROCEDURES)
            + LAYOUT_VERSION_FN % LAYOUT_VERSION)


def _check_schema(schema: str) -> None:
    if not _IDENTIFIER.match(schema):
        raise ValueError(f"queue-storage schema {schema!r} is not a plain lower-case identifier")
    if schema != DEFAULT_SCHEMA:
        raise ValueError(f"queue storage in schema {schema!r}: only {DEFAULT_SCHEMA!r} is "
                         f"supported so far")


async def install_queue_storage(conn: psycopg.AsyncConnection[Any],
                                schema: str = DEFAULT_SCHEMA) -> None:
    """Lay the database out for queue storage (canonical migrations first); idempotent.

    Refuses a database whose canonical tables hold jobs: they would keep
    running on canonical SQL nobody executes any more.
    """
    _check_schema(schema)
    await migrations.migrate(conn)
    async with conn.transaction():
        await conn.execute(LOCK, (config.ADVISORY_LOCK_MIGRATE,))
        cur = await conn.execute(CANONICAL_ROWS)
        row = await cur.fetchone()
        if row is not None and _first(row):
            raise ValidationError("the canonical job tables hold jobs: drain them before "
                                  "switching this database to queue storage")
        await conn.execute(install_sql())


def install_queue_storage_sync(conn: psycopg.Connection[Any],
                               schema: str = DEFAULT_SCHEMA) -> None:
    """``install_queue_storage`` on a blocking connection (tests' templates, the CLI)."""
    _check_schema(schema)
    migrations.migrate_sync(conn)
    with conn.transaction():
        conn.execute(LOCK, (config.ADVISORY_LOCK_MIGRATE,))
        row = conn.execute(CANONICAL_ROWS).fetchone()
        if row is not None and _first(row):
            raise ValidationError("the canonical job tables hold jobs: drain them before "
                                  "switching this database to queue storage")
        conn.execute(install_sql())


async def active_schema(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """The queue-storage schema of this database, or None when canonical serves it."""
    cur = await conn.execute(HAS_ACTIVE_FN)
    row = await cur.fetchone()
    if row is None or not _first(row):
        return None
    cur = await conn.execute(ACTIVE_SCHEMA)
    row = await cur.fetchone()
    return None if row is None else _first(row)


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
