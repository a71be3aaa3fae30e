"""The `awa-ops` command: diagnose, exporter, runbook (and generate, added by its module).

Exit status of `diagnose`: 0 ok, 1 warning, 2 critical, 3 could not run.

Settings an operator sets once (today: ``runbook_base_url``, the default of
``generate --runbook-base-url``) come from ``$AWA_RUNBOOK_BASE_URL`` or, without
it, from the TOML file ``$AWA_OPS_CONFIG`` (default
``$XDG_CONFIG_HOME/awa/awa-ops.toml``, i.e. ``~/.config/awa/awa-ops.toml``);
a flag on the command line wins over both.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from awa import config, db
from awa.cli.options import OneLineErrors
from awa.job import AwaError
from awa_ops.diagnose import CHECKS, Options, close_primary, run_all, run_check
from awa_ops.findings import CheckResult, Severity, to_json, worst
from awa_ops.generate_command import generate_command
from awa_ops.render import render_all, render_result
from awa_ops.session import OpsSession

EXIT_COULD_NOT_RUN = int(Severity.ERROR)


def interruptible() -> None:
    """A command that runs until interrupted (``diagnose --watch``, the exporter) must stop on
    SIGINT.  A process can start with SIGINT *ignored*: a background job of a shell without
    job control ignores it, and its children inherit that (CI runners, scripts, ``cmd &``);
    Python then leaves it ignored, and asyncio.run installs its Ctrl-C handling only over
    the default handler.  Such a loop would run on after SIGINT forever; restore the default
    (KeyboardInterrupt, which these commands turn into a clean exit)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def fail(message: str) -> None:
    click.echo(f"awa-ops: {message}", err=True)
    sys.exit(EXIT_COULD_NOT_RUN)


RUNBOOK_BASE_URL_ENV = "AWA_RUNBOOK_BASE_URL"
PRIMARY_URL_ENV = "AWA_PRIMARY_URL"
CONFIG_ENV = "AWA_OPS_CONFIG"


def config_path() -> Path:
    """Where `awa-ops` reads its settings: $AWA_OPS_CONFIG, else the XDG config directory."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "awa" / "awa-ops.toml"


def configured_defaults() -> dict[str, Any]:
    """Option defaults per subcommand from the environment and the config file."""
    settings: dict[str, Any] = {}
    path = config_path()
    if path.is_file():
        try:
            settings = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            fail(f"cannot read {path}: {exc}")
    url = os.environ.get(RUNBOOK_BASE_URL_ENV) or settings.get("runbook_base_url")
    return {"generate": {"runbook_base_url": str(url)}} if url else {}



class OpsGroup(OneLineErrors):
    """Mistakes are one ``error:`` line.

    Usage exits 2 (as click does), other failures "could not run"."""

    error_exit_code = EXIT_COULD_NOT_RUN


@click.group(cls=OpsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="awa-py", prog_name="awa-ops")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Operator tools for awa: scripted diagnostics and a database-side Prometheus exporter."""
    ctx.default_map = {**configured_defaults(), **(ctx.default_map or {})}


@main.command(help="Run CHECK (one of: " + ", ".join(CHECKS) + ", all) and explain what is "
                   "wrong.  Exit status: 0 ok, 1 warning, 2 critical, 3 could not run.")
@click.argument("check", type=click.Choice([*CHECKS, "all"]), metavar="CHECK")
@click.option("--database-url", envvar=db.DATABASE_URL_ENV,
              help="PostgreSQL URL [env: DATABASE_URL].")
@click.option("--queue", help="Only look at this queue.")
@click.option("--min-age", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Ignore conditions younger than this (running attempts, open transactions).")
@click.option("--heartbeat-staleness", type=click.FloatRange(min=0.001), metavar="SECONDS",
              help="The staleness cutoff to judge heartbeats by [default: each runtime's own, "
                   "as its snapshot publishes it, else "
              f"{config.HEARTBEAT_STALENESS_MS / 1000:g}].")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0.001), metavar="SECONDS",
              help="How often runtimes heartbeat; a job is overdue only this long past its "
                   "deadline [default: each runtime's own, else "
              f"{config.HEARTBEAT_INTERVAL_MS / 1000:g}].")
@click.option("--election-interval", type=click.FloatRange(min=0.001), metavar="SECONDS",
              default=config.LEADER_ELECTION_INTERVAL_MS / 1000, show_default=True,
              help="The leader_election_interval your runtimes use.")
@click.option("--rescue-interval", type=click.FloatRange(min=0.001), metavar="SECONDS",
              default=config.HEARTBEAT_RESCUE_INTERVAL_MS / 1000, show_default=True,
              help="The heartbeat_rescue_interval your runtimes use (when rescue acts).")
@click.option("--metrics-url", help="A worker's /metrics URL (enqueue batch sizes and durations).")
@click.option("--primary-url", envvar=PRIMARY_URL_ENV,
              help="When --database-url is a hot standby: the primary, for the checks only it "
                   "can answer (sessions, xmin horizon, locks) [env: AWA_PRIMARY_URL].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", type=click.FloatRange(min=0.5), metavar="SECONDS",
              help="Re-run every SECONDS until interrupted.")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence for OK findings too.")
