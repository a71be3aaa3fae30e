"""The shapes every background loop of the runtime shares.

Stopping a task, repeating a write every interval, and keeping a LISTEN
connection alive are written once here so the heartbeat, the snapshot, the
dispatchers and both listeners fail, retry and shut down the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import psycopg
from psycopg import sql as pgsql

from awa import config, db

LISTEN = pgsql.SQL("LISTEN {}")

T = TypeVar("T")


async def stop_tasks(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel every task, then wait for each; their cancellation is the expected end."""
    running = [t for t in tasks if t is not None]
    for task in running:
        task.cancel()
    for task in running:
        try:
            await task
        except asyncio.CancelledError:
            pass


class BackgroundLoop:
    """One named task running ``self._run()`` from ``start()`` until ``stop()``."""

    task_name = "awa-loop"
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        await stop_tasks([self.task])

    async def _run(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


async def every(interval_s: float, action: Callable[[], Awaitable[object]], *,
                log: logging.Logger, failed: str,
                on_error: Callable[[psycopg.Error], None] | None = None,
                retry_s: float | None = None) -> None:
    """Run ``action`` after each interval, forever.  A database error is logged
    (``failed`` gets the one-line error) and the action is tried again after
    ``retry_s`` (default: the next interval), so a write the outage held back
    goes out as soon as the database answers."""
    wait_s = interval_s
    while True:
        await asyncio.sleep(wait_s)
        try:
            await action()
            wait_s = interval_s
        except psycopg.Error as exc:
            if on_error is not None:
                on_error(exc)
            log.warning(failed, db.one_line(exc))
            wait_s = min(interval_s, retry_s) if retry_s is not None else interval_s


async def _logged_step(step: Awaitable[T], log: logging.Logger, failed: str | None) -> T:
    try:
        return await step
    except Exception as exc:
        if failed is not None:
            log.warning("%s: %s", failed, db.one_line(exc))
        raise


async def listen_forever(database_url: str, channels: Iterable[str], *,
                         on_listening: Callable[[], None],
                         on_notify: Callable[[psycopg.Notify], None],
                         on_lost: Callable[[Exception], None],
                         log: logging.Logger,
                         connect_failed: str | None = None,
                         listen_failed: str | None = None,
                         retry_s: float = config.CANCEL_LISTENER_RETRY_MS / 1000.0,
                         application_name: str = config.APP_NAME_LISTENER) -> None:
    """LISTEN on ``channels`` over a dedicated connection, reconnecting forever.

    ``on_lost`` hears every failure (connecting, LISTEN, or the connection
    dying later); ``connect_failed`` / ``listen_failed``, when given, are
    logged first for the step that failed.  Notifications sent while the
    connection is down are lost, so ``on_listening`` runs after each
    (re)connect.
    """
    channels = list(channels)
    while True:
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            connected = await _logged_step(db.connect(database_url, application_name),
                                           log, connect_failed)
            conn = connected
            for channel in channels:
                await _logged_step(connected.execute(LISTEN.format(pgsql.Identifier(channel))),
                                   log, listen_failed)
            on_listening()
            async for note in connected.notifies():
                on_notify(note)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            on_lost(exc)
        finally:
            if conn is not None:
                try:
                    await conn.close()
                except Exception:  # closing a broken connection may fail again
                    pass
        await asyncio.sleep(retry_s)
