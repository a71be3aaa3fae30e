"""The engine-neutral core: the maintenance leader's work on the tables every layout shares,
and the flow of the work each engine does on its own tables.

Shared tables: the DLQ's and the catalogues' retention (``awa.dlq_entries``,
``awa.runtime_instances``, the descriptors), descriptor upserts, the runtime's descriptor
hashes, the active cron schedules.  Promotion (lock the due deferred rows, move them, a
unique collision degrading row by row) and the finished-job purge run the same way on every
engine over statements each engine names (``SELECT_DUE_SQL``, ``PROMOTE_SQL``,
``CANCEL_DEFERRED_DUPLICATE_SQL``, ``DELETE_FINALIZED_*_SQL``), sent through ``self.sql``
(queue storage's schema).  The shared tables' statements are in ``sql/maintenance.sql``,
read by name.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any, ClassVar, Literal
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from awa import lifecycle
from awa.statements import named_statements
from awa.storage.common.collisions import lock_then_apply
from awa.storage.common.cron import SELECT_ACTIVE_CRON_JOBS
from awa.storage.common.fetch import fetch_all
from awa.storage.engine import (
    ActiveCronSchedule,
    Descriptor,
    PromoteBatch,
    PromotedJob,
    PurgedBatch,
)

_SQL = named_statements("awa.storage.common", "sql/maintenance.sql")

# --- retention ----------------------------------------------------------------------
# Each delete takes at most one batch; the caller loops a bounded number of times.
# Per-queue overrides run as their own statements; the default statement skips the
# overridden queues (sql/maintenance.sql).
DELETE_DLQ_DEFAULT = _SQL["delete_dlq_default"]
DELETE_DLQ_QUEUE = _SQL["delete_dlq_queue"]
DELETE_UNSEEN_RUNTIMES = _SQL["delete_unseen_runtimes"]
DELETE_UNSEEN_QUEUE_DESCRIPTORS = _SQL["delete_unseen_queue_descriptors"]
DELETE_UNSEEN_KIND_DESCRIPTORS = _SQL["delete_unseen_kind_descriptors"]


# The same shape for canonical's finished-job deletes (awa.storage.canonical.maintenance
# composes them from these; queue storage's are whole in its sql/maintenance.sql).
def delete_batch(table: str, key: str, condition: str, *, returning: str = "",
                  skip_locked: bool = True) -> str:
    """One bounded batch of ``table``'s rows matching ``condition``."""
    lock = "\n       FOR UPDATE SKIP LOCKED" if skip_locked else ""
    return f"""
DELETE FROM {table}
 WHERE {key} IN (
    SELECT {key} FROM {table}
     WHERE {condition}
     LIMIT %(limit)s{lock})
{returning}"""


NOT_OVERRIDDEN = " AND queue <> ALL(%(excluded_queues)s::text[])"
IN_QUEUE = " AND queue = %(queue)s"
FINALIZED_AGED = ("state = %(state)s::awa.job_state"
                   " AND finalized_at < now() - make_interval(secs => %(age_s)s)")

FINALIZED_STATES = ("completed", "cancelled", "failed")
"""What retention may delete (the finished jobs of either engine)."""

# --- descriptors -------------------------------------------------------------------------


# Insert or refresh the declared descriptors of one catalogue table (``updated_at`` moves
# only when the descriptor changed, as in awa-pg 0.6.9).
UPSERT_QUEUE_DESCRIPTORS = _SQL["upsert_queue_descriptors"]
UPSERT_KIND_DESCRIPTORS = _SQL["upsert_kind_descriptors"]
SET_RUNTIME_DESCRIPTOR_HASHES = _SQL["set_runtime_descriptor_hashes"]


