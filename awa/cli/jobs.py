"""`awa job list|dump|cancel|retry|retry-failed|discard`: individual jobs."""

from __future__ import annotations

import click
from rich.table import Table

from awa import config
from awa.bulk_selection import FAILED, BulkFilter
from awa.cli.bulk_selection import fingerprint_option, preview_or_confirm, safety_options
from awa.cli.db import apply_admin, run_admin
from awa.cli.options import (
    database_url_option,
    job_id_argument,
    json_option,
    print_json,
    print_table,
    short_time,
)


@click.group()
@database_url_option
def job() -> None:
    """Inspect and act on individual jobs."""


@job.command("list")
@database_url_option
@click.option("--state", type=click.Choice(config.JOB_STATES), help="Only jobs in this state.")
@click.option("--kind", help="Only jobs of this kind.")
@click.option("--queue", help="Only jobs on this queue.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
def job_list(state: str | None, kind: str | None, queue: str | None, limit: int,
             as_json: bool) -> None:
    """The newest jobs, optionally filtered."""
    # The list columns only: never the args (`awa job dump ID` shows one job whole).
    jobs = run_admin(lambda c: c.list_job_rows(state=state, kind=kind, queue=queue,
                                               limit=limit))
    if state == "failed" and kind is None:
        # A failed job moved to the DLQ is no longer a failed job row: say where they are.
        in_dlq = run_admin(lambda c: c.dlq_depth(queue=queue))
        if in_dlq:
            where = f" --queue {queue}" if queue else ""
            click.echo(f"note: {in_dlq} more failed job(s) are in the DLQ: "
                       f"awa dlq list{where}", err=True)
    if as_json:
        print_json(jobs)
        return
    table = Table("id", "kind", "queue", "state", "attempt", "prio", "run_at", "last error",
                  title=f"{len(jobs)} job(s)")
    for j in jobs:
        error = j.last_error or ""
        table.add_row(str(j.id), j.kind, j.queue, j.state, f"{j.attempt}/{j.max_attempts}",
                      str(j.priority), short_time(j.run_at),
                      error if len(error) <= 60 else error[:57] + "...")
    print_table(table)


@job.command("dump")
@database_url_option
@job_id_argument
@json_option
def job_dump(job_id: int, as_json: bool) -> None:
    """Everything about one job: every attempt's error, progress and timestamps."""
    if as_json:
        print_json(run_admin(lambda c: c.get_job(job_id)))
    else:
        click.echo(run_admin(lambda c: c.dump_job(job_id)))


@job.command("cancel")
@database_url_option
@job_id_argument
def job_cancel(job_id: int) -> None:
    """Cancel a job; a running handler is signalled at once (awa:cancel)."""
    cancelled = apply_admin(job_id, lambda c: c.cancel(job_id), "cancelled", "unfinished")
    click.echo(f"cancelled job {job_id} ({cancelled.kind} on {cancelled.queue})")


@job.command("retry")
@database_url_option
@job_id_argument
def job_retry(job_id: int) -> None:
    """Run a failed, cancelled or callback-waiting job again with a fresh attempt budget."""
    retried = apply_admin(job_id, lambda c: c.retry(job_id), "retried",
                          "failed, cancelled or waiting_external")
    click.echo(f"job {job_id} is available again on queue {retried.queue}")


@job.command("retry-failed")
@database_url_option
@click.option("--kind", help="Retry failed jobs of this kind.")
@click.option("--queue", help="Retry failed jobs on this queue.")
@fingerprint_option
@safety_options
def job_retry_failed(kind: str | None, queue: str | None, fingerprint: str | None,
                     dry_run: bool, yes: bool) -> None:
    """Retry every failed job of a kind, queue and/or error fingerprint."""
    if kind is None and queue is None and fingerprint is None:
        raise click.UsageError("give --kind, --queue or --fingerprint (or several)")
    flt = BulkFilter(FAILED, kind=kind, queue=queue, fingerprint=fingerprint)
    targets = preview_or_confirm(flt, "retry", dry_run=dry_run, yes=yes)
    if targets is None:
        return
    if fingerprint is not None:
        done, skipped = run_admin(lambda c: c.apply_bulk("retry-failed", targets))
        extra = f"; {skipped} left failed (unique key held)" if skipped else ""
        click.echo(f"retried {done} of {len(targets)} failed job(s){extra}")
        return
    result = run_admin(lambda c: c.retry_failed(kind=kind, queue=queue))
    extra = f"; {result.skipped} left failed (unique key held)" if result.skipped else ""
    click.echo(f"retried {len(result.jobs)} of {result.matched} failed job(s){extra}")


@job.command("discard")
@database_url_option
@click.option("--kind", required=True, help="Delete the failed jobs of this kind.")
@safety_options
def job_discard(kind: str, dry_run: bool, yes: bool) -> None:
    """Delete the failed jobs of one kind."""
    flt = BulkFilter(FAILED, kind=kind)
    if preview_or_confirm(flt, "discard", dry_run=dry_run, yes=yes) is None:
        return
    count = run_admin(lambda c: c.discard_failed(kind))
    click.echo(f"discarded {count} failed job(s) of kind {kind}")
