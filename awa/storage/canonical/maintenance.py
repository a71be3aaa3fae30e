"""The maintenance group of the Engine protocol on the canonical engine:
``CanonicalMaintenance`` (at the bottom) and the statements it runs, read by name from
``sql/maintenance.sql``.  What every engine shares (the shared tables' retention,
descriptors, the promotion and purge flow) is
``awa.storage.common.maintenance.SharedMaintenance``.

Moves between ``awa.jobs_hot`` and ``awa.scheduled_jobs`` (and into
``awa.dlq_entries``) are one ``DELETE ... RETURNING`` feeding an ``INSERT`` in
the same statement, keeping the job's id.  Batches travel as ``unnest``
arrays so a whole batch is one statement.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa import config, lifecycle
from awa.statements import named_statements
from awa.storage.common.collisions import lock_then_apply
from awa.storage.common.cron import ADVANCE_CRON_JOB
from awa.storage.common.fetch import fetch_all
from awa.storage.common.maintenance import SharedMaintenance
from awa.storage.common.maintenance import execute as _execute
from awa.storage.common.tables import depth_states_by_table
from awa.storage.engine import (
    ORIGINAL_PRIORITY_KEY,
    ActiveCronSchedule,
    CronFired,
    PruneReport,
    QueueDepth,
    RescueBatch,
    RescuedAttempt,
)

log = logging.getLogger("awa.storage")

# Every statement of this group is in sql/maintenance.sql, read once, at import.
_SQL = named_statements("awa.storage.canonical", "sql/maintenance.sql")

# --- rescue: candidates locked (one statement per way an attempt ends), then one apply ---------
SELECT_STALE_HEARTBEATS = _SQL["select_stale_heartbeats"]
SELECT_EXPIRED_DEADLINES = _SQL["select_expired_deadlines"]
SELECT_EXPIRED_CALLBACKS = _SQL["select_expired_callbacks"]
APPLY_RESCUE = _SQL["apply_rescue"]
CANCEL_RUNNING_AS_DUPLICATE = _SQL["cancel_running_as_duplicate"]

# --- promotion ----------------------------------------------------------------------------
SELECT_DUE_IDS = _SQL["select_due_ids"]
PROMOTE_IDS = _SQL["promote_ids"]
CANCEL_DEFERRED_AS_DUPLICATE = _SQL["cancel_deferred_as_duplicate"]

# --- retention: one bounded batch of this engine's finished jobs ---------------------------
DELETE_FINALIZED_DEFAULT = _SQL["delete_finalized_default"]
DELETE_FINALIZED_QUEUE = _SQL["delete_finalized_queue"]

# --- priority aging, cron, queue health --------------------------------------------------
AGE_PRIORITIES = _SQL["age_priorities"]
INSERT_CRON_RUNS = _SQL["insert_cron_runs"]
QUEUE_DEPTHS = _SQL["queue_depths"]
INDEX_PROBES_ONLY = _SQL["index_probes_only"]

# --- the mixin ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Rescue:
    """One way an attempt ends without its handler saying so: where it is found and why."""

    name: str
    candidates: str
    state: str
    error: str
    dlq_reason: str


_HEARTBEAT = _Rescue("heartbeat", SELECT_STALE_HEARTBEATS, "running",
                     lifecycle.HEARTBEAT_STALE_ERROR, lifecycle.DLQ_HEARTBEAT_STALE)
_DEADLINE = _Rescue("deadline", SELECT_EXPIRED_DEADLINES, "running",
                    lifecycle.DEADLINE_EXCEEDED_ERROR, lifecycle.DLQ_DEADLINE_EXCEEDED)
_CALLBACK = _Rescue("callback", SELECT_EXPIRED_CALLBACKS, "waiting_external",
                    lifecycle.CALLBACK_TIMEOUT_ERROR, lifecycle.DLQ_CALLBACK_TIMEOUT)


def _rescue_plan(rows: Sequence[dict[str, Any]], rescue: _Rescue,
                 dlq_enabled: Callable[[str], bool]) -> dict[str, Any]:
    """The apply statement's arrays: what happens to each candidate and why."""
    plan: dict[str, list[Any]] = {k: [] for k in
                                  ("ids", "leases", "actions", "backoffs", "errors",
                                   "dlq_reasons")}
    for row in rows:
        exhausted = row["attempt"] >= row["max_attempts"]
        if not exhausted:
            action = "retry"
        elif dlq_enabled(row["queue"]):
            action = "dlq"
        else:
            action = "fail"
        plan["ids"].append(row["id"])
        plan["leases"].append(row["run_lease"])
        plan["actions"].append(action)
        plan["backoffs"].append(lifecycle.backoff_seconds(row["attempt"]))
        plan["errors"].append(Jsonb(lifecycle.error_entry(rescue.error, row["attempt"],
                                                          terminal=exhausted)))
        plan["dlq_reasons"].append(rescue.dlq_reason if action == "dlq" else None)
    return {**plan, "state": rescue.state}


def _rescued(row: dict[str, Any], action: Any) -> RescuedAttempt:
    return RescuedAttempt(id=row["id"], run_lease=row["run_lease"], kind=row["kind"],
                          queue=row["queue"], action=action,
                          dlq_reason=row.get("dlq_reason"))


