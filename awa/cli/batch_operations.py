"""`awa batch preview|start|status|cancel`: durable set_priority / move_queue over a filter.

``start`` shows the preview (how many jobs match now, and the first ones) and asks
before it submits, unless ``--yes``; the maintenance leader of the running workers
then does the work in chunks (``awa batch status ID`` follows it).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

from awa import batch_operations
from awa.cli.db import run_admin
from awa.cli.options import database_url_option, fail, json_option, print_json
from awa.storage.engine import BatchOperation


def filter_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--kind", default=None, help="Only jobs of this kind."),
        click.option("--queue", default=None, help="Only jobs of this queue."),
        click.option("--tag", default=None, help="Only jobs carrying this tag."),
        click.option("--state", type=click.Choice(batch_operations.ELIGIBLE_STATES), default=None,
                     help="available or scheduled (default: both)."),
        click.option("--id", "ids", type=int, multiple=True, help="Only these job ids."),
        click.option("--created-after", type=click.DateTime(), default=None,
                     help="Created at or after this time."),
        click.option("--created-before", type=click.DateTime(), default=None,
                     help="Created before this time."),
        click.option("--set-priority", "set_priority", type=click.IntRange(1, 4), default=None,
                     help="The operation: give the matching jobs this priority."),
        click.option("--move-queue", "move_queue", default=None, metavar="QUEUE",
                     help="The operation: move the matching jobs to QUEUE "
                          "(with --priority to change that too)."),
        click.option("--priority", type=click.IntRange(1, 4), default=None,
                     help="With --move-queue: the moved jobs' new priority."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def operation(kind: str | None, queue: str | None, tag: str | None, state: str | None,
              ids: tuple[int, ...], created_after: datetime | None,
              created_before: datetime | None, set_priority: int | None,
              move_queue: str | None,
              priority: int | None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    if (set_priority is None) == (move_queue is None):
        fail("give exactly one operation: --set-priority N or --move-queue QUEUE")
    if set_priority is not None and priority is not None:
        fail("--priority goes with --move-queue; use --set-priority N alone")
    flt = {"kind": kind, "queue": queue, "tag": tag, "state": state,
           "ids": list(ids) or None,
           "created_at_gte": created_after.isoformat() if created_after else None,
           "created_at_lt": created_before.isoformat() if created_before else None}
    if set_priority is not None:
        return "set_priority", flt, {"priority": set_priority}
    return "move_queue", flt, {"queue": move_queue, "priority": priority}


def _describe(op_kind: str, spec: dict[str, Any]) -> str:
    if op_kind == "set_priority":
        return f"set priority {spec['priority']}"
    extra = f" at priority {spec['priority']}" if spec.get("priority") else ""
    return f"move to queue {spec['queue']}{extra}"


def _status_lines(op: BatchOperation) -> list[str]:
    total = op.total_matched
    done = op.processed + op.skipped + op.errored
    progress = f"{done}/{total}" if total is not None else f"{done} (scanning)"
    lines = [f"batch operation {op.id}: {op.state}",
             f"  {_describe(op.op_kind, op.spec)}",
             "  filter: " + (" ".join(f"{k}={v}" for k, v in op.filter.items() if v)
                              or "all jobs"),
             f"  progress: {progress}: {op.processed} changed, {op.skipped} skipped, "
             f"{op.errored} errored"]
    if op.last_error:
        lines.append(f"  last error: {op.last_error}")
    return lines


@click.group("batch")
@database_url_option
def batch_group() -> None:
    """Durable batch operations: re-prioritise or move a backlog by filter."""


@batch_group.command("preview")
@database_url_option
@json_option
@filter_options
def preview_command(as_json: bool, **options: Any) -> None:
    """How many jobs an operation would change now, and the first of them."""
    op_kind, flt, spec = operation(**options)
    count, sample = run_admin(lambda c: c.preview_batch_operation(op_kind, flt, spec))
    if as_json:
        print_json({"total_matched": count, "sample": sample})
        return
    click.echo(f"{_describe(op_kind, spec)}: {count} job(s) match now")
    for job in sample:
        click.echo(f"  {job.id}  {job.kind}  queue={job.queue}  priority={job.priority}  "
                   f"{job.state.value}")


@batch_group.command("start")
@database_url_option
@json_option
@filter_options
@click.option("--all", "allow_all", is_flag=True, help="Allow an empty filter (every job).")
@click.option("--yes", is_flag=True, help="Do not ask: submit after the preview.")
@click.option("--submitted-by", default=None, help="Recorded on the operation.")
def start_command(as_json: bool, allow_all: bool, yes: bool, submitted_by: str | None,
                  **options: Any) -> None:
    """Preview, confirm, then submit; the workers' maintenance leader runs it."""
    op_kind, flt, spec = operation(**options)
    if batch_operations.filter_is_empty(flt) and not allow_all:
        fail("refusing a batch operation over every job without a filter: give --kind, "
             "--queue, --tag, --state, --id or --created-after/--created-before, or --all")
    count, _ = run_admin(lambda c: c.preview_batch_operation(op_kind, flt, spec))
    if not as_json:
        click.echo(f"{_describe(op_kind, spec)}: {count} job(s) match now")
    if not yes and not click.confirm("submit this batch operation?", default=False, err=True):
        fail("not submitted (nothing changed)")
    op = run_admin(lambda c: c.submit_batch_operation(op_kind, flt, spec,
                                                      submitted_by=submitted_by,
                                                      allow_all=allow_all))
    if as_json:
        print_json(op)
        return
    click.echo(f"submitted batch operation {op.id} ({op.state}); "
               f"follow it with `awa batch status {op.id}`")


@batch_group.command("status")
@database_url_option
@json_option
@click.argument("op_id", required=False)
@click.option("--state", type=click.Choice(batch_operations.STATES), default=None,
              help="Without an id: only operations in this state.")
def status_command(as_json: bool, op_id: str | None, state: str | None) -> None:
    """One operation's progress, or the newest operations."""
    if op_id is not None:
        op = run_admin(lambda c: c.get_batch_operation(op_id))
        if as_json:
            print_json(op)
        else:
            click.echo("\n".join(_status_lines(op)))
        return
    ops = run_admin(lambda c: c.list_batch_operations(state=state))
    if as_json:
        print_json(ops)
        return
    if not ops:
        click.echo("no batch operations")
    for op in ops:
        click.echo("\n".join(_status_lines(op)))


@batch_group.command("cancel")
@database_url_option
@json_option
@click.argument("op_id")
def cancel_command(as_json: bool, op_id: str) -> None:
    """Stop an operation at its next chunk; what changed stays changed."""
    op = run_admin(lambda c: c.cancel_batch_operation(op_id))
    if as_json:
        print_json(op)
    else:
        click.echo(f"batch operation {op.id}: cancelling (the runner stops at its next "
                   "chunk)")
