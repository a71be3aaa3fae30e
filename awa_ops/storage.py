"""Which storage engine a database runs, and the operator SQL adapted to it.

Canonical: running attempts are rows of ``awa.jobs_hot``.  Queue storage (the
append-only engine of the troubleshooting guide): running attempts live in
``<schema>.leases`` and unmaterialized receipt claims in
``<schema>.lease_claims``, where ``<schema>`` is named by
``awa.active_queue_storage_schema()`` or ``awa.runtime_storage_backends``.
The seed's queries are kept verbatim in ``sql/``; ``render`` only binds the guide's
``'<placeholder>'`` literals (quoted values), never anything a user typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from awa.statements import run_async
from awa.storage import CANONICAL, describe_layout, fleet_steps, read_engine_for
from awa.storage.engine import ReadEngine
from awa_ops.session import OpsSession, load_sql

QUEUE_STORAGE = "queue_storage"
NO_SCHEMA = "none"
CONTROL_SCHEMA = "awa"

PROBE = load_sql("engine_probe")
ACTIVE_SCHEMA = load_sql("active_queue_storage_schema")
STORAGE_BACKENDS = load_sql("storage_backends")
RELATION_EXISTS = "SELECT to_regclass(%s) IS NOT NULL AS present"
# Asked only once the probe saw the table (a missing relation would fail the plan).
SCHEMA_VERSION = "SELECT max(version) AS schema_version FROM awa.schema_version"


@dataclass(frozen=True)
class DetectedEngine:
    """What ``detect_engine`` found: which engine serves the database and where its running
    attempts live (the storage engine itself, whose reads the checks run, is
    ``storage_engine``'s ``awa.storage.engine.ReadEngine``)."""

    name: str  # canonical | queue_storage | none
    schema: str  # where running attempts live
    schema_version: int | None = None
    # A database laid out by another awa distribution (e.g. the Rust core's
    # `awa migrate`) carries its own version numbers.
    foreign_layout: bool = False

    @property
    def is_queue_storage(self) -> bool:
        return self.name == QUEUE_STORAGE

    @property
    def installed(self) -> bool:
        return self.name != NO_SCHEMA

    def describe(self) -> str:
        if not self.installed:
            return "no awa schema"
        if self.is_queue_storage:
            return f"queue storage (schema {self.schema})"
        return "canonical (schema awa)"


async def detect_engine(session: OpsSession) -> DetectedEngine:
    """The engine in use, asked once per session."""
    cached: DetectedEngine | None = session.cache.get("engine")
    if cached is not None:
        return cached
    probe = await session.fetch_one(PROBE)
    assert probe is not None
    version = None
    if probe["has_schema_version"]:
        row = await session.fetch_one(SCHEMA_VERSION)
        version = row["schema_version"] if row else None
    foreign = bool(probe["has_storage_status"])
    if not probe["has_control_schema"]:
        engine = DetectedEngine(NO_SCHEMA, CONTROL_SCHEMA, None)
    else:
        schema = None
        if probe["has_active_fn"]:
            row = await session.fetch_one(ACTIVE_SCHEMA)
            schema = row and row["active_queue_storage_schema"]
        elif probe["has_backends"]:
            rows = await session.fetch_all(STORAGE_BACKENDS)
            named = [r for r in rows if r["backend"] != CANONICAL]
            if named:
                schema = max(named, key=lambda r: r["updated_at"])["schema_name"]
        if schema:
            found = await session.fetch_one(RELATION_EXISTS, (f"{quote(schema)}.leases",))
            if found and found["present"]:
                engine = DetectedEngine(QUEUE_STORAGE, schema, version, foreign)
            else:
                engine = DetectedEngine(CANONICAL, CONTROL_SCHEMA, version, foreign)
        else:
            engine = DetectedEngine(CANONICAL, CONTROL_SCHEMA, version, foreign)
    session.cache["engine"] = engine
    return engine


async def storage_engine(session: OpsSession) -> ReadEngine:
    """The storage engine whose read side serves this session's job-table reads.

    Its methods run on ``session.conn`` inside ``session.read()``, so each
    refresh stays one short read-only transaction.  A database run by the
    Rust-core awa 0.6 gets its read-only engine (``awa.storage.read_engine_for``):
    every read there is of that layout, and every write is refused.
    """
    cached: ReadEngine | None = session.cache.get("storage_engine")
    if cached is None:
        cached = read_engine_for(await describe_layout(session.conn))
        session.cache["storage_engine"] = cached
    return cached


async def kept_for_older_releases(session: OpsSession) -> int:
    """How many objects the layout keeps for older releases' runtimes (what ``awa migrate
    --contract`` would drop); 0 on a database another distribution laid out."""
    layout = await describe_layout(session.conn)
    if not layout.installed or layout.foreign:
        return 0
    async with session.read():
        return (await run_async(session.conn, fleet_steps(layout))).kept_for_older


def quote(identifier: str) -> str:
    return sql.Identifier(identifier).as_string(None)


def literal(value: Any) -> str:
    return sql.Literal(value).as_string(None)


def render(name: str, *, literals: dict[str, Any] | None = None,
           as_subquery: bool = False) -> str:
    """A named query with the guide's placeholders bound."""
    text = load_sql(name)
    for placeholder, value in (literals or {}).items():
        text = text.replace(f"'<{placeholder}>'", literal(value))
    if as_subquery:
        text = text.strip().rstrip(";")
    return text


async def column_exists(session: OpsSession, schema: str, table: str, column: str) -> bool:
    key = f"column:{schema}.{table}.{column}"
    if key not in session.cache:
        row = await session.fetch_one(load_sql("column_exists"),
                                      {"schema": schema, "table": table, "column": column})
        session.cache[key] = bool(row and row["present"])
    present: bool = session.cache[key]
    return present
