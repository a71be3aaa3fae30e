"""`awa cron list|remove|pause|resume|trigger`: the stored schedules, for operators.

Each command is one client method (``awa.cron.CronMixin``); an unknown name is
one ``error:`` line naming `awa cron list`.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from awa.cli.options import (
    database_url_option,
    fail,
    json_option,
    print_json,
    print_table,
    run_client,
)


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if value else ""


@click.group("cron")
@database_url_option
def cron() -> None:
    """Periodic schedules: list, pause, resume, trigger, remove."""


@cron.command("list")
@database_url_option
@json_option
def cron_list(as_json: bool) -> None:
    """Every stored schedule with its last fire time and pause state."""
    rows = run_client(lambda c: c.list_cron_jobs())
    if as_json:
        print_json(rows)
        return
    table = Table("name", "cron", "timezone", "kind", "queue", "policy", "last enqueued",
                  "paused")
    for r in rows:
        paused = f"since {_when(r['paused_at'])}" + (f" by {r['paused_by']}"
                                                     if r["paused_by"] else "")
        table.add_row(r["name"], r["cron_expr"], r["timezone"], r["kind"], r["queue"],
                      r["missed_fire_policy"], _when(r["last_enqueued_at"]),
                      paused if r["paused"] else "")
    print_table(table)


@cron.command("remove")
@database_url_option
@click.argument("name")
def cron_remove(name: str) -> None:
    """Delete a schedule (a runtime that still declares it stores it again at start)."""
    if not run_client(lambda c: c.delete_cron_job(name)):
        fail(f"no cron job named {name!r}; `awa cron list` shows the schedules")
    click.echo(f"removed cron job {name!r}")


@cron.command("pause")
@database_url_option
@click.argument("name")
@click.option("--by", "paused_by", default=None, help="Who paused it (shown in the list).")
def cron_pause(name: str, paused_by: str | None) -> None:
    """Stop firing a schedule until it is resumed."""
    run_client(lambda c: c.pause_cron_job(name, paused_by=paused_by))
    click.echo(f"paused cron job {name!r}")


@cron.command("resume")
@database_url_option
@click.argument("name")
def cron_resume(name: str) -> None:
    """Fire a paused schedule again (missed slots follow its missed_fire_policy)."""
    run_client(lambda c: c.resume_cron_job(name))
    click.echo(f"resumed cron job {name!r}")


@cron.command("trigger")
@database_url_option
@click.argument("name")
@json_option
def cron_trigger(name: str, as_json: bool) -> None:
    """Enqueue one run of a schedule now, outside its timetable."""
    job = run_client(lambda c: c.trigger_cron_job(name))
    if as_json:
        print_json(job)
        return
    click.echo(f"enqueued job {job.id} ({job.kind} on {job.queue}) from cron job {name!r}")
