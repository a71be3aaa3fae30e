"""`awa queue stats|pause|resume|drain`: queue depth, lag and flow control."""

from __future__ import annotations

import sys

import click
from rich.table import Table

from awa.cli.bulk_selection import safety_options
from awa.cli.db import run_admin
from awa.cli.options import database_url_option, json_option, print_json, print_table


@click.group()
@database_url_option
def queue() -> None:
    """Queue depth, lag, pause/resume and drain."""


@queue.command("stats")
@database_url_option
@json_option
def queue_stats(as_json: bool) -> None:
    """Per queue: available, running, failed, completed in the last hour, lag, paused."""
    stats = run_admin(lambda c: c.queue_stats())
    if as_json:
        print_json(stats)
        return
    table = Table("queue", "available", "running", "scheduled", "retryable", "waiting",
                  "failed", "done 1h", "lag s", "paused", title="queues")
    for s in stats:
        lag = "" if s.lag_seconds is None else f"{s.lag_seconds:.1f}"
        table.add_row(s.queue, str(s.available), str(s.running), str(s.scheduled),
                      str(s.retryable), str(s.waiting_external), str(s.failed),
                      str(s.completed_last_hour), lag, "yes" if s.paused else "")
    if not stats:
        click.echo("no queues yet")
        return
    print_table(table)


@queue.command("pause")
@database_url_option
@click.argument("name")
@click.option("--by", "paused_by", help="Who paused it (recorded in awa.queue_meta).")
def queue_pause(name: str, paused_by: str | None) -> None:
    """Stop workers claiming from a queue (running jobs finish)."""
    run_admin(lambda c: c.pause_queue(name, paused_by))
    click.echo(f"paused queue {name}")


@queue.command("resume")
@database_url_option
@click.argument("name")
def queue_resume(name: str) -> None:
    """Let workers claim from a paused queue again."""
    run_admin(lambda c: c.resume_queue(name))
    click.echo(f"resumed queue {name}")


@queue.command("drain")
@database_url_option
@click.argument("name")
@safety_options
def queue_drain(name: str, dry_run: bool, yes: bool) -> None:
    """Cancel every job of a queue that is still waiting to run."""
    if dry_run or (not yes and sys.stdin.isatty() and sys.stdout.isatty()):
        stats = {s.queue: s for s in run_admin(lambda c: c.queue_stats())}
        waiting = stats[name].total_queued + stats[name].waiting_external \
            if name in stats else 0
        if dry_run:
            click.echo(f"dry run: would cancel {waiting} waiting job(s) of queue {name} "
                       "(available, scheduled, retryable, waiting_external; nothing changed)")
            return
        if not click.confirm(f"cancel {waiting} waiting job(s) of queue {name}?",
                             default=False):
            click.echo("nothing changed")
            return
    count = run_admin(lambda c: c.drain_queue(name))
    click.echo(f"drained queue {name}: cancelled {count} waiting job(s)")
