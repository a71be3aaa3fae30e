"""The `awa` command: migrate, db, job, queue and dlq (plus groups other modules add).

Every command is a thin shell over one client method, so the CLI, the TUI
and awa-ops share one implementation.  Mistakes (a bad URL, an unmigrated
database, an unknown job id, a bad flag) print one ``error:`` line on stderr
and exit non-zero, never a traceback.

Adding a command group from another module takes one line at the bottom of
this file (``main.add_command(...)``); packages outside ``awa`` contribute
through the ``awa.commands`` entry-point group instead.  Commands use
``@database_url_option``, ``run_client(...)`` and ``@json_option`` from here.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import is_dataclass
from datetime import datetime
from enum import Enum
from importlib.metadata import entry_points
from typing import Any, TypeVar

import click
import psycopg
from rich.console import Console
from rich.table import Table

from awa import config, db, schema
from awa.admin import DlqEntry, QueueStat
from awa.client import AsyncClient
from awa.job import JOB_COLUMNS, AwaError, Job
from awa.lifecycle import DLQ_MANUAL

T = TypeVar("T")
PLUGIN_GROUP = "awa.commands"
EXIT_ERROR = 1
EXIT_USAGE = 2


# --- shared plumbing for every command ---------------------------------------
def _remember_database_url(ctx: click.Context, _param: click.Parameter, value: str | None):
    if value:
        ctx.find_root().ensure_object(dict)["database_url"] = value
    return value


def database_url_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--database-url`` on a group or command; the one given last wins."""
    return click.option(
        "--database-url", metavar="URL", expose_value=False, callback=_remember_database_url,
        help="PostgreSQL URL (default: $DATABASE_URL, else the embedded server).")(command)


def json_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of a table.")(command)


def current_database_url() -> str | None:
    """The ``--database-url`` given anywhere on the command line, if any."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    return (ctx.find_root().obj or {}).get("database_url")


def resolved_database_url() -> str:
    return db.resolve_database_url(current_database_url())


def run_client(operation: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Run ``operation(client)`` against the chosen database and close the client."""
    url = resolved_database_url()

    async def go() -> T:
        # Connect once directly first: an unreachable server fails at once with
        # its own reason, instead of after the pool's connect timeout.
        probe = await db.connect(url, config.APP_NAME_CLI)
        await probe.close()
        client = AsyncClient(url, max_connections=2)
        client._pool = await db.open_pool(url, config.APP_NAME_CLI, max_size=2)
        try:
            return await operation(client)
        finally:
            await client.close()

    return asyncio.run(go())


def to_jsonable(value: Any) -> Any:
    """Jobs, stats and DLQ entries as plain JSON values."""
    if isinstance(value, Job):
        return {name: to_jsonable(getattr(value, name)) for name in JOB_COLUMNS}
    if isinstance(value, QueueStat):
        return to_jsonable(value.to_dict())
    if isinstance(value, DlqEntry):
        return {"job": to_jsonable(value.job), "reason": value.reason,
                "dlq_at": to_jsonable(value.dlq_at),
                "original_run_lease": value.original_run_lease}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(value.__dict__)
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def print_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2, sort_keys=False))


def print_table(table: Table) -> None:
    # Piped output keeps whole cells instead of wrapping to rich's default 80 columns.
    Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200).print(table)


def fail(message: str) -> None:
    """Stop with one ``error:`` line (exit 1)."""
    raise click.ClickException(message)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def _last_error(job: Job[Any]) -> str:
    if not job.errors:
        return ""
    text = str(job.errors[-1].get("error", ""))
    return text if len(text) <= 60 else text[:57] + "..."


