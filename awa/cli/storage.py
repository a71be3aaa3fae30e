"""`awa storage`: the live switch of storage engines, canonical -> queue storage.

    awa storage status                 where the database is, and what blocks the next step
    awa storage prepare [--dry-run]    choose the queue-storage schema (--schema); the dry run
                                       says what this and enter-mixed would do, and what
                                       blocks them now
    awa storage enter-mixed            lay queue storage out; new jobs go to it; runtimes claim
                                       from both; canonical drains
    awa storage finalize [--dry-run]   once canonical holds no live job: queue storage alone
    awa storage abort [--dry-run]      the way back: new jobs to canonical, queue storage
                                       drains; run again to end at canonical

Each step is one short transaction (enter-mixed first lays the layout out, step by step
under bounded locks); a refused step exits 1 with one line naming its blockers.
docs/production.md, "Choosing and switching storage engines", is the guide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from awa import config, db
from awa.cli.options import (
    database_url_option,
    fail,
    json_option,
    print_json,
    resolved_database_url,
)
from awa.job import AwaError
from awa.statements import Steps, run_async
from awa.storage import StorageLayout, describe_layout, transition_status
from awa.storage import transition as tr


def _run(steps: Callable[[StorageLayout], Steps[str]]) -> str:
    url = resolved_database_url()

    async def go() -> str:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            await conn.set_autocommit(True)
            layout = await describe_layout(conn)
            refused = layout.refusal()
            if refused is not None:
                raise refused
            return await run_async(conn, steps(layout))
        finally:
            await conn.close()

    try:
        return asyncio.run(go())
    except AwaError as exc:
        fail(db.one_line(exc))


@click.group("storage")
def storage_group() -> None:
    """The live switch of storage engines (canonical -> queue storage), and its status."""


@storage_group.command("status")
@database_url_option
@json_option
def status_command(as_json: bool) -> None:
    """Where the database is in the switch, and what blocks the next step."""
    url = resolved_database_url()

    async def go() -> Any:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            await conn.set_autocommit(True)
            return await transition_status(conn)
        finally:
            await conn.close()

    try:
        status = asyncio.run(go())
    except AwaError as exc:
        fail(db.one_line(exc))
    if status is None:
        fail("this database's schema is older than this code: run `awa migrate` first")
    if as_json:
        print_json(status.report(datetime.now(UTC)))
        return
    click.echo(status.describe())
    click.echo(f"state:    {status.state.state} (epoch {status.state.epoch}, for "
               f"{status.state.in_state_s:.0f}s)")
    click.echo(f"canonical live jobs: {sum(status.canonical_backlog.values())}; queue storage "
               f"live jobs: {status.queue_storage_backlog}")
    click.echo(f"live runtimes: {status.capability_counts or 'none'}")


@storage_group.command("prepare")
@database_url_option
@click.option("--schema", default=None, metavar="NAME",
              help="Schema for queue storage's tables (default: "
                   f"{config.DEFAULT_QUEUE_STORAGE_SCHEMA}).")
@click.option("--dry-run", is_flag=True, help="Say what would happen and what blocks it; "
                                              "change nothing.")
def prepare_command(schema: str | None, dry_run: bool) -> None:
    """canonical -> prepared: choose the queue-storage schema."""
    click.echo(_run(lambda layout: tr.prepare_steps(layout, schema, dry_run)))


@storage_group.command("enter-mixed")
@database_url_option
def enter_mixed_command() -> None:
    """prepared -> mixed_transition: new jobs go to queue storage; canonical drains."""
    click.echo(_run(tr.enter_mixed_steps))


@storage_group.command("finalize")
@database_url_option
@click.option("--dry-run", is_flag=True, help="Check only.")
def finalize_command(dry_run: bool) -> None:
    """mixed_transition -> active, once canonical holds no live job."""
    click.echo(_run(lambda layout: tr.finalize_steps(layout, dry_run)))


@storage_group.command("abort")
@database_url_option
@click.option("--dry-run", is_flag=True, help="Check only.")
def abort_command(dry_run: bool) -> None:
    """The way back: mixed_transition -> aborting -> canonical (run again once queue storage
    has drained)."""
    click.echo(_run(lambda layout: tr.abort_steps(layout, dry_run)))
