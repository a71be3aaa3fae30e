"""`awa dlq depth|list|retry|retry-bulk|purge|move`: the dead-letter queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich.table import Table

from awa import config
from awa.bulk_selection import DLQ, FAILED, BulkFilter, Target
from awa.cli.bulk_selection import fingerprint_option, preview_or_confirm, safety_options
from awa.cli.db import apply_admin, run_admin
from awa.cli.options import (
    database_url_option,
    fail,
    job_id_argument,
    json_option,
    last_error,
    print_json,
    print_table,
    short_time,
)
from awa.client import AsyncClient
from awa.lifecycle import DLQ_MANUAL


@click.group()
@database_url_option
def dlq() -> None:
    """The dead-letter queue: depth, list, retry, purge, move."""


@dlq.command("depth")
@database_url_option
@click.option("--queue", help="Only this queue.")
@json_option
def dlq_depth(queue: str | None, as_json: bool) -> None:
    """How many jobs are dead-lettered, in total and per queue."""
    async def go(client: AsyncClient) -> tuple[int, list[tuple[str, int]]]:
        total = await client.dlq_depth(queue=queue)
        per_queue = await client.dlq_depth_by_queue()
        return total, [(q, n) for q, n in per_queue if queue is None or q == queue]

    total, per_queue = run_admin(go)
    if as_json:
        print_json({"total": total, "by_queue": dict(per_queue)})
        return
    click.echo(f"dlq depth: {total}")
    for name, count in per_queue:
        click.echo(f"  {name}: {count}")


@dlq.command("list")
@database_url_option
@click.option("--kind")
@click.option("--queue")
@click.option("--tag")
@click.option("--before-id", type=int, help="Page on: entries older than this job id.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@json_option
def dlq_list(kind: str | None, queue: str | None, tag: str | None, before_id: int | None,
             limit: int, as_json: bool) -> None:
    """Dead-lettered jobs, newest first."""
    entries = run_admin(lambda c: c.list_dlq(kind=kind, queue=queue, tag=tag,
                                              before_id=before_id, limit=limit))
    if as_json:
        print_json(entries)
        return
    table = Table("job id", "kind", "queue", "reason", "attempts", "dlq at", "last error",
                  title=f"{len(entries)} DLQ entr{'y' if len(entries) == 1 else 'ies'}")
    for e in entries:
        table.add_row(str(e.job.id), e.job.kind, e.job.queue, e.reason,
                      f"{e.job.attempt}/{e.job.max_attempts}", short_time(e.dlq_at),
                      last_error(e.job))
    print_table(table)


@dlq.command("retry")
@database_url_option
@job_id_argument
@click.option("--queue", help="Send it to another queue.")
@click.option("--priority", type=click.IntRange(config.MIN_PRIORITY, config.MAX_PRIORITY))
def dlq_retry(job_id: int, queue: str | None, priority: int | None) -> None:
    """Send one DLQ job back to work with a fresh attempt budget."""
    retried = run_admin(lambda c: c.retry_from_dlq(job_id, queue=queue, priority=priority))
    if retried is None:
        fail(f"job {job_id} is not in the DLQ (see `awa dlq list`)")
    click.echo(f"job {job_id} is {retried.state.value} again on queue {retried.queue}")


def _bulk_filter_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
            click.option("--kind"), click.option("--queue"), click.option("--tag"),
            click.option("--reason", help="Only entries dead-lettered for this reason "
                                          "(e.g. terminal_error, max_attempts_exhausted)."),
            fingerprint_option,
            click.option("--all", "allow_all", is_flag=True,
                         help="Required to act on every entry when no filter is given."),
            safety_options)):
        command = option(command)
    return command


def _require_filter(allow_all: bool, *filters: str | None) -> None:
    if not allow_all and all(f is None for f in filters):
        raise click.UsageError("give a filter (--kind/--queue/--tag/--reason/--fingerprint) or "
                               "--all to act on every entry")


def _dlq_targets(verb: str, kind: str | None, queue: str | None, tag: str | None,
                 reason: str | None, fingerprint: str | None, allow_all: bool, dry_run: bool,
                 yes: bool) -> list[Target] | None:
    """The DLQ entries a bulk command would touch, previewed (``--dry-run``) or confirmed;
    None when it stops there."""
    _require_filter(allow_all, kind, queue, tag, reason, fingerprint)
    flt = BulkFilter(DLQ, kind=kind, queue=queue, tag=tag, reason=reason,
                     fingerprint=fingerprint)
    return preview_or_confirm(flt, verb, dry_run=dry_run, yes=yes)


def _one_by_one(reason: str | None, fingerprint: str | None) -> bool:
    """A reason or cause the bulk statements do not filter by: act on exactly the entries
    selected, one by one, instead of by the statement's own filter."""
    return fingerprint is not None or reason is not None