async def execute(conn: psycopg.AsyncConnection[Any], query: str,
                   params: Mapping[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """Row count and any returned rows of one write."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        rows = await cur.fetchall() if cur.description is not None else []
        return max(cur.rowcount, 0), rows


class SharedMaintenance:
    """The engine-neutral part of the maintenance group.  An engine names its promotion and
    finished-job statements and adds rescue, priority aging, cron runs, rotation and depths.
    """

    SELECT_DUE_SQL: ClassVar[str]
    PROMOTE_SQL: ClassVar[str]
    CANCEL_DEFERRED_DUPLICATE_SQL: ClassVar[str]
    DELETE_FINALIZED_QUEUE_SQL: ClassVar[str]
    DELETE_FINALIZED_DEFAULT_SQL: ClassVar[str]

    def sql(self, statement: str) -> str:
        """Where the engine's layout puts its tables (queue storage: its schema); as is."""
        return statement

    # -- promotion ---------------------------------------------------------------------
    async def promote_due(self, conn: psycopg.AsyncConnection[Any], *,
                          limit: int) -> PromoteBatch:
        async def promote(rows: Sequence[dict[str, Any]]) -> list[PromotedJob]:
            moved = await fetch_all(conn, self.sql(self.PROMOTE_SQL),
                                    {"ids": [r["id"] for r in rows]})
            return [PromotedJob(r["id"], r["kind"], r["queue"]) for r in moved]

        async def cancel(row: dict[str, Any]) -> list[PromotedJob]:
            error = lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, row["attempt"],
                                          terminal=True)
            cancelled = await fetch_all(conn, self.sql(self.CANCEL_DEFERRED_DUPLICATE_SQL),
                                     {"id": row["id"], "error": Jsonb(error)})
            return [PromotedJob(r["id"], r["kind"], r["queue"], cancelled=True)
                    for r in cancelled]

        found, done = await lock_then_apply(
            conn, lambda: fetch_all(conn, self.sql(self.SELECT_DUE_SQL), {"limit": limit}),
            batch=promote, on_collision=cancel, what="promotion")
        return PromoteBatch(found=found, promoted=done.applied, duplicates=done.superseded,
                            statements=done.statements)

    # -- retention ---------------------------------------------------------------------
    async def purge_finalized(self, conn: psycopg.AsyncConnection[Any], *, state: str,
                              older_than_s: float, limit: int, queue: str | None = None,
                              exclude_queues: Sequence[str] = ()) -> int:
        if state not in FINALIZED_STATES:
            raise ValueError(f"retention deletes only finished jobs, not {state!r}")
        params: dict[str, Any] = {"state": state, "age_s": older_than_s, "limit": limit}
        if queue is not None:
            n, _ = await execute(conn, self.sql(self.DELETE_FINALIZED_QUEUE_SQL),
                                  {**params, "queue": queue})
        else:
            n, _ = await execute(conn, self.sql(self.DELETE_FINALIZED_DEFAULT_SQL),
                                  {**params, "excluded_queues": list(exclude_queues)})
        return n

    async def purge_aged_dlq(self, conn: psycopg.AsyncConnection[Any], *, older_than_s: float,
                        limit: int, queue: str | None = None,
                        exclude_queues: Sequence[str] = ()) -> PurgedBatch:
        params: dict[str, Any] = {"age_s": older_than_s, "limit": limit}
        if queue is not None:
            n, rows = await execute(conn, DELETE_DLQ_QUEUE, {**params, "queue": queue})
        else:
            n, rows = await execute(conn, DELETE_DLQ_DEFAULT,
                                     {**params, "excluded_queues": list(exclude_queues)})
        return PurgedBatch(n, dict(Counter(r["queue"] for r in rows)))

    async def purge_unseen_runtimes(self, conn: psycopg.AsyncConnection[Any], *,
                                    older_than_s: float, limit: int) -> int:
        n, _ = await execute(conn, DELETE_UNSEEN_RUNTIMES,
                              {"age_s": older_than_s, "limit": limit})
        return n

    async def purge_unseen_descriptors(self, conn: psycopg.AsyncConnection[Any], *,
                                       catalogue: Literal["queues", "kinds"],
                                       older_than_s: float, limit: int) -> int:
        statement = (DELETE_UNSEEN_QUEUE_DESCRIPTORS if catalogue == "queues"
                     else DELETE_UNSEEN_KIND_DESCRIPTORS)
        n, _ = await execute(conn, statement, {"age_s": older_than_s, "limit": limit})
        return n

    # -- cron ----------------------------------------------------------------------------
    async def list_active_cron_jobs(
            self, conn: psycopg.AsyncConnection[Any]) -> list[ActiveCronSchedule]:
        return [ActiveCronSchedule(**r) for r in await fetch_all(conn, SELECT_ACTIVE_CRON_JOBS)]

    # -- descriptors -------------------------------------------------------------------
    async def upsert_descriptors(self, conn: psycopg.AsyncConnection[Any], *,
                                 queues: Sequence[Descriptor],
                                 kinds: Sequence[Descriptor]) -> int:
        async with conn.transaction():
            for statement, declared in ((UPSERT_QUEUE_DESCRIPTORS, queues),
                                        (UPSERT_KIND_DESCRIPTORS, kinds)):
                if declared:
                    await execute(conn, statement, {
                        "descriptors": json.dumps([asdict(d) for d in declared])})
        return len(queues) + len(kinds)

    async def set_runtime_descriptor_hashes(self, conn: psycopg.AsyncConnection[Any],
                                            instance_id: UUID,
                                            hashes: Mapping[str, Any]) -> bool:
        n, _ = await execute(conn, SET_RUNTIME_DESCRIPTOR_HASHES, {
            "instance_id": instance_id, "hashes": json.dumps(dict(hashes))})
        return n > 0
