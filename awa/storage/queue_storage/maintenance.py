"""Queue storage: the maintenance group (what the elected leader runs).

Rescue finds open attempts -- materialized leases by heartbeat, deadline or
callback timeout, and receipts that never heartbeated by their claim time
(``receipt claim stale: …``) or their deadline -- and ends them through the
same guarded end-of-attempt statements as the hot path, so a completion that
wins the race leaves nothing to rescue.  Promotion moves due
``deferred_jobs`` rows onto their lanes.  Descriptors, runtimes, the DLQ and
cron schedules live in shared tables: the engine-neutral core's statements
(``awa.storage.common.maintenance``, ``common.cron``) serve them.  The statements are in
``sql/maintenance.sql``, read by name, but for promotion's move and the cron runs' insert,
which append to a lane through ``enqueue.APPEND_READY``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from awa import config, lifecycle
from awa.storage.common.collisions import lock_then_apply
from awa.storage.common.cron import ADVANCE_CRON_JOB
from awa.storage.common.maintenance import SharedMaintenance
from awa.storage.engine import (
    ActiveCronSchedule,
    AttemptWrite,
    CronFired,
    PruneReport,
    QueueDepth,
    RescueBatch,
    RescuedAttempt,
)
from awa.storage.queue_storage import rings
from awa.storage.queue_storage.enqueue import APPEND_READY
from awa.storage.queue_storage.execution import END_ATTEMPTS, finish
from awa.storage.queue_storage.procedures import named
from awa.storage.queue_storage.schema import InSchema

RECEIPT_STALE_ERROR = "receipt claim stale: worker presumed dead"
"""A receipt that never heartbeated outlived the staleness cutoff (the seed's receipt path)."""

# Rescue: the candidates of each kind (sql/maintenance.sql).
STALE_CANDIDATES = named("maintenance.sql", "stale_candidates")
DEADLINE_CANDIDATES = named("maintenance.sql", "deadline_candidates")
CALLBACK_CANDIDATES = named("maintenance.sql", "callback_candidates")

# --- promotion ---------------------------------------------------------------------
SELECT_DUE = named("maintenance.sql", "select_due")

PROMOTE = """
WITH d AS MATERIALIZED (
    DELETE FROM awa.deferred_jobs s WHERE s.id = ANY(%(ids)s::bigint[]) AND s.run_at <= now()
    RETURNING s.*
), src AS (
    SELECT id, kind, queue, args, priority, attempt, max_attempts, run_at, attempted_at,
           created_at, errors, metadata, tags, unique_key, unique_states, run_lease, progress
      FROM d
)""" + APPEND_READY + """
, uq_take AS (
    INSERT INTO awa.job_unique_claims (unique_key, job_id)
    SELECT d.unique_key, d.id FROM d
     WHERE d.unique_key IS NOT NULL AND awa.qs_in_mask(d.unique_states, 'available')
       AND NOT EXISTS (SELECT 1 FROM awa.job_unique_claims x
                        WHERE x.unique_key = d.unique_key AND x.job_id = d.id)
), uq_give AS (
    DELETE FROM awa.job_unique_claims x USING d
     WHERE d.unique_key IS NOT NULL AND x.unique_key = d.unique_key AND x.job_id = d.id
       AND NOT awa.qs_in_mask(d.unique_states, 'available')
)
SELECT id, kind, queue FROM d"""

CANCEL_DEFERRED_AS_DUPLICATE = named("maintenance.sql", "cancel_deferred_as_duplicate")

# --- retention (rows rotation cannot reach: sql/maintenance.sql) -----------------------
DELETE_FINALIZED_DEFAULT = named("maintenance.sql", "delete_finalized_default")
DELETE_FINALIZED_QUEUE = named("maintenance.sql", "delete_finalized_queue")

# --- cron: the runs are appended to their lane --------------------------------------
INSERT_CRON_RUNS = """
WITH src AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, %(kind)s::text AS kind, %(queue)s::text AS queue,
           %(args)s::jsonb AS args, %(priority)s::smallint AS priority, 0::smallint AS attempt,
           %(max_attempts)s::smallint AS max_attempts, slot AS run_at,
           NULL::timestamptz AS attempted_at, now() AS created_at, NULL::jsonb[] AS errors,
           %(metadata)s::jsonb || jsonb_build_object('cron_name', %(name)s::text,
                                                     'cron_slot', slot) AS metadata,
           %(tags)s::text[] AS tags, NULL::bytea AS unique_key, NULL::bit(8) AS unique_states,
           0::bigint AS run_lease, NULL::jsonb AS progress
      FROM unnest(%(slots)s::timestamptz[]) AS slot
)""" + APPEND_READY + """
SELECT id FROM ready"""

# Queue depths: each state counted where it lives, never through the whole view.
QUEUE_DEPTHS = named("maintenance.sql", "queue_depths")
ADVANCE_RECEIPT_WATERMARK = named("maintenance.sql", "advance_receipt_watermark")


@dataclass(frozen=True)
class _Rescue:
    name: str
    candidates: str
    from_state: str
    error: str
    receipt_error: str
    dlq_reason: str


_HEARTBEAT = _Rescue("heartbeat", STALE_CANDIDATES, "running", lifecycle.HEARTBEAT_STALE_ERROR,
                     RECEIPT_STALE_ERROR, lifecycle.DLQ_HEARTBEAT_STALE)
_DEADLINE = _Rescue("deadline", DEADLINE_CANDIDATES, "running",
                    lifecycle.DEADLINE_EXCEEDED_ERROR, lifecycle.DEADLINE_EXCEEDED_ERROR,
                    lifecycle.DLQ_DEADLINE_EXCEEDED)
_CALLBACK = _Rescue("callback", CALLBACK_CANDIDATES, "waiting_external",
                    lifecycle.CALLBACK_TIMEOUT_ERROR, lifecycle.CALLBACK_TIMEOUT_ERROR,
                    lifecycle.DLQ_CALLBACK_TIMEOUT)


class QueueStorageMaintenance(InSchema, SharedMaintenance):
    """The maintenance group on queue storage."""

    SELECT_DUE_SQL = SELECT_DUE
    PROMOTE_SQL = PROMOTE
    CANCEL_DEFERRED_DUPLICATE_SQL = CANCEL_DEFERRED_AS_DUPLICATE
    DELETE_FINALIZED_QUEUE_SQL = DELETE_FINALIZED_QUEUE
    DELETE_FINALIZED_DEFAULT_SQL = DELETE_FINALIZED_DEFAULT

    async def rescue_stale_heartbeats(
            self, conn: psycopg.AsyncConnection[Any], *, staleness_s: float, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        # Every reader of open receipts searches from the watermark: moved on here, where
        # they are looked for most often.
        await conn.execute(self.sql(ADVANCE_RECEIPT_WATERMARK))
        return await self._qs_rescue(conn, _HEARTBEAT,
                                     {"limit": limit, "staleness_s": staleness_s}, dlq_enabled)

    async def rescue_expired_deadlines(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return await self._qs_rescue(conn, _DEADLINE, {"limit": limit}, dlq_enabled)

    async def rescue_callback_timeouts(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return await self._qs_rescue(conn, _CALLBACK, {"limit": limit}, dlq_enabled)

    async def _qs_rescue(self, conn: psycopg.AsyncConnection[Any], rescue: _Rescue,
                         params: dict[str, Any],
                         dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        """End the candidates through the guarded end-of-attempt statements (one per
        action); a unique collision degrades row by row and cancels the superseded one."""
        from_states = (rescue.from_state,)

        def plan(row: dict[str, Any]) -> tuple[str, AttemptWrite]:
            exhausted = row["attempt"] >= row["max_attempts"]
            action = ("retry" if not exhausted
                      else "dlq" if dlq_enabled(row["queue"]) else "fail")
            message = rescue.receipt_error if row["source"] == "receipt" else rescue.error
            error = lifecycle.error_entry(message, row["attempt"], terminal=exhausted)
            return action, AttemptWrite(
                row["id"], row["run_lease"], error=error, attempt=row["attempt"],
                delay_s=lifecycle.backoff_seconds(row["attempt"]),
                reason=rescue.dlq_reason if action == "dlq" else None)

        async def apply(rows: Sequence[dict[str, Any]]) -> list[RescuedAttempt]:
            by_action: dict[str, list[AttemptWrite]] = {"retry": [], "fail": [], "dlq": []}
            for row in rows:
                action, write = plan(row)
                by_action[action].append(write)
            done: list[RescuedAttempt] = []
            for action, to_state in (("retry", "retryable"), ("fail", "failed"),
                                     ("dlq", None)):
                if by_action[action]:
                    ids = set(await finish(conn, self.schema, END_ATTEMPTS, by_action[action],
                                           f"rescued_{rescue.name}", to_state, from_states))
                    done += [_rescued(r, action, rescue.dlq_reason if action == "dlq" else None)
                             for r in rows if r["id"] in ids]
            return done

        async def cancel(row: dict[str, Any]) -> list[RescuedAttempt]:
            error = lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, row["attempt"],
                                          terminal=True, cause=rescue.error)
            ids = await finish(conn, self.schema, END_ATTEMPTS,
                               [AttemptWrite(row["id"], row["run_lease"], error=error)],
                               "superseded", "cancelled", from_states)
            return [_rescued(row, "cancel", None)] if ids else []

        found, done = await lock_then_apply(
            conn, lambda: self._rows(conn, rescue.candidates, params), batch=apply,
            on_collision=cancel, what=f"rescue of {rescue.name} jobs")
        return RescueBatch(found=found, rescued=done.applied + done.superseded,
                           left=len(done.left), statements=done.statements)

    async def age_priorities(self, conn: psycopg.AsyncConnection[Any], *,
                             default_interval_ms: int, queue_intervals_ms: Mapping[str, int],
                             limit: int) -> int:
        """Nothing to move: on queue storage a waiting job's priority is aged at claim time
        (``awa.qs_aged_priority`` in ``awa.qs_claim``, one step per interval since run_at),
        so no pass rewrites the backlog.  A pass that re-appended aged entries one lane up
        raced the claims of the entries it moved (the same attempt claimed twice, from both
        lanes) and, under a backlog older than one interval, moved the whole backlog."""
        return 0

    async def fire_cron(self, conn: psycopg.AsyncConnection[Any], schedule: ActiveCronSchedule,
                        slots: Sequence[datetime]) -> CronFired:
        if not slots:
            return CronFired(advanced=False)
        async with conn.transaction():
            advanced = await self._rows(conn, ADVANCE_CRON_JOB, {
                "name": schedule.name, "slot": slots[-1],
                "previous": schedule.last_enqueued_at})
            if not advanced:
                return CronFired(advanced=False)
            inserted = await self._rows(conn, INSERT_CRON_RUNS, {
                "kind": schedule.kind, "queue": schedule.queue,
                "args": json.dumps(schedule.args), "priority": schedule.priority,
                "max_attempts": schedule.max_attempts,
                "metadata": json.dumps(schedule.metadata), "name": schedule.name,
                "tags": schedule.tags, "slots": list(slots)})
        return CronFired(advanced=True, job_ids=sorted(r["id"] for r in inserted))

    async def queue_depths(self, conn: psycopg.AsyncConnection[Any], *,
                           cap: int | None = None) -> list[QueueDepth]:
        rows = await self._rows(conn, QUEUE_DEPTHS, {"states": list(lifecycle.DEPTH_STATES)})
        by_queue: dict[str, dict[str, Any]] = {}
        for r in rows:
            q = by_queue.setdefault(r["queue"], {"queue": r["queue"], "depth": {},
                                                 "capped": set()})
            if r["state"] is None:
                q["dlq_depth"] = int(r["n"])
            else:  # running comes in two rows (receipts, leases): added up
                q["depth"][r["state"]] = q["depth"].get(r["state"], 0) + int(r["n"])
            if r["oldest_available_at"] is not None:
                q["oldest_available_at"] = r["oldest_available_at"]
                q["lag_s"] = max((r["db_now"] - r["oldest_available_at"]).total_seconds(), 0.0)
        if cap is not None:
            for q in by_queue.values():
                q["capped"] = {s for s, n in q["depth"].items() if n >= cap}
                q["depth"] = {s: min(n, cap) for s, n in q["depth"].items()}
                if "dlq_depth" in q:
                    if q["dlq_depth"] >= cap:
                        q["capped"].add("dlq")
                    q["dlq_depth"] = min(q["dlq_depth"], cap)
        return [QueueDepth(**{**q, "capped": frozenset(q["capped"])})
                for _, q in sorted(by_queue.items())]


    async def rotate_and_prune(self, conn: psycopg.AsyncConnection[Any], *,
                               completed_retention_s: float = config.COMPLETED_RETENTION_HOURS
                               * 3600,
                               failed_retention_s: float = config.FAILED_RETENTION_HOURS * 3600,
                               lock_timeout_ms: int = rings.DEFAULT_LOCK_TIMEOUT_MS
                               ) -> PruneReport:
        """The leader's ring tick (queue-storage only; see ``rings``)."""
        return await rings.rotate_and_prune(conn, completed_retention_s=completed_retention_s,
                                            failed_retention_s=failed_retention_s,
                                            lock_timeout_ms=lock_timeout_ms, schema=self.schema)


def _rescued(row: dict[str, Any], action: Any, dlq_reason: str | None) -> RescuedAttempt:
    return RescuedAttempt(id=row["id"], run_lease=row["run_lease"], kind=row["kind"],
                          queue=row["queue"], action=action, dlq_reason=dlq_reason)


__all__ = ["QueueStorageMaintenance", "RECEIPT_STALE_ERROR", "config"]