# --- the group ---------------------------------------------------------------
class AwaGroup(click.Group):
    """Turns every expected failure into one ``error:`` line and loads plugin commands."""

    _plugins_loaded = False

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for entry in entry_points(group=PLUGIN_GROUP):
            if entry.name in self.commands:
                continue
            try:
                self.add_command(entry.load(), entry.name)
            except Exception as exc:  # a broken plugin must not take `awa` down with it
                click.echo(f"warning: could not load `awa {entry.name}` from {entry.value}: "
                           f"{db.one_line(exc)}", err=True)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is None:
            self._load_plugins()
            command = super().get_command(ctx, name)
        return command

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_plugins()
        return super().list_commands(ctx)

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        code = EXIT_ERROR
        try:
            result = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                  standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
            code = EXIT_USAGE
        except click.ClickException as exc:
            click.echo(f"error: {_one_line(exc.format_message())}", err=True)
            code = exc.exit_code
        except click.Abort:
            click.echo("error: aborted", err=True)
        except AwaError as exc:
            click.echo(f"error: {db.one_line(exc)}", err=True)
        except psycopg.Error as exc:
            click.echo(f"error: database error: {db.one_line(exc)}", err=True)
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            code = 130
        if not standalone_mode:
            return code
        sys.exit(code)


