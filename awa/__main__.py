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
spelling per operation.
"""

from __future__ import annotations

from typing import Any, cast

import click

from awa import schema
from awa.cli import main, run_client
from awa.cli.options import database_url_option, job_id_argument


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
                click.echo(f"-- migration {m.version}: {m.description}\n{m.sql}")
            return
        callback(**options)
    return click.Command("migrate", help=original.help, callback=migrate,
                         params=[*original.params, *ranges])


def build() -> click.Group:
    main.add_command(_migrate_with_ranges())
    # These commands are click.Groups; Group.commands is typed as holding plain Commands.
    queue, job, dlq = (cast(click.Group, main.commands[n]) for n in ("queue", "job", "dlq"))
    main.add_command(queue.commands["stats"], "queue-stats")
    job.add_command(dump_run)
    dlq.add_command(dlq.commands["retry-bulk"], "retry-all")
    main.add_command(storage)
    return main


if __name__ == "__main__":
    build()(prog_name="python -m awa")
