"""`awa adopt`: move a database run by the Rust-core awa 0.6.9 into this layout, in place.

    awa adopt --dry-run     what would move, per state and table, and what cannot (why)
    awa adopt               do it (refused while a 0.6.9 runtime is live, unless --force)
    awa adopt --abort       give the database back to 0.6.9
    awa adopt --finalize    drop the kept Rust-core tables (no way back afterwards)
"""

from __future__ import annotations

import asyncio

import click

from awa import adopt as adoption
from awa import config, db
from awa.cli.options import current_database_url, database_url_option, json_option, print_json


def _print(report: adoption.AdoptReport, title: str) -> None:
    click.echo(title)
    click.echo(f"  {'state':<17} {'from':<22} {'to':<22} {'jobs':>8}")
    for state, source, target, n in report.moves:
        click.echo(f"  {state:<17} {source:<22} {target:<22} {n:>8}")
    for table, n in report.tables.items():
        click.echo(f"  {'-':<17} {table:<22} {table:<22} {n:>8}")
    if report.cannot:
        click.echo("cannot move:")
        for state, source, n, reason in report.cannot:
            click.echo(f"  {state:<17} {source:<22} {n:>8}  {reason}")
    click.echo(f"new job ids start after {report.next_id}")
    click.echo(report.states_line())


@click.command("adopt")
@database_url_option
@click.option("--dry-run", "dry", is_flag=True,
              help="Print what would move (per state and table) and what cannot; change nothing.")
@click.option("--abort", "undo", is_flag=True,
              help="Undo an adoption not yet finalized: the database is 0.6.9's again.")
@click.option("--finalize", "final", is_flag=True,
              help="Drop the Rust-core tables kept since adoption (no --abort afterwards).")
@click.option("--force", is_flag=True,
              help="Adopt even though a Rust-core runtime looks live (only if it is gone).")
@click.option("--engine", type=click.Choice(["canonical", "queue_storage"]),
              default=config.DEFAULT_STORAGE_ENGINE, show_default=True,
              help="Our storage engine to adopt into.")
@json_option
def adopt_command(dry: bool, undo: bool, final: bool, force: bool, engine: str,
                  as_json: bool) -> None:
    """Adopt a database laid out by the Rust-core awa 0.6.9 (stop its workers first)."""
    if sum((dry, undo, final)) > 1:
        raise click.UsageError("--dry-run, --abort and --finalize go one at a time")
    url = db.resolve_database_url(current_database_url())
    if undo or final:
        message = asyncio.run(adoption.abort(url) if undo else adoption.finalize(url))
        if as_json:
            print_json({"result": message})
        else:
            click.echo(message)
        return
    if dry:
        report = asyncio.run(adoption.dry_run(url, engine))
        title = f"dry run: would adopt into the {engine} engine (nothing changed)"
        if report.live:
            title += f"; refused now: Rust-core runtime(s) live: {', '.join(report.live)}"
    else:
        done = asyncio.run(adoption.adopt(url, engine, force=force))
        assert done is not None  # a full run (no `until`) reports
        report = done
        title = (f"adopted into the {engine} engine; the Rust-core tables are kept in schema "
                 f"awa_rust_core until `awa adopt --finalize` (`awa adopt --abort` undoes)")
    if as_json:
        print_json(report.as_dict())
    else:
        _print(report, title)
