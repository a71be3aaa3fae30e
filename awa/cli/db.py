"""`awa migrate` and `awa db`: create or upgrade the schema, and say which database is used.

Both read the layout through ``awa.storage.describe_layout``, so a database
laid out by another awa distribution is named as such (and never migrated).
"""

from __future__ import annotations

import asyncio

import click

from awa import config, db, schema, storage
from awa.cli.options import current_database_url, database_url_option, json_option, print_json
from awa.storage import StorageLayout, describe_layout


@click.command()
@database_url_option
@click.option("--sql", "print_sql", is_flag=True,
              help="Print the migration SQL instead of applying it.")
@click.option("--engine", type=click.Choice(sorted(storage.ENGINES)), default=None,
              help="Storage engine to lay out (default: the database's own; canonical when "
                   "new). queue_storage is the append-only, vacuum-aware engine.")
def migrate(print_sql: bool, engine: str | None) -> None:
    """Create or upgrade the awa schema (safe to run from several processes at once)."""
    if print_sql:
        click.echo(schema.migration_sql())
        return
    url = db.resolve_database_url(current_database_url())

    async def apply() -> tuple[list[int], str]:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            applied = await storage.migrate(conn, engine)
            return applied, (await describe_layout(conn)).engine
        finally:
            await conn.close()

    applied, serving = asyncio.run(apply())
    version = schema.current_migration_version()
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

    async def read() -> StorageLayout:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            return await describe_layout(conn)
        finally:
            await conn.close()

    layout = asyncio.run(read())
    status = _status(layout)
    info = {"database_url": db.redact(url), "source": db.describe_source(explicit),
            "schema_version": layout.schema_version, "required_version": layout.code_version,
            "engine": layout.engine, "engine_schema": layout.schema,
            "foreign": layout.foreign, "status": status}
    if as_json:
        print_json(info)
        return
    click.echo(f"database: {info['database_url']}")
    click.echo(f"source:   {info['source']}")
    click.echo(f"schema:   {status}")
