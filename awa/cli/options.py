"""What every `awa` command shares: the database URL, --json, output and error handling.

Commands use ``@database_url_option``, ``run_client(...)`` and ``@json_option``
from here.  Mistakes (a bad URL, an unmigrated or foreign database, an unknown
job id, a bad flag) print one ``error:`` line on stderr and exit non-zero,
never a traceback: ``AwaGroup.main`` turns them into that line.
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
from typing import Any, NoReturn, TypeVar

import click
import psycopg
from rich.console import Console
from rich.table import Table

from awa import config, db
from awa.admin import DlqEntry, QueueStat
from awa.client import AsyncClient
from awa.job import JOB_COLUMNS, AwaError, Job

T = TypeVar("T")
PLUGIN_GROUP = "awa.commands"
EXIT_ERROR = 1
EXIT_USAGE = 2
CLI_MAX_CONNECTIONS = 2


# --- the database URL -----------------------------------------------------------
def _remember_database_url(ctx: click.Context, _param: click.Parameter,
                           value: str | None) -> str | None:
    if value:
        ctx.find_root().ensure_object(dict)["database_url"] = value
    return value


def database_url_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--database-url`` on a group or command; the one given last wins."""
    return click.option(
        "--database-url", metavar="URL", expose_value=False, callback=_remember_database_url,
        help="PostgreSQL URL (default: $DATABASE_URL, else the embedded server).")(command)


def current_database_url() -> str | None:
    """The ``--database-url`` given anywhere on the command line, if any."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    url: str | None = (ctx.find_root().obj or {}).get("database_url")
    return url


# Set in the root context's obj by ``python -m awa``: as in awa-pg 0.6.9, a command that
# needs the database takes it from --database-url alone (no $DATABASE_URL, no embedded
# server), else exits 1 with this line.
URL_REQUIRED = "database_url_required"
URL_REQUIRED_ERROR = "--database-url is required."


def resolved_database_url() -> str:
    explicit = current_database_url()
    ctx = click.get_current_context(silent=True)
    if explicit is None and ctx is not None and (ctx.find_root().obj or {}).get(URL_REQUIRED):
        fail(URL_REQUIRED_ERROR)
    return db.resolve_database_url(explicit)


def run_client(operation: Callable[[AsyncClient], Awaitable[T]], *, probe: bool = True) -> T:
    """Run ``operation(client)`` against the chosen database and close the client.
    ``probe=False``: the caller has just connected to it (``db.run_admin``)."""
    url = resolved_database_url()

    async def go() -> T:
        # Connect once directly first: an unreachable server or a malformed URL fails at
        # once with "cannot connect" and its own reason, before any pool exists.
        if probe:
            conn = await db.connect(url, config.APP_NAME_CLI)
            await conn.close()
        client = AsyncClient(url, max_connections=CLI_MAX_CONNECTIONS,
                             application_name=config.APP_NAME_CLI)
        try:
            return await operation(client)
        finally:
            await client.close()

    return asyncio.run(go())


def apply_to_job(job_id: int, operation: Callable[[AsyncClient], Awaitable[T | None]],
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


# --- output ------------------------------------------------------------------------
def json_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of a table.")(command)


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


def short_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def last_error(job: Job[Any]) -> str:
    if not job.errors:
        return ""
    text = str(job.errors[-1].get("error", ""))
    return text if len(text) <= 60 else text[:57] + "..."


def job_id_argument(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("job_id", type=click.IntRange(min=1), metavar="JOB_ID")(command)


# --- errors ------------------------------------------------------------------------
def fail(message: str) -> NoReturn:
    """Stop with one ``error:`` line (exit 1)."""
    raise click.ClickException(message)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class OneLineMain:
    """A click command whose expected failures are one ``error:`` line, never a traceback.

    ``usage_exit_code`` / ``error_exit_code`` are what a usage mistake and any
    other expected failure exit with (``awa-ops`` exits "could not run" for
    the latter, so a failure never reads as a warning).
    """

    usage_exit_code = EXIT_USAGE
    error_exit_code = EXIT_ERROR

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        code = self.error_exit_code
        try:
            result = super().main(  # type: ignore[misc]  # click.Command's, via the MRO
                args=args, prog_name=prog_name, complete_var=complete_var,
                standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
            code = self.usage_exit_code
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


class OneLineErrors(OneLineMain, click.Group):
    """A command group whose expected failures are one ``error:`` line (``OneLineMain``)."""


class OneLineCommand(OneLineMain, click.Command):
    """A single command whose expected failures are one ``error:`` line (``OneLineMain``)."""


class AwaGroup(OneLineErrors):
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
