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

# Queues holding running / waiting attempts, each placed and claimed before anything
# else of that queue is placed (so the claim takes exactly those).
ATTEMPT_QUEUES = """
SELECT queue, array_agg(id ORDER BY id) AS ids FROM {stage}.jobs
 WHERE state IN ('running', 'waiting_external') GROUP BY queue ORDER BY queue"""
_ROW = "jsonb_populate_record(NULL::awa.jobs, to_jsonb(s) - 'source'{extra})"
PLACE_FOR_CLAIM = ("SELECT awa.qs_place(" + _ROW.format(extra=""" || jsonb_build_object(
    'state', 'available', 'attempt', s.attempt - 1, 'run_lease', s.run_lease - 1,
    'heartbeat_at', NULL, 'deadline_at', NULL, 'callback_id', NULL,
    'callback_timeout_at', NULL)""") + ") FROM {stage}.jobs s "
                   "WHERE s.id = ANY(%(ids)s) ORDER BY s.id")
# The same attempt, as the Rust core left it: last heartbeat, deadline, state, callback.
RESTORE_ATTEMPT = """
UPDATE awa.jobs j
   SET state = s.state::awa.job_state, heartbeat_at = s.heartbeat_at,
       deadline_at = coalesce(s.deadline_at, j.deadline_at), callback_id = s.callback_id,
       callback_timeout_at = s.callback_timeout_at, callback_filter = s.callback_filter,
       callback_on_complete = s.callback_on_complete, callback_on_fail = s.callback_on_fail,
       callback_transform = s.callback_transform, progress = s.progress,
       metadata = s.metadata
  FROM {stage}.jobs s
 WHERE j.id = s.id AND s.id = ANY(%(ids)s)"""
PLACE_REST = ("SELECT awa.qs_place(" + _ROW.format(extra="") + ") FROM {stage}.jobs s "
              "WHERE s.state NOT IN ('running', 'waiting_external') ORDER BY s.id")
COUNT_STATES = """
SELECT state::text AS state, count(*) AS n FROM awa.jobs GROUP BY state
UNION ALL
SELECT 'dlq', count(*) FROM awa.dlq_entries HAVING count(*) > 0"""

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
