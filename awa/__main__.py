"""``python -m awa``: the ``awa`` command, with awa-pg 0.6.9's spellings as well.

awa-pg 0.6.9 shipped its CLI as ``python -m awa``; scripts and runbooks call
it that way.  This is the same click application as the ``awa`` console
script (awa/cli), plus the reference's names it lacks:

    python -m awa queue-stats                       (= awa queue stats)
    python -m awa job dump-run ID [--attempt N]
    python -m awa dlq retry-all [--kind|--queue|--tag|--all]   (= awa dlq retry-bulk)
    python -m awa storage status
    python -m awa migrate --sql [--from V] [--to V] [--version V]

They are added here, not in awa/cli, so the ``awa`` command keeps one
spelling per operation.  As in 0.6.9, ``python -m awa`` takes the database
from ``--database-url`` alone (exit 1 "--database-url is required." before
anything connects) and ``job retry-failed`` takes exactly one filter; the
``awa`` command also reads ``$DATABASE_URL`` (else the embedded server) and
combines filters.
"""

from __future__ import annotations

from typing import Any, cast

import click

from awa import schema
from awa.cli import fail, main, run_client
from awa.cli.options import URL_REQUIRED, database_url_option, job_id_argument
from awa.schema.catalogue import migration_header

HELP = "Awa job queue CLI: inspect and operate the Postgres-native job queue."
URL_HELP = ("PostgreSQL connection URL. Required for all commands except "
            "migrate --sql/--version/--from/--to.")
EXACTLY_ONE_FILTER = "Specify exactly one of --kind or --queue (or --fingerprint)"


@click.command("dump-run")
@database_url_option
@job_id_argument
@click.option("--attempt", type=int, default=None,
              help="Attempt number to inspect (default: the current attempt).")
def dump_run(job_id: int, attempt: int | None) -> None:
    """Dump one attempt of a job."""
    click.echo(run_client(lambda c: c.dump_run(job_id, attempt)))


@click.group()
@database_url_option
def storage() -> None:
    """Storage transition management (this version serves the canonical engine)."""


@storage.command("status")
@database_url_option
def storage_status() -> None:
    """Show the current storage transition state (JSON)."""
    click.echo(run_client(lambda c: c.storage_status()))


def _migrate_with_ranges() -> click.Command:
    """``migrate`` (every option of ``awa migrate``) also taking awa-pg 0.6.9's
    --from/--to/--version with --sql."""
    original = main.commands["migrate"]
    assert original.callback is not None
    callback = original.callback
    ranges = [
        click.Option(["--from", "from_version"], type=int, default=None,
                     help="With --sql: only migrations after this version."),
        click.Option(["--to", "to_version"], type=int, default=None,
                     help="With --sql: only migrations up to this version."),
        click.Option(["--version", "version"], type=int, default=None,
                     help="With --sql: one migration version."),
    ]

    def migrate(from_version: int | None, to_version: int | None, version: int | None,
                **options: Any) -> None:
        if version is not None or from_version is not None or to_version is not None:
            if version is not None:
                from_version, to_version = version - 1, version
            picked = schema.migrations_range(from_version or 0,
                                             to_version or schema.current_migration_version())
            for m in picked:
                click.echo(f"{migration_header(m)}\n{m.sql}")
            return
        callback(**options)
    return click.Command("migrate", help=original.help, callback=migrate,
                         params=[*original.params, *ranges])


def _retry_failed_one_filter(original: click.Command) -> click.Command:
    """``job retry-failed`` refusing none or several filters before connecting (0.6.9)."""
    assert original.callback is not None
    callback = original.callback

    def retry_failed(**options: Any) -> None:
        given = [n for n in ("kind", "queue", "fingerprint") if options.get(n) is not None]
        if len(given) != 1:
            fail(EXACTLY_ONE_FILTER)
        callback(**options)
    return click.Command("retry-failed", help=original.help, callback=retry_failed,
                         params=original.params)


def _say_url_required(command: click.Command) -> None:
    """--database-url's help as it is here (no $DATABASE_URL, no embedded server)."""
    for param in command.params:
        if isinstance(param, click.Option) and param.name == "database_url":
            param.help = URL_HELP
    for sub in getattr(command, "commands", {}).values():
        _say_url_required(sub)


def build() -> click.Group:
    main.help = HELP
    main.add_command(_migrate_with_ranges())
    # These commands are click.Groups; Group.commands is typed as holding plain Commands.
    queue, job, dlq = (cast(click.Group, main.commands[n]) for n in ("queue", "job", "dlq"))
    job.add_command(_retry_failed_one_filter(job.commands["retry-failed"]))
    main.add_command(queue.commands["stats"], "queue-stats")
    job.add_command(dump_run)
    dlq.add_command(dlq.commands["retry-bulk"], "retry-all")
    main.add_command(storage)
    _say_url_required(main)
    return main


if __name__ == "__main__":
    build()(prog_name="python -m awa", obj={URL_REQUIRED: True})