@click.group(cls=AwaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@database_url_option
def main() -> None:
    """awa: a Postgres-native job queue. Inspect and operate it from the shell."""


# --- migrate / db ------------------------------------------------------------
@main.command()
@database_url_option
@click.option("--sql", "print_sql", is_flag=True,
              help="Print the migration SQL instead of applying it.")
def migrate(print_sql: bool) -> None:
    """Create or upgrade the awa schema (safe to run from several processes at once)."""
    if print_sql:
        click.echo(schema.migration_sql())
        return

    async def apply() -> list[int]:
        conn = await db.connect(resolved_database_url(), config.APP_NAME_CLI)
        try:
            return await schema.migrate(conn)
        finally:
            await conn.close()

    applied = asyncio.run(apply())
    if applied:
        click.echo(f"applied migrations {', '.join(map(str, applied))}; schema is at version "
                   f"{schema.current_migration_version()}")
    else:
        click.echo(f"schema already up to date (version {schema.current_migration_version()})")


@main.command("db")
@database_url_option
@json_option
def db_command(as_json: bool) -> None:
    """Which database `awa` uses (password redacted) and its schema version."""
    explicit = current_database_url()
    url = db.resolve_database_url(explicit)

    async def version() -> int | None:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            exists = await (await conn.execute(schema.VERSION_TABLE_EXISTS)).fetchone()
            if not next(iter(exists.values())):
                return None
            row = await (await conn.execute(schema.CURRENT_VERSION_QUERY)).fetchone()
            return next(iter(row.values()))
        finally:
            await conn.close()

    found = asyncio.run(version())
    wanted = schema.current_migration_version()
    if found is None:
        status = "not migrated: run `awa migrate`"
    elif found < wanted:
        status = f"version {found}, behind this code's {wanted}: run `awa migrate`"
    else:
        status = f"version {found} (up to date)"
    info = {"database_url": db.redact(url), "source": db.describe_source(explicit),
            "schema_version": found, "required_version": wanted, "status": status}
    if as_json:
        print_json(info)
        return
    click.echo(f"database: {info['database_url']}")
    click.echo(f"source:   {info['source']}")
    click.echo(f"schema:   {status}")


# --- job ---------------------------------------------------------------------
@main.group()
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
    jobs = run_client(lambda c: c.list_jobs(state=state, kind=kind, queue=queue, limit=limit))
    if as_json:
        print_json(jobs)
        return
    table = Table("id", "kind", "queue", "state", "attempt", "prio", "run_at", "last error",
                  title=f"{len(jobs)} job(s)")
    for j in jobs:
        table.add_row(str(j.id), j.kind, j.queue, j.state.value, f"{j.attempt}/{j.max_attempts}",
                      str(j.priority), _short_time(j.run_at), _last_error(j))
    print_table(table)


def _job_id_argument(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("job_id", type=click.IntRange(min=1), metavar="JOB_ID")(command)


@job.command("dump")
@database_url_option
@_job_id_argument
@json_option
def job_dump(job_id: int, as_json: bool) -> None:
    """Everything about one job: every attempt's error, progress and timestamps."""
    if as_json:
        print_json(run_client(lambda c: c.get_job(job_id)))
    else:
        click.echo(run_client(lambda c: c.dump_job(job_id)))


def _apply_to_job(job_id: int, operation: Callable[[AsyncClient], Awaitable[T | None]],
                  action: str, allowed: str) -> T:
    """Run a one-job operation; when it matched nothing, exit saying the job's actual state."""
    async def go(client: AsyncClient) -> tuple[T | None, str]:
        done = await operation(client)
        if done is not None:
            return done, ""
        found = await client.get_job(job_id)  # raises JobNotFound for an unknown id
        return None, f"job {job_id} is {found.state.value}; only {allowed} jobs can be {action}"

    done, why = run_client(go)
    if done is None:
        fail(why)
    return done


@job.command("cancel")
@database_url_option
@_job_id_argument
def job_cancel(job_id: int) -> None:
    """Cancel a job; a running handler is signalled at once (awa:cancel)."""
    cancelled = _apply_to_job(job_id, lambda c: c.cancel(job_id), "cancelled", "unfinished")
    click.echo(f"cancelled job {job_id} ({cancelled.kind} on {cancelled.queue})")


@job.command("retry")
@database_url_option
@_job_id_argument
def job_retry(job_id: int) -> None:
    """Run a failed or cancelled job again with a fresh attempt budget."""
    retried = _apply_to_job(job_id, lambda c: c.retry(job_id), "retried", "failed or cancelled")
    click.echo(f"job {job_id} is available again on queue {retried.queue}")


@job.command("retry-failed")
@database_url_option
@click.option("--kind", help="Retry failed jobs of this kind.")
@click.option("--queue", help="Retry failed jobs on this queue.")
def job_retry_failed(kind: str | None, queue: str | None) -> None:
    """Retry every failed job of a kind and/or queue."""
    if kind is None and queue is None:
        raise click.UsageError("give --kind or --queue (or both)")
    result = run_client(lambda c: c.retry_failed(kind=kind, queue=queue))
    extra = f"; {result.skipped} left failed (unique key held)" if result.skipped else ""
    click.echo(f"retried {len(result.jobs)} of {result.matched} failed job(s){extra}")


@job.command("discard")
@database_url_option
@click.option("--kind", required=True, help="Delete the failed jobs of this kind.")
def job_discard(kind: str) -> None:
    """Delete the failed jobs of one kind."""
    count = run_client(lambda c: c.discard_failed(kind))
    click.echo(f"discarded {count} failed job(s) of kind {kind}")


# --- queue -------------------------------------------------------------------
@main.group()
@database_url_option
def queue() -> None:
    """Queue depth, lag, pause/resume and drain."""


@queue.command("stats")
@database_url_option
@json_option
def queue_stats(as_json: bool) -> None:
    """Per queue: available, running, failed, completed in the last hour, lag, paused."""
    stats = run_client(lambda c: c.queue_stats())
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
    run_client(lambda c: c.pause_queue(name, paused_by))
    click.echo(f"paused queue {name}")


@queue.command("resume")
@database_url_option
@click.argument("name")
def queue_resume(name: str) -> None:
    """Let workers claim from a paused queue again."""
    run_client(lambda c: c.resume_queue(name))
    click.echo(f"resumed queue {name}")


@queue.command("drain")
@database_url_option
@click.argument("name")
def queue_drain(name: str) -> None:
    """Cancel every job of a queue that is still waiting to run."""
    count = run_client(lambda c: c.drain_queue(name))
    click.echo(f"drained queue {name}: cancelled {count} waiting job(s)")


# --- dlq ---------------------------------------------------------------------
@main.group()
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

    total, per_queue = run_client(go)
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
    entries = run_client(lambda c: c.list_dlq(kind=kind, queue=queue, tag=tag,
                                              before_id=before_id, limit=limit))
    if as_json:
        print_json(entries)
        return
    table = Table("job id", "kind", "queue", "reason", "attempts", "dlq at", "last error",
                  title=f"{len(entries)} DLQ entr{'y' if len(entries) == 1 else 'ies'}")
    for e in entries:
        table.add_row(str(e.job.id), e.job.kind, e.job.queue, e.reason,
                      f"{e.job.attempt}/{e.job.max_attempts}", _short_time(e.dlq_at),
                      _last_error(e.job))
    print_table(table)


@dlq.command("retry")
@database_url_option
@_job_id_argument
@click.option("--queue", help="Send it to another queue.")
@click.option("--priority", type=click.IntRange(config.MIN_PRIORITY, config.MAX_PRIORITY))
def dlq_retry(job_id: int, queue: str | None, priority: int | None) -> None:
    """Send one DLQ job back to work with a fresh attempt budget."""
    retried = run_client(lambda c: c.retry_from_dlq(job_id, queue=queue, priority=priority))
    if retried is None:
        fail(f"job {job_id} is not in the DLQ (see `awa dlq list`)")
    click.echo(f"job {job_id} is {retried.state.value} again on queue {retried.queue}")


def _bulk_filter_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
            click.option("--kind"), click.option("--queue"), click.option("--tag"),
            click.option("--all", "allow_all", is_flag=True,
                         help="Required to act on every entry when no filter is given."))):
        command = option(command)
    return command


