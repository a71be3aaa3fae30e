"""``awa adopt`` into the canonical engine: staged Rust-core rows into jobs_hot / scheduled_jobs.

The staged tables (``awa.storage.rust_core.adopt``) carry our column set, so
each row is written once, with its id, attempt, run lease, errors, progress
and callback columns as the Rust core had them.  A running attempt stays
``running`` with its last heartbeat (its claim time when it never beat), so
this engine's heartbeat rescue takes it once that is older than the
staleness; a ``waiting_external`` job keeps its callback id and timeout.
The insert trigger is off while the jobs are written, so a unique claim the
core (``awa.storage.common.adopt``) copies as the Rust core held it is neither
taken twice nor refused; the shared tables and the id sequence are the core's.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from awa.storage.common.adopt import COLUMNS, SELECT, adopt_shared_tables, counts, staged

TRIGGERS = "ALTER TABLE awa.{table} {action} TRIGGER awa_unique_claim_ins"
ADOPT_HOT = (f"INSERT INTO awa.jobs_hot ({COLUMNS}) SELECT {SELECT} FROM {{stage}}.jobs "
             "WHERE state NOT IN ('scheduled', 'retryable') ORDER BY id")
ADOPT_DEFERRED = (f"INSERT INTO awa.scheduled_jobs ({COLUMNS}) SELECT {SELECT} "
                  "FROM {stage}.jobs WHERE state IN ('scheduled', 'retryable') ORDER BY id")

COUNT_STATES = """
SELECT state::text AS state, count(*) AS n FROM awa.jobs_hot GROUP BY state
UNION ALL
SELECT state::text, count(*) FROM awa.scheduled_jobs GROUP BY state
UNION ALL
SELECT 'dlq', count(*) FROM awa.dlq_entries HAVING count(*) > 0"""


class CanonicalAdopt:
    """``awa.storage.rust_core.adopt.AdoptTarget`` for the canonical engine."""

    async def adopt_staged(self, conn: psycopg.AsyncConnection[Any], staging: str,
                           next_id: int) -> None:
        for table in ("jobs_hot", "scheduled_jobs"):
            await conn.execute(sql.SQL(TRIGGERS).format(table=sql.Identifier(table),
                                                        action=sql.SQL("DISABLE")))
        await conn.execute(staged(ADOPT_HOT, stage=staging))
        await conn.execute(staged(ADOPT_DEFERRED, stage=staging))
        for table in ("jobs_hot", "scheduled_jobs"):
            await conn.execute(sql.SQL(TRIGGERS).format(table=sql.Identifier(table),
                                                        action=sql.SQL("ENABLE")))
        await adopt_shared_tables(conn, staging, next_id)

    async def adopted_counts(self, conn: psycopg.AsyncConnection[Any]
                             ) -> tuple[dict[str, int], dict[str, int]]:
        return await counts(conn, COUNT_STATES)
