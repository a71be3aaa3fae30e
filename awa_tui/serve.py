"""``awa serve``: the awa-tui console in a browser, through textual-serve.

Each browser tab gets its own console process (``python -m awa_tui``) on the
server, so it reads the database exactly as the terminal console does.  The
database URL reaches that process through ``DATABASE_URL`` in its
environment, never its command line (where ``ps`` would show a password).
Bound to 127.0.0.1 unless ``--host`` says otherwise: the console can cancel
jobs, so exposing it is a deliberate choice (consider ``--read-only``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import click
from textual_serve.server import Server

from awa import config, db
from awa.cli import database_url_option, resolved_database_url
from awa_tui.app import parse_seconds


def console_command(refresh: str, read_only: bool, min_age: str) -> str:
    """The shell command textual-serve runs for each browser session."""
    args = [sys.executable, "-m", "awa_tui", "--refresh", refresh, "--min-age", min_age]
    if read_only:
        args.append("--read-only")
    return subprocess.list2cmdline(args)


@click.command("serve")
@database_url_option
@click.option("--host", default=config.SERVE_HOST, show_default=True,
              help="Address to bind; anything but loopback exposes operator actions.")
@click.option("--port", default=config.SERVE_PORT, show_default=True, type=click.IntRange(1, 65535))
@click.option("--public-url", default=None, metavar="URL",
              help="The URL browsers use, when behind a proxy.")
@click.option("--refresh", default=str(config.TUI_REFRESH_SECONDS), show_default=True,
              metavar="SECONDS", help="How often each console re-reads its screen.")
@click.option("--read-only", is_flag=True, help="Serve consoles whose actions PostgreSQL refuses.")
@click.option("--min-age", default="0", metavar="SECONDS",
              help="Running screen: hide attempts younger than this.")
def serve_command(host: str, port: int, public_url: str | None, refresh: str, read_only: bool,
                  min_age: str) -> None:
    """Serve the awa-tui console in a browser (textual-serve)."""
    parse_seconds(refresh, "--refresh")
    parse_seconds(min_age, "--min-age")
    os.environ[db.DATABASE_URL_ENV] = resolved_database_url()
    server = Server(console_command(refresh, read_only, min_age), host=host, port=port,
                    title="awa-tui", public_url=public_url)
    server.serve()
