"""``awa adopt`` into the queue-storage engine, through that engine's own write paths.

Nothing here writes a queue-storage table directly:

- a job in a state the ``awa.jobs`` view can write (available, scheduled,
  retryable, completed, failed, cancelled) is put where that state lives by
  ``awa.qs_place``, the function the view's ``INSTEAD OF UPDATE`` trigger
  uses, with its own id, attempt, run lease, errors, progress, metadata and
  timestamps;
- a running or waiting_external job can only start by a claim on this
  engine: it is placed available with its attempt and run lease one lower,
  claimed by ``claim_batch`` (which gives them back), then given its last
  heartbeat, deadline, progress and, for a callback wait, its state and
  callback columns through an ``UPDATE awa.jobs`` of that same attempt (the
  view materializes its lease).  A running one thus becomes an attempt whose
  heartbeat is as old as the Rust core left it: an orphan the heartbeat
  rescue takes;
- the DLQ, unique claims, cron, queue_meta and descriptors are the tables
  both engines share (the engine-neutral ``awa.storage.common.adopt``).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa import config
from awa.job import AwaError
from awa.storage.common import adopt as shared
from awa.storage.queue_storage.procedures import named

ATTEMPT_QUEUES = named("adopt.sql", "attempt_queues")
PLACE_FOR_CLAIM = named("adopt.sql", "place_for_claim")
RESTORE_ATTEMPT = named("adopt.sql", "restore_attempt")
PLACE_REST = named("adopt.sql", "place_rest")
COUNT_STATES = named("adopt.sql", "count_states")

_q = shared.staged  # the staging schema's name as an identifier, as every adopter quotes it


class QueueStorageAdopt:
    """``awa.storage.rust_core.adopt.AdoptTarget`` for a queue-storage engine (in schema awa)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def adopt_staged(self, conn: psycopg.AsyncConnection[Any], staging: str,
                           next_id: int) -> None:
        if getattr(self.engine, "schema", "awa") != "awa":
            raise AwaError("awa adopt lays queue storage out in schema awa; this database "
                           "keeps it elsewhere: adopt into a database migrated without "
                           "--queue-storage-schema")
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_q(ATTEMPT_QUEUES, stage=staging))
            attempts = await cur.fetchall()
        for group in attempts:
            ids = list(group["ids"])
            await conn.execute(_q(PLACE_FOR_CLAIM, stage=staging), {"ids": ids})
            claimed = await self.engine.claim_batch(conn, group["queue"], len(ids),
                                                    config.DEADLINE_DURATION_MS)
            if sorted(j.id for j in claimed) != ids:
                raise AwaError(f"adopting the attempts of queue {group['queue']!r}: the claim "
                               f"took {sorted(j.id for j in claimed)}, not {ids}")
            await conn.execute(_q(RESTORE_ATTEMPT, stage=staging), {"ids": ids})
        await conn.execute(_q(PLACE_REST, stage=staging))
        await shared.adopt_shared_tables(conn, staging, next_id)

    async def adopted_counts(self, conn: psycopg.AsyncConnection[Any]
                             ) -> tuple[dict[str, int], dict[str, int]]:
        return await shared.counts(conn, COUNT_STATES)
