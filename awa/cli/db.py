"""`awa migrate` and `awa db`: create or upgrade the schema, and say which database is used.

Both read the layout through ``awa.storage.describe_layout``, so a database
laid out by another awa distribution is named as such (and never migrated).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import click
import psycopg

from awa import config, db, schema, storage
from awa.admin import AdminMixin, wrong_state
from awa.batch_operations import BatchOperationsMixin
from awa.cli.options import (
    current_database_url,
    database_url_option,
    fail,
    json_option,
    print_json,
    resolved_database_url,
    run_client,
)
from awa.job import AwaError, JobNotFound
from awa.statements import run_async
from awa.storage import RUST_CORE, StorageLayout, describe_layout, rust_core_engine
from awa.storage.engine import Engine

T = TypeVar("T")


# --- a database run by the Rust-core awa 0.6: read it, refuse writes with its CLI command ---
class ForeignAdmin(AdminMixin, BatchOperationsMixin):
    """The client's admin API over the Rust-core read-only engine, on one read-only connection.

    Reads (list/get/dump job, queue stats, DLQ depth/list) answer from that
    layout; every write, and every batch operation, raises the engine's one line
    naming the Rust-core CLI command (`awa job cancel <id>`).
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any], engine: Engine) -> None:
        self._conn = conn
        self._engine = engine

    async def _get_engine(self) -> Engine:
        return self._engine

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        yield self._conn


def run_admin(operation: Callable[[Any], Awaitable[T]]) -> T:
    """``run_client``, except that a Rust-core database is served by ``ForeignAdmin``."""
    url = resolved_database_url()
    nothing = object()

    async def foreign() -> Any:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            layout = await describe_layout(conn)
            if not (layout.foreign and layout.distribution == RUST_CORE):
                return nothing
            await conn.execute("SET default_transaction_read_only = on")
            return await operation(ForeignAdmin(conn, rust_core_engine(layout)))
        finally:
            await conn.close()

    try:
        result = asyncio.run(foreign())
    except AwaError as exc:
        fail(db.one_line(exc))
    # foreign() has just connected: no second probe (a connection costs a server process).
    return run_client(operation, probe=False) if result is nothing else result


def apply_admin(job_id: int, operation: Callable[[Any], Awaitable[T | None]], action: str,
                allowed: str) -> T:
    """``options.apply_to_job`` through ``run_admin``."""
    async def go(client: Any) -> tuple[T | None, str]:
        try:
            done = await operation(client)
        except JobNotFound:  # cancel/retry raise it when they apply to nothing
            done = None
        if done is not None:
            return done, ""
        found = await client.get_job(job_id)
        return None, wrong_state(job_id, found.state.value, allowed, action)

    done, why = run_admin(go)
    if done is None:
        fail(why)
    return done


@click.command()
@database_url_option
@click.option("--sql", "print_sql", is_flag=True,
              help="Print the migration SQL instead of applying it.")
@click.option("--engine", type=click.Choice(sorted(storage.ENGINES)), default=None,
              help="Storage engine to lay out (default: the database's own; queue_storage "
                   "when new). queue_storage is the append-only, vacuum-aware engine; "
                   "canonical rewrites one row per job.")
@click.option("--queue-storage-schema", "queue_storage_schema", default=None, metavar="NAME",
              help="Schema for a new queue-storage layout's tables (default: "
                   f"{config.DEFAULT_QUEUE_STORAGE_SCHEMA}; an existing layout stays where it "
                   "is). awa.jobs and the control tables stay in schema awa.")
@click.option("--contract", is_flag=True,
              help="The contract step of a rolling upgrade: drop what this layout keeps for "
                   "older releases' runtimes; refused while a live runtime speaks an older "
                   "layout (docs/production.md).")
def migrate(print_sql: bool, engine: str | None, queue_storage_schema: str | None,
            contract: bool) -> None:
    """Create or upgrade the awa schema (safe to run from several processes at once, and
    under a live fleet)."""
    if print_sql:
        click.echo(schema.migration_sql())
        return
    url = resolved_database_url()

    async def apply() -> tuple[list[int], StorageLayout, StorageLayout]:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            before = await describe_layout(conn)
            applied = await storage.migrate(conn, engine, queue_storage_schema)
            return applied, before, await describe_layout(conn)
        finally:
            await conn.close()

    async def contract_step() -> str:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            return await run_async(conn, storage.contract_steps())
        finally:
            await conn.close()

    if contract:
        click.echo(asyncio.run(contract_step()))
        return
    applied, before, after = asyncio.run(apply())
    if before.ahead and engine in (None, before.engine):
        click.echo(before.describe_ahead())
        return
    version = schema.current_migration_version()
    serving = after.describe_engine()
    if applied:
        click.echo(f"applied migrations {', '.join(map(str, applied))}; schema is at version "
                   f"{version}, storage engine {serving}")
    else:
        click.echo(f"schema already up to date (version {version}, storage engine {serving})")


def _status(layout: StorageLayout) -> str:
    refused = layout.refusal()
    if refused is not None:
        return str(refused)
    found, wanted = layout.schema_version, layout.code_version
    if found is None:
        return "not migrated: run `awa migrate`"
    if found < wanted:
        return f"version {found}, behind this code's {wanted}: run `awa migrate`"
    return f"version {found} (up to date)"


@click.command("db")
@database_url_option
@json_option
def db_command(as_json: bool) -> None:
    """Which database `awa` uses (password redacted), its schema version and engine."""
    explicit = current_database_url()
    url = db.resolve_database_url(explicit)

    async def read() -> tuple[StorageLayout, storage.FleetVersions | None]:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            layout = await describe_layout(conn)
            ours = layout.installed and not layout.foreign
            return layout, (await run_async(conn, storage.fleet_steps(layout)) if ours
                            else None)
        finally:
            await conn.close()

    layout, fleet = asyncio.run(read())
    status = _status(layout)
    info: dict[str, Any] = {
        "database_url": db.redact(url), "source": db.describe_source(explicit),
        "schema_version": layout.schema_version, "required_version": layout.code_version,
        "engine": layout.engine, "engine_schema": layout.schema, "foreign": layout.foreign,
        "status": status}
    if fleet is not None:
        info["fleet"] = fleet.groups
        info["kept_for_older_runtimes"] = fleet.kept_for_older
    if as_json:
        print_json(info)
        return
    click.echo(f"database: {info['database_url']}")
    click.echo(f"source:   {info['source']}")
    click.echo(f"schema:   {status}")
    if fleet is not None:
        click.echo(f"fleet:    {fleet.describe()}")
        if fleet.kept_for_older:
            click.echo(f"contract: pending: {fleet.kept_for_older} object(s) kept for older "
                       f"releases' runtimes; `awa migrate --contract` drops them once none "
                       f"is live")
