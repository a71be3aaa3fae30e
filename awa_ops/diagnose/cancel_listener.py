"""cancel-listener: can an admin cancel still wake a running handler?

Each live runtime keeps a connection LISTENing on ``awa:cancel``; without it
cancels fall back to heartbeat/deadline detection.  A listener is recognised
by what it listens on, for any distribution: ``pg_stat_activity.query`` of an
idle listening connection is its ``LISTEN "awa:cancel"`` (the Rust-core awa
leaves application_name empty), or by our own runtime's application_name.  A pg_notify
round trip on a private channel proves LISTEN/NOTIFY works on this server.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from psycopg import sql

from awa import config
from awa_ops.diagnose._text import db_ref, plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.runtimes import load_runtimes
from awa_ops.session import OpsSession

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.storage import DetectedEngine


NAME = "cancel-listener"
RUNBOOK = runbook("cancel-listener")
# On a hot standby this check runs on --primary-url, or names the command for the primary.
NEEDS_PRIMARY = "the LISTEN sessions and NOTIFY (a standby cannot NOTIFY)"

LISTENERS = """
SELECT pid, usename, application_name, client_addr, state, backend_start,
       EXTRACT(EPOCH FROM (now() - backend_start))::float8 AS connected_s,
       wait_event_type, wait_event
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND (application_name = %(app)s
       OR (state = 'idle'
           AND query ~* '^[[:space:]]*LISTEN[[:space:]]+"?awa:cancel"?[[:space:]]*;?[[:space:]]*$'))
ORDER BY backend_start
"""
NOTIFY = "SELECT pg_notify(%s, %s), pg_notification_queue_usage() AS queue_usage"


async def notify_round_trip(session: OpsSession) -> tuple[bool, float, float]:
    """(delivered, seconds, notification queue usage) for one NOTIFY on a private channel."""
    channel = f"awa-ops:probe:{uuid.uuid4().hex[:12]}"
    payload = uuid.uuid4().hex
    listener = await OpsSession.open(session.url)
    try:
        await listener.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        loop = asyncio.get_running_loop()
        started = loop.time()
        row = await session.fetch_one(NOTIFY, (channel, payload))
        usage = float(row["queue_usage"]) if row else 0.0

        async def wait() -> bool:
            async for note in listener.conn.notifies():
                if note.channel == channel and note.payload == payload:
                    return True
            return False

        try:
            delivered = await asyncio.wait_for(wait(), config.OPS_NOTIFY_PROBE_TIMEOUT_S)
        except TimeoutError:
            delivered = False
        return delivered, loop.time() - started, usage
    finally:
        await listener.close()


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    runtimes = [r for r in await load_runtimes(session, options.heartbeat_staleness_s)
                if r.live and not r.row["shutting_down"]]
    listeners = await session.fetch_all(LISTENERS, {"app": config.APP_NAME_LISTENER})
    delivered, took, usage = await notify_round_trip(session)
    findings: list[Finding] = []
    if not delivered:
        findings.append(Finding(
            Severity.CRITICAL,
            f"a pg_notify round trip on a private channel was not delivered within "
            f"{secs(config.OPS_NOTIFY_PROBE_TIMEOUT_S)}",
            "LISTEN/NOTIFY is how admin cancels and new-job wake-ups reach workers; without it "
            "cancels wait for heartbeat or deadline rescue and dispatch falls back to polling",
            f"psql {db_ref()} -c 'LISTEN \"awa:cancel\";' and, from a second session, "
            "SELECT pg_notify('awa:cancel', '{}');", runbook=RUNBOOK))
    if usage >= config.OPS_NOTIFY_QUEUE_WARNING:
        findings.append(Finding(
            Severity.WARNING, f"the notification queue is {usage:.0%} full",
            "a listener that stopped reading (or a long transaction) holds notifications; "
            "at 100% every NOTIFY fails and so do enqueues that notify",
            "find the session that LISTENs but does not read: awa-ops diagnose mvcc-horizon",
            runbook=RUNBOOK))
    if runtimes and len(listeners) < len(runtimes):
        missing = len(runtimes) - len(listeners)
        findings.append(Finding(
            Severity.CRITICAL if not listeners else Severity.WARNING,
            f"{plural(len(runtimes), 'live runtime')} but "
            f"{plural(len(listeners), 'listener connection')} "
            f"(LISTEN \"awa:cancel\" or application_name {config.APP_NAME_LISTENER}); {missing} "
            f"without a cancel listener",
            "admin cancels then silently fall back to heartbeat/deadline detection: the cancel is "
            "durable, only the early wake-up of the running handler is lost",
            "restart the worker(s) without a listener; if the pool is saturated, raise its max "
            "size. Search worker logs for 'Failed to create PG listener for admin cancel'",
            [*[r.evidence() for r in runtimes], *listeners][:options.evidence_limit], RUNBOOK))
    if not findings:
        findings.append(Finding(
            Severity.OK, f"{plural(len(listeners), 'listener connection')} for "
                         f"{plural(len(runtimes), 'live runtime')}; pg_notify round trip "
                         f"{took * 1000:.0f} ms; notification queue {usage:.0%} used",
            evidence=listeners[:options.evidence_limit], runbook=RUNBOOK))
    return findings