class CanonicalMaintenance(SharedMaintenance):
    """The maintenance group of the Engine protocol on the canonical engine."""

    SELECT_DUE_SQL = SELECT_DUE_IDS
    PROMOTE_SQL = PROMOTE_IDS
    CANCEL_DEFERRED_DUPLICATE_SQL = CANCEL_DEFERRED_AS_DUPLICATE
    DELETE_FINALIZED_QUEUE_SQL = DELETE_FINALIZED_QUEUE
    DELETE_FINALIZED_DEFAULT_SQL = DELETE_FINALIZED_DEFAULT

    # -- rescue ------------------------------------------------------------------------
    async def rescue_stale_heartbeats(
            self, conn: psycopg.AsyncConnection[Any], *, staleness_s: float, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return await self._rescue(conn, _HEARTBEAT, {"limit": limit, "staleness_s": staleness_s},
                                  dlq_enabled)

    async def rescue_expired_deadlines(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return await self._rescue(conn, _DEADLINE, {"limit": limit}, dlq_enabled)

    async def rescue_callback_timeouts(
            self, conn: psycopg.AsyncConnection[Any], *, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        return await self._rescue(conn, _CALLBACK, {"limit": limit}, dlq_enabled)

    async def _rescue(self, conn: psycopg.AsyncConnection[Any], rescue: _Rescue,
                      params: dict[str, Any], dlq_enabled: Callable[[str], bool]) -> RescueBatch:
        """Lock the candidates (SKIP LOCKED: a completion writing one right now wins), then
        move them all in one statement; a unique collision degrades row by row over the
        same locked rows and cancels the superseded attempt."""

        async def apply(rows: Sequence[dict[str, Any]]) -> list[RescuedAttempt]:
            moved = await fetch_all(conn, APPLY_RESCUE, _rescue_plan(rows, rescue, dlq_enabled))
            return [_rescued(r, r["action"]) for r in moved]

        async def cancel(row: dict[str, Any]) -> list[RescuedAttempt]:
            error = lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, row["attempt"],
                                          terminal=True, cause=rescue.error)
            cancelled = await fetch_all(conn, CANCEL_RUNNING_AS_DUPLICATE, {
                "id": row["id"], "run_lease": row["run_lease"], "state": rescue.state,
                "error": Jsonb(error)})
            return [_rescued(r, "cancel") for r in cancelled]

        found, done = await lock_then_apply(
            conn, lambda: fetch_all(conn, rescue.candidates, params), batch=apply,
            on_collision=cancel, what=f"rescue of {rescue.name} jobs")
        return RescueBatch(found=found, rescued=done.applied + done.superseded,
                           left=len(done.left), statements=done.statements)

    # -- priority aging ------------------------------------------------------------------
    async def age_priorities(self, conn: psycopg.AsyncConnection[Any], *,
                             default_interval_ms: int, queue_intervals_ms: Mapping[str, int],
                             limit: int) -> int:
        names = list(queue_intervals_ms)
        intervals = [queue_intervals_ms[n] for n in names]
        positive = [i for i in intervals + [default_interval_ms] if i > 0]
        if not positive:
            return 0
        n, _ = await _execute(conn, AGE_PRIORITIES, {
            "queues": names, "intervals_ms": intervals,
            "default_interval_ms": default_interval_ms,
            "min_interval_s": min(positive) / 1000.0,
            "meta_key": ORIGINAL_PRIORITY_KEY, "limit": limit})
        return n

    # -- cron ----------------------------------------------------------------------------
    async def fire_cron(self, conn: psycopg.AsyncConnection[Any], schedule: ActiveCronSchedule,
                        slots: Sequence[datetime]) -> CronFired:
        if not slots:
            return CronFired(advanced=False)
        async with conn.transaction():
            advanced = await fetch_all(conn, ADVANCE_CRON_JOB, {
                "name": schedule.name, "slot": slots[-1],
                "previous": schedule.last_enqueued_at})
            if not advanced:
                return CronFired(advanced=False)
            inserted = await fetch_all(conn, INSERT_CRON_RUNS, {
                "kind": schedule.kind, "queue": schedule.queue,
                "args": json.dumps(schedule.args), "priority": schedule.priority,
                "max_attempts": schedule.max_attempts,
                "metadata": json.dumps(schedule.metadata), "name": schedule.name,
                "tags": schedule.tags, "slots": list(slots)})
        return CronFired(advanced=True, job_ids=[r["id"] for r in inserted])

    async def rotate_and_prune(self, conn: psycopg.AsyncConnection[Any], *,
                               completed_retention_s: float,
                               failed_retention_s: float) -> PruneReport:
        """No rings here: history goes by row retention (``purge_finalized``)."""
        return PruneReport()

    # -- queue health --------------------------------------------------------------------
    async def queue_depths(self, conn: psycopg.AsyncConnection[Any], *,
                           cap: int | None = None) -> list[QueueDepth]:
        async with conn.transaction():
            await _execute(conn, INDEX_PROBES_ONLY, {})
            rows = await fetch_all(conn, QUEUE_DEPTHS, {
                **depth_states_by_table(),
                "cap": cap,
                "priorities": list(range(config.MIN_PRIORITY, config.MAX_PRIORITY + 1))})
        by_queue: dict[str, dict[str, Any]] = {}
        for r in rows:
            q = by_queue.setdefault(r["queue"], {"queue": r["queue"], "depth": {},
                                                 "capped": set()})
            n = int(r["n"])
            if r["state"] is None:
                q["dlq_depth"] = n
                state = "dlq"
            else:
                q["depth"][r["state"]] = n
                state = r["state"]
            if cap is not None and n >= cap:
                q["capped"].add(state)
            if r["oldest_available_at"] is not None:
                q["oldest_available_at"] = r["oldest_available_at"]
                q["lag_s"] = max((r["db_now"] - r["oldest_available_at"]).total_seconds(), 0.0)
        return [QueueDepth(**{**q, "capped": frozenset(q["capped"])})
                for _, q in sorted(by_queue.items())]
