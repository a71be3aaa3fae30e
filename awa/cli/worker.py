"""``awa worker module:client``: run an application's registered client as a process.

The module is imported (the current directory is on the path), its client
(``awa.AsyncClient`` or ``awa.Client``) started on the queues given with
``--queue`` (default: every queue a handler was registered on), and shut
down gracefully on SIGTERM or SIGINT: claiming stops, running handlers get
``--shutdown-timeout-ms`` to finish, whatever still runs is left to rescue.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
import threading
from typing import Any

import click

from awa import config
from awa.cli.options import current_database_url
from awa.client import AsyncClient, Client, clients_built_unconnected
from awa.job import ValidationError
from awa.runtime.executor import HANDLER_THREAD_PREFIX

log = logging.getLogger("awa.worker")


def load_client(target: str) -> AsyncClient:
    """``package.module:attribute`` -> the AsyncClient it names."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise click.UsageError(f"expected MODULE:CLIENT (e.g. myapp.jobs:client), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        with clients_built_unconnected():  # --database-url may re-point the client
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.ClickException(f"cannot import {module_name!r}: {exc}") from None
    obj = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.ClickException(f"module {module_name!r} has no attribute "
                                       f"{attribute!r}") from None
    if isinstance(obj, Client):
        return obj.async_client
    if not isinstance(obj, AsyncClient):
        raise click.ClickException(f"{target} is a {type(obj).__name__}, not an awa.AsyncClient "
                                   "or awa.Client")
    return obj


def parse_queue_option(values: tuple[str, ...]) -> list[tuple[str, int]] | None:
    if not values:
        return None
    out = []
    for value in values:
        name, sep, count = value.rpartition(":")
        if not sep or not name:
            raise click.BadParameter(f"{value!r}: use NAME:MAX_WORKERS, e.g. email:8",
                                     param_hint="--queue")
        try:
            out.append((name, int(count)))
        except ValueError:
            raise click.BadParameter(f"{value!r}: MAX_WORKERS must be a number",
                                     param_hint="--queue") from None
    return out


async def run_worker(client: Any, queues: list[tuple[str, int]] | None,
                     metrics_addr: str | None, shutdown_timeout_ms: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await client.start(queues, metrics_addr=metrics_addr, only_these_queues=True)
    runtime = client.runtime
    log.info("worker %s (pid %d) running queues %s%s", runtime.instance_id, os.getpid(),
             ", ".join(runtime.queues),
             f"; metrics at {runtime.metrics_endpoint.url}" if runtime.metrics_endpoint else "")
    try:
        await stop.wait()
        log.info("shutting down (waiting up to %d ms for running handlers)", shutdown_timeout_ms)
    finally:
        await client.shutdown(shutdown_timeout_ms)
        await client.close()


@click.command("worker")
@click.argument("target", metavar="MODULE:CLIENT")
@click.option("--queue", "queues", multiple=True, metavar="NAME:MAX_WORKERS",
              help="A queue to work on (repeatable); default: the handlers' queues.")
@click.option("--metrics-addr", metavar="HOST:PORT",
              help="Serve Prometheus metrics here (e.g. 127.0.0.1:9464).")
@click.option("--shutdown-timeout-ms", type=click.IntRange(min=0),
              default=config.SHUTDOWN_TIMEOUT_MS, show_default=True,
              help="How long running handlers get to finish on SIGTERM/SIGINT.")
@click.option("--database-url", metavar="URL",
              help="PostgreSQL URL (overrides the client's own and $DATABASE_URL).")
def worker_command(target: str, queues: tuple[str, ...], metrics_addr: str | None,
                   shutdown_timeout_ms: int, database_url: str | None) -> None:
    """Run the handlers registered on MODULE:CLIENT until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = load_client(target)
    url = database_url or current_database_url()
    if url:
        client.use_database_url(url)
    parsed = parse_queue_option(queues)
    if parsed is not None and any(n < 1 for _, n in parsed):
        raise ValidationError("--queue MAX_WORKERS must be at least 1")
    asyncio.run(run_worker(client, parsed, metrics_addr, shutdown_timeout_ms))
    blocked = [t for t in threading.enumerate() if t.name.startswith(HANDLER_THREAD_PREFIX)
               and t.is_alive()]
    if blocked:
        # A plain-def handler stuck in blocking code cannot be interrupted; its
        # attempt is left to rescue, and the process must still exit.
        log.warning("%d sync handler(s) still blocked after shutdown; exiting anyway",
                    len(blocked))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
