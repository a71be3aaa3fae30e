"""LISTEN on ``awa:cancel``: flip the flag of the attempt an operator cancelled.

The admin cancel writes the durable state change and sends
``{"job_id": ..., "run_lease": ...}``; the matching running attempt's
``job.is_cancelled()`` turns true so the handler can stop early.  Without
this listener cancellation still holds (the late completion is stale), the
handler just does not learn about it early.  Log texts are the ones the
troubleshooting guide tells operators to search for.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql as pgsql

from awa import config, db

if TYPE_CHECKING:  # pragma: no cover
    from awa.runtime.runtime import Runtime

log = logging.getLogger("awa.runtime.cancel_listener")

CREATE_FAILED = "Failed to create PG listener for admin cancel"
LISTEN_FAILED = "Failed to LISTEN on cancel channel"
TRANSIENT_ERROR = "PG cancel listener error; will retry"

LISTEN_CANCEL = pgsql.SQL("LISTEN {}").format(pgsql.Identifier(config.CANCEL_CHANNEL))


class CancelListener:
    def __init__(self, runtime: "Runtime") -> None:
        self.runtime = runtime
        self.task: asyncio.Task | None = None
        self.listening = asyncio.Event()
        self.retry_s = config.CANCEL_LISTENER_RETRY_MS / 1000.0

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="awa-cancel-listener")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass

    def handle(self, payload: str) -> bool:
        """Flip the flag named by one notification; True when it matched."""
        try:
            data = json.loads(payload)
            key = (int(data["job_id"]), int(data["run_lease"]))
        except (ValueError, KeyError, TypeError):
            log.debug("ignoring malformed cancel notification %r", payload)
            return False
        ctx = self.runtime.in_flight.get(key)
        if ctx is None:
            return False
        ctx.cancel("cancelled by operator")
        return True

    async def _run(self) -> None:
        while True:
            conn = None
            try:
                try:
                    conn = await db.connect(self.runtime.database_url, config.APP_NAME_LISTENER)
                except Exception as exc:
                    log.warning("%s: %s", CREATE_FAILED, db.one_line(exc))
                    raise
                try:
                    await conn.execute(LISTEN_CANCEL)
                except Exception as exc:
                    log.warning("%s: %s", LISTEN_FAILED, db.one_line(exc))
                    raise
                self.listening.set()
                async for note in conn.notifies():
                    self.handle(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listening.clear()
                log.warning("%s: %s", TRANSIENT_ERROR, db.one_line(exc))
            finally:
                if conn is not None:
                    try:
                        await conn.close()
                    except (psycopg.Error, OSError):
                        pass
            await asyncio.sleep(self.retry_s)
