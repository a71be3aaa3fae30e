"""The maintenance group of the Engine protocol on the canonical engine:
``CanonicalMaintenance`` (at the bottom) and the SQL it runs, as named constants.
What every engine shares (the shared tables' retention, descriptors, the promotion
and purge flow) is ``awa.storage.common.maintenance.SharedMaintenance``.

Moves between ``awa.jobs_hot`` and ``awa.scheduled_jobs`` (and into
``awa.dlq_entries``) are one ``DELETE ... RETURNING`` feeding an ``INSERT`` in
the same statement, keeping the job's id.  Batches travel as ``unnest``
arrays so a whole batch is one statement.  The column lists (and the shared
shapes of the retention deletes and descriptor upserts) are composed once, at
import, from fixed table and column names -- never from input.
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
from awa.job import JOB_COLUMNS
from awa.storage.common.collisions import lock_then_apply
from awa.storage.common.cron import ADVANCE_CRON_JOB
from awa.storage.common.fetch import fetch_all
from awa.storage.common.maintenance import (
    FINALIZED_AGED,
    IN_QUEUE,
    NOT_OVERRIDDEN,
    SharedMaintenance,
    delete_batch,
)
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

_COLUMNS = ", ".join(JOB_COLUMNS)


def _select_list(source: str, overrides: dict[str, str]) -> str:
    """``source.col`` for every job column, with some replaced by expressions."""
    return ", ".join(overrides.get(c, f"{source}.{c}") for c in JOB_COLUMNS)


# --- rescue ----------------------------------------------------------------------
# Candidates are locked for the rest of the transaction, then one apply
# statement moves them all.  SKIP LOCKED: rows a completion is writing right
# now are simply left for the next tick.
def _rescue_candidates(state: str, expired: str, oldest_first_by: str) -> str:
    """Lock up to a batch of ``state`` attempts for which ``expired`` holds."""
    return f"""
SELECT id, run_lease, kind, queue, attempt, max_attempts
  FROM awa.jobs_hot
 WHERE state = '{state}'
   AND {expired}
 ORDER BY {oldest_first_by}
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
"""


SELECT_STALE_HEARTBEATS = _rescue_candidates(
    "running", "heartbeat_at < now() - make_interval(secs => %(staleness_s)s)", "heartbeat_at")
SELECT_EXPIRED_DEADLINES = _rescue_candidates("running", "deadline_at < now()", "deadline_at")
SELECT_EXPIRED_CALLBACKS = _rescue_candidates(
    "waiting_external", "callback_timeout_at < now()", "callback_timeout_at")

_RESCUE_INPUT = """
WITH input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(actions)s::text[],
                         %(backoffs)s::float8[], %(errors)s::jsonb[], %(dlq_reasons)s::text[])
        AS t(id, run_lease, action, backoff_s, error, dlq_reason)
)"""

# Every rescued attempt is guarded by (id, run_lease) and the state it was
# found in: a completion that won the race leaves nothing to rescue.
APPLY_RESCUE = _RESCUE_INPUT + f""",
retry_src AS (
    DELETE FROM awa.jobs_hot j USING input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'retry'
    RETURNING j.*, now() + make_interval(secs => i.backoff_s) AS new_run_at, i.error AS new_error
),
retried AS (
    INSERT INTO awa.scheduled_jobs ({_COLUMNS})
    SELECT {_select_list("r", {
        "state": "'retryable'::awa.job_state",
        "run_at": "r.new_run_at",
        "deadline_at": "NULL",
        "errors": "array_append(coalesce(r.errors, '{}'::jsonb[]), r.new_error)",
        "callback_id": "NULL",
        "callback_timeout_at": "NULL",
        "callback_filter": "NULL",
        "callback_on_complete": "NULL",
        "callback_on_fail": "NULL",
        "callback_transform": "NULL",
    })}
      FROM retry_src r
    RETURNING id, run_lease, kind, queue
),
failed AS (
    UPDATE awa.jobs_hot j
       SET state = 'failed', finalized_at = now(), deadline_at = NULL,
           callback_timeout_at = NULL,
           errors = array_append(coalesce(j.errors, '{{}}'::jsonb[]), i.error)
      FROM input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'fail'
    RETURNING j.id, j.run_lease, j.kind, j.queue
),
dlq_src AS (
    DELETE FROM awa.jobs_hot j USING input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'dlq'
    RETURNING j.*, i.error AS new_error, i.dlq_reason AS new_dlq_reason
),
dead_lettered AS (
    INSERT INTO awa.dlq_entries (job_id, {", ".join(c for c in JOB_COLUMNS if c != "id")},
                                 dlq_reason, dlq_at, original_run_lease)
    SELECT {_select_list("d", {
        "state": "'failed'::awa.job_state",
        "finalized_at": "now()",
        "deadline_at": "NULL",
        "callback_timeout_at": "NULL",
        "errors": "array_append(coalesce(d.errors, '{}'::jsonb[]), d.new_error)",
    })}, d.new_dlq_reason, now(), d.run_lease
      FROM dlq_src d
    RETURNING job_id AS id, run_lease, kind, queue, dlq_reason
)
SELECT 'retry' AS action, id, run_lease, kind, queue, NULL::text AS dlq_reason FROM retried
UNION ALL
SELECT 'fail', id, run_lease, kind, queue, NULL FROM failed
UNION ALL
SELECT 'dlq', id, run_lease, kind, queue, dlq_reason FROM dead_lettered
"""

# The unique-claim wedge: the attempt's way back into a claiming state is
# taken by a newer holder of its key.  The old attempt becomes cancelled
# evidence (outside the default mask), the newer holder keeps the claim.
CANCEL_RUNNING_AS_DUPLICATE = """
UPDATE awa.jobs_hot
   SET state = 'cancelled', finalized_at = now(), deadline_at = NULL,
       callback_timeout_at = NULL,
       errors = array_append(coalesce(errors, '{}'::jsonb[]), %(error)s::jsonb)
 WHERE id = %(id)s AND run_lease = %(run_lease)s AND state = %(state)s::awa.job_state