def diagnose(check: str, database_url: str | None, queue: str | None, min_age: float | None,
             heartbeat_staleness: float | None, heartbeat_interval: float | None,
             election_interval: float, rescue_interval: float, metrics_url: str | None,
             primary_url: str | None, as_json: bool, watch: float | None,
             verbose: bool) -> None:
    options = Options(queue=queue, min_age_s=min_age, heartbeat_staleness_s=heartbeat_staleness,
                      heartbeat_interval_s=heartbeat_interval,
                      election_interval_s=election_interval,
                      rescue_interval_s=rescue_interval, metrics_url=metrics_url,
                      primary_url=primary_url or None)
    try:
        url = db.resolve_database_url(database_url)
    except AwaError as exc:
        fail(db.one_line(exc))
    if watch:
        interruptible()
    try:
        code = asyncio.run(_diagnose(url, check, options, as_json, watch, verbose))
    except KeyboardInterrupt:
        code = 0
    sys.exit(code)


async def _diagnose(url: str, check: str, options: Options, as_json: bool, watch: float | None,
                    verbose: bool) -> int:
    try:
        session = await OpsSession.open(url)
    except AwaError as exc:
        fail(db.one_line(exc))
    console = Console()
    async with session:
        try:
            return await _diagnose_on(session, console, check, options, as_json, watch, verbose)
        finally:
            await close_primary(options)


async def _diagnose_on(session: OpsSession, console: Console, check: str, options: Options,
                       as_json: bool, watch: float | None, verbose: bool) -> int:
    while True:
        results = await (run_all(session, options) if check == "all"
                         else _one(session, check, options))
        if watch:
            console.clear()
        if as_json:
            click.echo(to_json(results))
        elif check == "all":
            render_all(console, results, verbose)
        else:
            render_result(console, results[0], verbose)
        code = int(worst(results))
        if not watch:
            return code
        if session.conn.closed:
            return EXIT_COULD_NOT_RUN
        await asyncio.sleep(watch)


async def _one(session: OpsSession, check: str, options: Options) -> list[CheckResult]:
    return [await run_check(session, check, options)]


@main.command()
@click.option("--database-url", envvar=db.DATABASE_URL_ENV,
              help="PostgreSQL URL [env: DATABASE_URL].")
@click.option("--listen", default=config.EXPORTER_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Address to serve /metrics on.")
@click.option("--heartbeat-staleness", type=click.FloatRange(min=0.001), metavar="SECONDS",
              default=None,
              help="The staleness cutoff to judge heartbeats by [default: the one each queue's "
                   "runtimes publish, else "
                   f"{config.HEARTBEAT_STALENESS_MS / 1000:g}s].")
def exporter(database_url: str | None, listen: str, heartbeat_staleness: float | None) -> None:
    """Serve database-side Prometheus metrics (they keep working when every worker is dead)."""
    from awa_ops.exporter import parse_listen, serve

    try:
        host, port = parse_listen(listen)
        url = db.resolve_database_url(database_url)
    except (ValueError, AwaError) as exc:
        fail(db.one_line(exc))
    interruptible()
    try:
        serve(url, host, port, heartbeat_staleness)
    except (AwaError, OSError) as exc:
        fail(db.one_line(exc))
    except KeyboardInterrupt:
        pass


# --- runbooks ------------------------------------------------------------------------
def runbook_files() -> dict[str, Any]:
    """Every runbook shipped in the package: ``stuck-running``, ``alerts/AwaNoLeader`` ..."""
    root = resources.files("awa_ops") / "runbooks"
    found: dict[str, Any] = {}
    for entry in root.iterdir():
        if entry.name.endswith(".md"):
            found[entry.name[:-3]] = entry
    alerts = root / "alerts"
    if alerts.is_dir():
        for entry in alerts.iterdir():
            if entry.name.endswith(".md") and entry.name != "README.md":
                found[f"alerts/{entry.name[:-3]}"] = entry
    return dict(sorted(found.items()))


@main.command()
@click.argument("name", required=False, metavar="NAME")
def runbook(name: str | None) -> None:
    """Print runbook NAME (a check, e.g. stuck-running, or an alert, e.g. AwaNoLeader);
    without NAME, list them.  They ship inside the package, so this works on any host."""
    books = runbook_files()
    if name is None:
        click.echo("\n".join(books))
        return
    key = name.strip().removesuffix(".md").removeprefix("runbooks/")
    entry = books.get(key) or books.get(f"alerts/{key}")
    if entry is None:
        click.echo(f"awa-ops: no runbook {name!r}; known: {', '.join(books)}", err=True)
        sys.exit(2)
    click.echo(entry.read_text(encoding="utf-8"), nl=False)


main.add_command(generate_command)

if __name__ == "__main__":  # pragma: no cover
    main()
