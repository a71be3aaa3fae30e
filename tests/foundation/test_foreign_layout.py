"""A database laid out by another awa distribution is refused with one line and left unchanged.

The real case is the Rust-core awa 0.6 (``pip install awa-cli==0.6.9`` into a
cached virtualenv, tests/support/rust_awa.py): its ``awa migrate`` writes
``awa.schema_version`` rows 1..40 with its own descriptions.  The fast tests
write such rows by hand into a fresh database; nothing is faked beyond that.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest

import awa
from awa import schema, storage
from support.rust_awa import rust_awa, rust_awa_binary

from .test_cli import assert_one_line_error, awa_cmd

SNAPSHOT = (
    "SELECT version, description, applied_at FROM awa.schema_version ORDER BY version",
    """SELECT n.nspname, c.relname, c.relkind FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
       ORDER BY 1, 2""",
    """SELECT p.oid::regprocedure::text FROM pg_proc p
       JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'awa' ORDER BY 1""",
)


def snapshot(url: str) -> list[list[tuple[Any, ...]]]:
    """awa.schema_version, every relation and every awa function: what "unchanged" means."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [conn.execute(q).fetchall() for q in SNAPSHOT]


def write_foreign_versions(url: str, first_description: str = "Initial schema") -> None:
    """What another distribution's migrate leaves in awa.schema_version: versions 1..40."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(schema.CREATE_VERSION_TABLE)
        conn.execute("INSERT INTO awa.schema_version (version, description) "
                     "SELECT v, CASE WHEN v = 1 THEN %s ELSE 'their migration ' || v END "
                     "FROM generate_series(1, 40) AS v", (first_description,))


def layout(url: str) -> storage.StorageLayout:
    with psycopg.connect(url, autocommit=True) as conn:
        return storage.describe_layout_sync(conn)


def assert_refused_everywhere(url: str, *fragments: str, rust_core_reads: bool = False) -> None:
    """`awa migrate`, `awa queue stats`, `awa job list`, the schema check and a client refuse.

    ``rust_core_reads`` (issue 13): on a Rust-core database our CLI's read commands read it
    through the read-only engine (awa.storage.rust_core) and its writes refuse with one line
    naming the Rust-core CLI command; `awa migrate`, the schema check and a client still refuse.
    """
    before = snapshot(url)
    refused = [["migrate"]] if rust_core_reads else [
        ["migrate"], ["queue", "stats"], ["job", "list", "--json"]]
    for args in refused:
        result = awa_cmd(*args, "--database-url", url)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert_one_line_error(result.stderr, "not by awa-py", "left unchanged", *fragments)
        assert result.stdout == ""
    if rust_core_reads:
        for args in (["queue", "stats"], ["job", "list", "--json"]):
            result = awa_cmd(*args, "--database-url", url)
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        result = awa_cmd("job", "cancel", "1", "--database-url", url)
        assert result.returncode == 1
        assert_one_line_error(result.stderr, "Rust-core awa", "`awa job cancel <id>`")
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(awa.ForeignSchema, match="not by awa-py"):
            schema.ensure_migrated_sync(conn)
        with pytest.raises(awa.ForeignSchema):
            schema.migrate_sync(conn)
    with awa.Client(url) as client:
        with pytest.raises(awa.ForeignSchema):
            client.queue_stats()
        with pytest.raises(awa.ForeignSchema):
            client.migrate()

    async def engine() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            with pytest.raises(awa.ForeignSchema):
                await storage.open_engine(conn)
            with pytest.raises(awa.ForeignSchema):
                await schema.ensure_migrated(conn)
            with pytest.raises(awa.ForeignSchema):
                await schema.migrate(conn)
        finally:
            await conn.close()

    asyncio.run(engine())
    info = awa_cmd("db", "--json", "--database-url", url)
    assert info.returncode == 0, info.stderr
    doc = json.loads(info.stdout)
    assert doc["foreign"] is True and "not by awa-py" in doc["status"]
    assert snapshot(url) == before


def test_foreign_schema_version_rows_are_refused_and_left_alone(empty_database_url):
    url = empty_database_url
    write_foreign_versions(url)
    found = layout(url)
    assert (found.foreign, found.distribution, found.schema_version, found.engine) == (
        True, storage.OTHER, 40, storage.CANONICAL)
    assert found.refusal() is not None
    assert_refused_everywhere(url, "another awa distribution", "schema version 40",
                              "engine canonical")
    # Read-only ops tools may still read it through the guide's own queries.
    with psycopg.connect(url, autocommit=True) as conn:
        assert schema.ensure_migrated_sync(conn, accept_foreign=True) == 40


def test_a_lone_foreign_version_is_not_taken_for_ours(empty_database_url):
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(schema.CREATE_VERSION_TABLE)
        conn.execute("INSERT INTO awa.schema_version (version, description) VALUES (40, 'x')")
    assert layout(empty_database_url).foreign


def test_the_rust_core_first_migration_names_the_rust_core(empty_database_url):
    write_foreign_versions(empty_database_url, storage.RUST_CORE_FIRST_MIGRATION)
    assert layout(empty_database_url).distribution == storage.RUST_CORE
    result = awa_cmd("migrate", "--database-url", empty_database_url)
    assert result.returncode == 1
    assert_one_line_error(result.stderr, "Rust-core awa", "schema version 40")


def test_our_own_layouts(database_url, empty_database_url, test_engine):
    ours = layout(database_url)
    assert (ours.foreign, ours.distribution, ours.engine, ours.schema) == (
        False, storage.OURS, test_engine, "awa")
    assert ours.schema_version == schema.current_migration_version() and ours.refusal() is None
    none = layout(empty_database_url)
    assert (none.installed, none.foreign, none.schema_version) == (False, False, None)
    # A newer awa-py (versions past ours, ours intact) is accepted, as before.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO awa.schema_version (version, description) "
                     "VALUES (%s, 'from the future')", (schema.current_migration_version() + 1,))
        assert not storage.describe_layout_sync(conn).foreign
        assert schema.ensure_migrated_sync(conn) == schema.current_migration_version() + 1


@pytest.mark.engine("canonical")  # names the engine in runtime_storage_backends alone
def test_an_engine_this_code_lacks_is_refused(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO awa.runtime_storage_backends (backend, schema_name, updated_at)"
                     " VALUES ('warp_storage', 'awa_warp', now() + interval '1 second')")
        found = storage.describe_layout_sync(conn)
        assert (found.foreign, found.engine, found.schema) == (False, "warp_storage", "awa_warp")
        with pytest.raises(awa.ForeignSchema, match="upgrade awa-py"):
            schema.ensure_migrated_sync(conn)
    result = awa_cmd("queue", "stats", "--database-url", database_url)
    assert result.returncode == 1
    assert_one_line_error(result.stderr, "'warp_storage'", "upgrade awa-py")


def test_open_engine_decides_once_per_pool(database_url):
    async def go() -> None:
        async with awa.AsyncClient(database_url) as client:
            first = await client._get_engine()
            pool = await client._get_pool()
            assert await storage.open_engine(pool) is first

    asyncio.run(go())


@pytest.mark.slow
def test_a_database_migrated_by_the_rust_core_is_refused_and_unchanged(empty_database_url):
    url, binary = empty_database_url, rust_awa_binary()
    rust_awa(binary, url, "migrate")
    found = layout(url)
    assert found.foreign and found.distribution == storage.RUST_CORE
    assert found.schema_version is not None and found.schema_version >= 40
    assert_refused_everywhere(url, "Rust-core awa", f"schema version {found.schema_version}",
                              "engine canonical", rust_core_reads=True)

    # Routed to the Rust core's queue storage, the line names that engine and its schema.
    rust_awa(binary, url, "storage", "prepare-queue-storage-schema", "--schema", "awa_qs")
    rust_awa(binary, url, "storage", "prepare", "--engine", "queue_storage",
             "--details", json.dumps({"schema": "awa_qs"}))
    rust_awa(binary, url, "storage", "enter-mixed-transition", "--quiesced")
    rust_awa(binary, url, "storage", "finalize")
    routed = layout(url)
    assert (routed.engine, routed.schema) == (storage.QUEUE_STORAGE, "awa_qs")
    assert_refused_everywhere(url, "Rust-core awa", "engine queue_storage in schema awa_qs",
                              rust_core_reads=True)