RETURNING id, run_lease, kind, queue
"""

# --- promotion ----------------------------------------------------------------------
# Two statements per batch: lock the due rows of unpaused queues, then move
# them; the insert trigger on jobs_hot sends NOTIFY "awa:<queue>" at commit.
# Locking first is what lets a collision degrade row by row over the same rows.
SELECT_DUE_IDS = """
SELECT s.id, s.attempt
  FROM awa.scheduled_jobs s
 WHERE s.run_at <= now()
   AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = s.queue AND m.paused)
 ORDER BY s.run_at, s.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
"""

PROMOTE_IDS = f"""
WITH moved AS (
    DELETE FROM awa.scheduled_jobs s WHERE s.id = ANY(%(ids)s::bigint[]) AND s.run_at <= now()
    RETURNING s.*
)
INSERT INTO awa.jobs_hot ({_COLUMNS})
SELECT {_select_list("moved", {"state": "'available'::awa.job_state"})}
  FROM moved
RETURNING id, kind, queue
"""

CANCEL_DEFERRED_AS_DUPLICATE = f"""
WITH moved AS (
    DELETE FROM awa.scheduled_jobs s WHERE s.id = %(id)s
    RETURNING s.*
)
INSERT INTO awa.jobs_hot ({_COLUMNS})
SELECT {_select_list("moved", {
    "state": "'cancelled'::awa.job_state",
    "finalized_at": "now()",
    "errors": "array_append(coalesce(moved.errors, '{}'::jsonb[]), %(error)s::jsonb)",
})}
  FROM moved
RETURNING id, run_lease, kind, queue
"""

# --- retention ----------------------------------------------------------------------
# One bounded batch of this engine's finished jobs (the shared tables' deletes are the core's).
DELETE_FINALIZED_DEFAULT = delete_batch("awa.jobs_hot", "id", FINALIZED_AGED + NOT_OVERRIDDEN)
DELETE_FINALIZED_QUEUE = delete_batch("awa.jobs_hot", "id", FINALIZED_AGED + IN_QUEUE)

# --- priority aging -------------------------------------------------------------------
# A waiting job's effective priority is its original one minus one step per
# aging interval waited (1 is the most urgent).  The original is recorded in
# metadata the first time the job is aged, so aging is idempotent.
AGE_PRIORITIES = """
WITH settings AS (
    SELECT * FROM unnest(%(queues)s::text[], %(intervals_ms)s::bigint[]) AS t(queue, interval_ms)
),
waiting AS (
    SELECT j.id, j.priority,
           coalesce((j.metadata ->> %(meta_key)s)::int, j.priority) AS original,
           extract(epoch FROM now() - j.run_at) * 1000
               / nullif(coalesce(s.interval_ms, %(default_interval_ms)s::bigint), 0) AS steps
      FROM awa.jobs_hot j
      LEFT JOIN settings s ON s.queue = j.queue
     WHERE j.state = 'available'
       AND j.priority > 1
       AND j.run_at <= now() - make_interval(secs => %(min_interval_s)s)
),
aged AS (
    SELECT w.id, w.original, greatest(1, w.original - floor(w.steps)::int) AS new_priority
      FROM waiting w
     WHERE w.steps IS NOT NULL AND w.steps > 0
       AND greatest(1, w.original - floor(w.steps)::int) < w.priority
     LIMIT %(limit)s
),
locked AS (
    SELECT j.id FROM awa.jobs_hot j JOIN aged a USING (id)
     WHERE j.state = 'available'
       FOR UPDATE OF j SKIP LOCKED
)
UPDATE awa.jobs_hot j
   SET priority = a.new_priority,
       metadata = j.metadata || jsonb_build_object(%(meta_key)s::text, a.original)
  FROM aged a JOIN locked USING (id)
 WHERE j.id = a.id
