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

from awa.statements import named_statements
from awa.storage.common.adopt import adopt_shared_tables, counts, staged

_SQL = named_statements("awa.storage.canonical", "sql/adopt.sql")
# The unique-claim trigger of each table, off while the jobs are written, then on again.
DISABLE_TRIGGERS = (_SQL["disable_unique_claim_trigger_jobs_hot"],
                    _SQL["disable_unique_claim_trigger_scheduled_jobs"])
ENABLE_TRIGGERS = (_SQL["enable_unique_claim_trigger_jobs_hot"],
                   _SQL["enable_unique_claim_trigger_scheduled_jobs"])
# The staging schema is chosen at run time, so these two keep one placeholder, {stage}, which
# ``staged`` fills with a quoted identifier (psycopg ``sql.Identifier``): the one name of this
# engine's statements not written out.
ADOPT_HOT = _SQL["adopt_hot"]
ADOPT_DEFERRED = _SQL["adopt_deferred"]
COUNT_STATES = _SQL["count_states"]


class CanonicalAdopt:
    """``awa.storage.rust_core.adopt.AdoptTarget`` for the canonical engine."""

    async def adopt_staged(self, conn: psycopg.AsyncConnection[Any], staging: str,
                           next_id: int) -> None:
        for statement in DISABLE_TRIGGERS:
            await conn.execute(statement)
        await conn.execute(staged(ADOPT_HOT, stage=staging))
        await conn.execute(staged(ADOPT_DEFERRED, stage=staging))
        for statement in ENABLE_TRIGGERS:
            await conn.execute(statement)
        await adopt_shared_tables(conn, staging, next_id)

    async def adopted_counts(self, conn: psycopg.AsyncConnection[Any]
                             ) -> tuple[dict[str, int], dict[str, int]]:
        return await counts(conn, COUNT_STATES)