@dlq.command("retry-bulk")
@database_url_option
@_bulk_filter_options
def dlq_retry_bulk(kind: str | None, queue: str | None, tag: str | None, reason: str | None,
                   fingerprint: str | None, allow_all: bool, dry_run: bool, yes: bool) -> None:
    """Redrive many DLQ jobs (after the fix shipped)."""
    targets = _dlq_targets("retry", kind, queue, tag, reason, fingerprint, allow_all, dry_run,
                           yes)
    if targets is None:
        return
    if _one_by_one(reason, fingerprint):
        done, skipped = run_admin(lambda c: c.apply_bulk("retry-dlq", targets))
        click.echo(f"retried {done} DLQ job(s)" + (f"; {skipped} skipped" if skipped else ""))
        return
    count = run_admin(lambda c: c.bulk_retry_from_dlq(kind=kind, queue=queue, tag=tag,
                                                       allow_all=allow_all))
    click.echo(f"retried {count} DLQ job(s)")


@dlq.command("purge")
@database_url_option
@_bulk_filter_options
def dlq_purge(kind: str | None, queue: str | None, tag: str | None, reason: str | None,
              fingerprint: str | None, allow_all: bool, dry_run: bool, yes: bool) -> None:
    """Delete DLQ entries for good."""
    targets = _dlq_targets("purge", kind, queue, tag, reason, fingerprint, allow_all, dry_run,
                           yes)
    if targets is None:
        return
    if _one_by_one(reason, fingerprint):
        count, _ = run_admin(lambda c: c.apply_bulk("purge-dlq", targets))
    else:
        count = run_admin(lambda c: c.purge_dlq(kind=kind, queue=queue, tag=tag,
                                                 allow_all=allow_all))
    click.echo(f"purged {count} DLQ entr{'y' if count == 1 else 'ies'}")


@dlq.command("move")
@database_url_option
@click.argument("job_id", type=click.IntRange(min=1), required=False, metavar="[JOB_ID]")
@click.option("--kind")
@click.option("--queue")
@fingerprint_option
@click.option("--reason", default=DLQ_MANUAL, show_default=True,
              help="Recorded as the entries' dlq_reason.")
@click.option("--all", "allow_all", is_flag=True,
              help="Required to move every failed job when no filter is given.")
@safety_options
def dlq_move(job_id: int | None, kind: str | None, queue: str | None, fingerprint: str | None,
             reason: str, allow_all: bool, dry_run: bool, yes: bool) -> None:
    """Move failed jobs (one by id, or by filter) into the DLQ."""
    if job_id is not None:
        one = job_id
        if dry_run:
            click.echo(f"dry run: would move job {one} to the DLQ if it is failed "
                       "(nothing changed)")
            return
        apply_admin(one, lambda c: c.move_failed_to_dlq(one, reason),
                     "moved to the DLQ", "failed")
        click.echo(f"moved job {job_id} to the DLQ ({reason})")
        return
    if not allow_all and kind is None and queue is None and fingerprint is None:
        raise click.UsageError("give a JOB_ID, a filter (--kind/--queue/--fingerprint) or --all")
    flt = BulkFilter(FAILED, kind=kind, queue=queue, fingerprint=fingerprint)
    targets = preview_or_confirm(flt, "move to the DLQ", dry_run=dry_run, yes=yes)
    if targets is None:
        return
    if fingerprint is not None:
        count, _ = run_admin(lambda c: c.apply_bulk("move-failed", targets, reason=reason))
    else:
        count = run_admin(lambda c: c.bulk_move_failed_to_dlq(kind=kind, queue=queue,
                                                              reason=reason,
                                                              allow_all=allow_all))
    click.echo(f"moved {count} failed job(s) to the DLQ ({reason})")