RETURNING j.id
"""

# --- cron ----------------------------------------------------------------------------
INSERT_CRON_RUNS = """
INSERT INTO awa.jobs_hot (kind, queue, args, state, priority, max_attempts, run_at,
                          metadata, tags)
SELECT %(kind)s, %(queue)s, %(args)s::jsonb, 'available', %(priority)s, %(max_attempts)s,
       slot, %(metadata)s::jsonb || jsonb_build_object('cron_name', %(name)s::text,
                                                       'cron_slot', slot),
       %(tags)s::text[]
  FROM unnest(%(slots)s::timestamptz[]) AS slot
RETURNING *
"""

# --- queue health -------------------------------------------------------------------------
# THE queue-depth read.  Which (state, queue) pairs exist comes from a loose
# index scan of each table's (state, queue, id) index, one probe per pair and
# only for the depth states, so terminal history is never walked; each pair
# is then counted (up to %(cap)s; LIMIT NULL counts all).  Lag: the oldest
# available job of each queue, one probe per priority of the claim index.
QUEUE_DEPTHS = """
WITH RECURSIVE hot AS (
    SELECT s.state, (SELECT min(h.queue) FROM awa.jobs_hot h WHERE h.state = s.state) AS queue
      FROM unnest(%(hot_states)s::awa.job_state[]) AS s(state)
    UNION ALL
    SELECT p.state, (SELECT min(h.queue) FROM awa.jobs_hot h
                      WHERE h.state = p.state AND h.queue > p.queue)
      FROM hot p WHERE p.queue IS NOT NULL
), deferred AS (
    SELECT s.state, (SELECT min(d.queue) FROM awa.scheduled_jobs d WHERE d.state = s.state)
           AS queue
      FROM unnest(%(deferred_states)s::awa.job_state[]) AS s(state)
    UNION ALL
    SELECT p.state, (SELECT min(d.queue) FROM awa.scheduled_jobs d
                      WHERE d.state = p.state AND d.queue > p.queue)
      FROM deferred p WHERE p.queue IS NOT NULL
), dlq AS (
    SELECT (SELECT min(e.queue) FROM awa.dlq_entries e) AS queue
    UNION ALL
    SELECT (SELECT min(e.queue) FROM awa.dlq_entries e WHERE e.queue > p.queue)
      FROM dlq p WHERE p.queue IS NOT NULL
)
SELECT p.queue, p.state::text AS state,
       (SELECT count(*) FROM (SELECT 1 FROM awa.jobs_hot h
         WHERE h.state = p.state AND h.queue = p.queue LIMIT %(cap)s) c) AS n,
       CASE WHEN p.state = 'available' THEN
           (SELECT min(o.run_at) FROM unnest(%(priorities)s::smallint[]) AS pr(priority)
              CROSS JOIN LATERAL (
                  SELECT h.run_at FROM awa.jobs_hot h
                   WHERE h.state = 'available' AND h.queue = p.queue
                     AND h.priority = pr.priority
                   ORDER BY h.run_at LIMIT 1) o)
       END AS oldest_available_at,
       now() AS db_now
  FROM hot p WHERE p.queue IS NOT NULL
UNION ALL
SELECT p.queue, p.state::text,
       (SELECT count(*) FROM (SELECT 1 FROM awa.scheduled_jobs d
         WHERE d.state = p.state AND d.queue = p.queue LIMIT %(cap)s) c),
       NULL, now()
  FROM deferred p WHERE p.queue IS NOT NULL
UNION ALL
SELECT p.queue, NULL,
       (SELECT count(*) FROM (SELECT 1 FROM awa.dlq_entries e
         WHERE e.queue = p.queue LIMIT %(cap)s) c),
       NULL, now()
  FROM dlq p WHERE p.queue IS NOT NULL
"""

# The planner cannot cost that read well: a recursive CTE is guessed at
# hundreds of rows, each with a count subplan, which puts the plan far above
# jit_above_cost (JIT compilation then takes ~1 s for a read of milliseconds);
# and a pair's state is an outer reference, so its rows are estimated at a
# third of the table and a sequential scan with a LIMIT looks cheap -- while
# those rows sit behind the whole terminal history.  The read is index probes
# by design, so for its own transaction it says so.
INDEX_PROBES_ONLY = """
SELECT set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true)
"""

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
