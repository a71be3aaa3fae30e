"""The known queues: the one rule deciding which queues every ops view lists.

The console's Overview, ``awa queue stats``, the awa-ops exporter (whose
``awa_db_queue_depth`` series fill the dashboards' queue picker) all list
exactly these queues, zeros included, so a queue whose jobs all completed
does not vanish from one view while another still shows it.  A queue is
known when any of these names it:

- ``holding``: it holds jobs (depth, running, DLQ, wedged claims);
- ``configured``: an operator configured it (``awa.queue_meta``: paused, ...);
- ``declared``: a runtime declared its descriptor (``awa.queue_descriptors``);
- ``served``: a runtime seen within the history window serves it (its
  snapshot's ``queues``), live runtimes included by definition;
- ``recent``: it completed jobs within the history window (the engine's
  ``recently_completed_queues``, which every view reads, plus what the caller
  already knows: ``queue stats``' hour, the console's throughput window).

It lives in ``awa`` (the bottom layer) so the ``awa`` CLI can use it;
The ops tools import it from here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from awa import config
from awa.storage.engine import OpsReads, RuntimeInstance, StoredDescriptor

DESCRIPTOR_QUEUE = "queue"
# Queues an operator configured (paused, ...): the shared queue_meta table, every layout.
CONFIGURED_QUEUES = "SELECT queue FROM awa.queue_meta ORDER BY queue LIMIT %(limit)s"


def known_queues(*, holding: Iterable[str] = (), configured: Iterable[str] = (),
                 descriptors: Iterable[StoredDescriptor] = (),
                 runtimes: Iterable[RuntimeInstance] = (), recent: Iterable[str] = (),
                 history_s: float = config.OPS_KNOWN_QUEUE_HISTORY_S,
                 limit: int = config.OPS_KNOWN_QUEUE_LIMIT) -> list[str]:
    """Every known queue, sorted; at most ``limit`` (the ones holding jobs kept first)."""
    held = {q for q in holding if q}
    others = set(configured) | set(recent)
    others |= {d.key for d in descriptors if d.type == DESCRIPTOR_QUEUE}
    others |= {q for r in runtimes if r.last_seen_age_s <= history_s for q in r.queues}
    others = {q for q in others if q} - held
    ordered = sorted(held) + sorted(others)
    return sorted(ordered[:limit])


async def read_known_queues(engine: OpsReads, conn: psycopg.AsyncConnection[Any], *,
                            holding: Iterable[str] = (), recent: Iterable[str] = (),
                            runtimes: Iterable[RuntimeInstance] | None = None,
                            history_s: float = config.OPS_KNOWN_QUEUE_HISTORY_S,
                            limit: int = config.OPS_KNOWN_QUEUE_LIMIT) -> list[str]:
    """``known_queues`` with the configured, declared, served and recently completing
    queues read here (four bounded reads; ``runtimes`` when the caller already read the
    registry)."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(CONFIGURED_QUEUES, {"limit": limit})
        configured = [row[0] for row in await cur.fetchall()]
    descriptors = await engine.descriptors(conn)
    if runtimes is None:
        runtimes = await engine.runtime_instances(conn, limit=config.OPS_KNOWN_QUEUE_LIMIT)
    completed = await engine.recently_completed_queues(conn, within_s=history_s, limit=limit)
    return known_queues(holding=holding, configured=configured, descriptors=descriptors,
                        runtimes=runtimes, recent=[*recent, *completed], history_s=history_s,
                        limit=limit)


# --- the one "stranded queue" rule ----------------------------------------------

# States whose jobs wait for a worker of their queue: runnable now, or due to run again
# (a retryable job is promoted by the leader and then claimed by a worker of its queue).
WAITING_STATES = ("available", "retryable")


def has_waiting(depth: Mapping[str, int]) -> bool:
    """Whether a queue's depth (state -> count) holds jobs that need a worker."""
    return any(depth.get(state, 0) > 0 for state in WAITING_STATES)


def unserved_queues(waiting: Iterable[str], serving: Iterable[Collection[str]]) -> list[str]:
    """The queues among ``waiting`` (queues with waiting jobs) that no live runtime serves.

    ``serving``: the queue lists of the live runtimes that are not shutting down (each
    caller judges liveness by its own clock); an empty list serves any queue.  Such a
    queue is stranded: nothing will ever claim its jobs until a worker for it starts --
    the one rule of ``awa health``, ``awa-ops diagnose runtime``, the console's Overview
    and the exporter's ``awa_db_queue_unserved``.
    """
    lists = [set(queues) for queues in serving]
    if any(not queues for queues in lists):
        return []
    served = set().union(*lists)
    return sorted({q for q in waiting if q} - served)