def _require_filter(allow_all: bool, *filters: str | None) -> None:
    if not allow_all and all(f is None for f in filters):
        raise click.UsageError("give a filter (--kind/--queue/--tag) or --all to act on every "
                               "entry")


@dlq.command("retry-bulk")
@database_url_option
@_bulk_filter_options
def dlq_retry_bulk(kind: str | None, queue: str | None, tag: str | None,
                   allow_all: bool) -> None:
    """Redrive many DLQ jobs (after the fix shipped)."""
    _require_filter(allow_all, kind, queue, tag)
    count = run_client(lambda c: c.bulk_retry_from_dlq(kind=kind, queue=queue, tag=tag,
                                                       allow_all=allow_all))
    click.echo(f"retried {count} DLQ job(s)")


@dlq.command("purge")
@database_url_option
@_bulk_filter_options
def dlq_purge(kind: str | None, queue: str | None, tag: str | None, allow_all: bool) -> None:
    """Delete DLQ entries for good."""
    _require_filter(allow_all, kind, queue, tag)
    count = run_client(lambda c: c.purge_dlq(kind=kind, queue=queue, tag=tag,
                                             allow_all=allow_all))
    click.echo(f"purged {count} DLQ entr{'y' if count == 1 else 'ies'}")


@dlq.command("move")
@database_url_option
@click.argument("job_id", type=click.IntRange(min=1), required=False, metavar="[JOB_ID]")
@click.option("--kind")
@click.option("--queue")
@click.option("--reason", default=DLQ_MANUAL, show_default=True,
              help="Recorded as the entries' dlq_reason.")
@click.option("--all", "allow_all", is_flag=True,
              help="Required to move every failed job when no filter is given.")
def dlq_move(job_id: int | None, kind: str | None, queue: str | None, reason: str,
             allow_all: bool) -> None:
    """Move failed jobs (one by id, or by filter) into the DLQ."""
    if job_id is not None:
        _apply_to_job(job_id, lambda c: c.move_failed_to_dlq(job_id, reason),
                      "moved to the DLQ", "failed")
        click.echo(f"moved job {job_id} to the DLQ ({reason})")
        return
    if not allow_all and kind is None and queue is None:
        raise click.UsageError("give a JOB_ID, a filter (--kind/--queue) or --all")
    count = run_client(lambda c: c.bulk_move_failed_to_dlq(kind=kind, queue=queue,
                                                          reason=reason, allow_all=allow_all))
    click.echo(f"moved {count} failed job(s) to the DLQ ({reason})")


# --- command groups from other modules: one line each ---------------------------
from awa.runtime.cli import worker_command; main.add_command(worker_command)  # noqa: E402
from awa.cron_cli import cron; main.add_command(cron)  # noqa: E402
from awa.callbacks_cli import callbacks; main.add_command(callbacks)  # noqa: E402
