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

import psycopg

from awa import config, db
from awa.runtime.context import JobContext
from awa.runtime.loops import BackgroundLoop, listen_forever

log = logging.getLogger("awa.runtime.cancel_listener")

CREATE_FAILED = "Failed to create PG listener for admin cancel"
LISTEN_FAILED = "Failed to LISTEN on cancel channel"
TRANSIENT_ERROR = "PG cancel listener error; will retry"


class CancelListener(BackgroundLoop):
    task_name = "awa-cancel-listener"

    def __init__(self, url: str, in_flight: dict[tuple[int, int], JobContext]) -> None:
        # The direct URL when there is one (a pooler's LISTEN reaches nobody).
        self.url = url
        self.in_flight = in_flight
        self.listening = asyncio.Event()
        self.retry_s = config.CANCEL_LISTENER_RETRY_MS / 1000.0

    def handle(self, payload: str) -> bool:
        """Flip the flag named by one notification; True when it matched."""
        try:
            data = json.loads(payload)
            key = (int(data["job_id"]), int(data["run_lease"]))
        except (ValueError, KeyError, TypeError):
            log.debug("ignoring malformed cancel notification %r", payload)
            return False
        ctx = self.in_flight.get(key)
        if ctx is None:
            return False
        ctx.cancel("cancelled by operator")
        return True

    async def _run(self) -> None:
        await listen_forever(self.url, [config.CANCEL_CHANNEL],
                             on_listening=self.listening.set,
                             on_notify=self._notified,
                             on_lost=self._lost, log=log, connect_failed=CREATE_FAILED,
                             listen_failed=LISTEN_FAILED, retry_s=self.retry_s)

    def _notified(self, note: psycopg.Notify) -> None:
        self.handle(note.payload)

    def _lost(self, exc: Exception) -> None:
        self.listening.clear()
        log.warning("%s: %s", TRANSIENT_ERROR, db.one_line(exc))
