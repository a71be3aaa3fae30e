"""Queue storage: the maintenance group (what the elected leader runs).

Rescue finds open attempts -- materialized leases by heartbeat, deadline or
callback timeout, and receipts that never heartbeated by their claim time
(``receipt claim stale: …``) or their deadline -- and ends them through the
same guarded end-of-attempt statements as the hot path, so a completion that
wins the race leaves nothing to rescue.  Promotion moves due
``deferred_jobs`` rows onto their lanes.  Descriptors, runtimes, the DLQ and
cron schedules live in shared tables: canonical's statements serve them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from awa import config, lifecycle
from awa.job import JOB_COLUMNS
from awa.storage.canonical.collisions import lock_then_apply
from awa.storage.canonical.maintenance import CanonicalMaintenance
from awa.storage.engine import (
    ORIGINAL_PRIORITY_KEY,
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
from awa.storage.queue_storage.execution import (
    DEAD_LETTER,
    FINALIZE,
    OPEN_RECEIPT_IN_RANGES,
    RETRY,
    entry_of,
    finish,
)
from awa.storage.queue_storage.schema import InSchema

RECEIPT_STALE_ERROR = "receipt claim stale: worker presumed dead"
"""A receipt that never heartbeated outlived the staleness cutoff (the seed's receipt path)."""

_CANDIDATE = """r.kind, r.queue, {attempt} AS attempt, r.max_attempts"""

STALE_CANDIDATES = f"""
(SELECT l.job_id AS id, l.run_lease, {_CANDIDATE.format(attempt="l.attempt")},
        'lease' AS source, l.heartbeat_at AS since
   FROM awa.leases l
   JOIN awa.ready_entries r ON {entry_of("l")}
  WHERE l.state = 'running' AND l.heartbeat_at < now() - make_interval(secs => %(staleness_s)s)
  ORDER BY l.heartbeat_at LIMIT %(limit)s)
UNION ALL
(SELECT c.job_id, c.run_lease, {_CANDIDATE.format(attempt="c.attempt")}, 'receipt',
        c.claimed_at
   FROM awa.lease_claims c
   JOIN awa.ready_entries r ON {entry_of("c")}
  WHERE c.claimed_at < now() - make_interval(secs => %(staleness_s)s)
    AND {OPEN_RECEIPT_IN_RANGES}
  ORDER BY c.claimed_at LIMIT %(limit)s)
ORDER BY since LIMIT %(limit)s"""

DEADLINE_CANDIDATES = f"""
(SELECT l.job_id AS id, l.run_lease, {_CANDIDATE.format(attempt="l.attempt")},
        'lease' AS source, l.deadline_at AS since
   FROM awa.leases l
   JOIN awa.ready_entries r ON {entry_of("l")}
  WHERE l.state = 'running' AND l.deadline_at < now()
  ORDER BY l.deadline_at LIMIT %(limit)s)
UNION ALL
(SELECT c.job_id, c.run_lease, {_CANDIDATE.format(attempt="c.attempt")}, 'receipt',
        c.deadline_at
   FROM awa.lease_claims c
   JOIN awa.ready_entries r ON {entry_of("c")}
  WHERE c.deadline_at < now() AND {OPEN_RECEIPT_IN_RANGES}
  ORDER BY c.deadline_at LIMIT %(limit)s)
ORDER BY since LIMIT %(limit)s"""

CALLBACK_CANDIDATES = f"""
SELECT l.job_id AS id, l.run_lease, {_CANDIDATE.format(attempt="l.attempt")},
       'lease' AS source, l.callback_timeout_at AS since
  FROM awa.leases l
  JOIN awa.ready_entries r ON {entry_of("l")}
 WHERE l.state = 'waiting_external' AND l.callback_timeout_at < now()
 ORDER BY l.callback_timeout_at LIMIT %(limit)s"""

# --- promotion ---------------------------------------------------------------------
SELECT_DUE = """
SELECT s.id, s.attempt, s.kind, s.queue
  FROM awa.deferred_jobs s
 WHERE s.run_at <= now()
   AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = s.queue AND m.paused)
 ORDER BY s.run_at, s.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED"""

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

CANCEL_DEFERRED_AS_DUPLICATE = """
WITH d AS (DELETE FROM awa.deferred_jobs WHERE id = %(id)s RETURNING *),
uq AS (
    DELETE FROM awa.job_unique_claims x USING d
     WHERE d.unique_key IS NOT NULL AND x.unique_key = d.unique_key AND x.job_id = d.id
)
INSERT INTO awa.done_entries (ready_slot, """ + ", ".join(JOB_COLUMNS) + """)
SELECT (SELECT awa.qs_slot('queue')), """ + ", ".join(
    "'cancelled'::awa.job_state" if c == "state" else "now()" if c == "finalized_at"
    else "array_append(COALESCE(d.errors, '{}'::jsonb[]), %(error)s::jsonb)" if c == "errors"
    else f"d.{c}" for c in JOB_COLUMNS) + """
  FROM d
RETURNING id, kind, queue"""

# --- retention ----------------------------------------------------------------------
# History is reclaimed by rotation: a sealed queue slot is truncated once all of it is
# past retention (rings.prune).  Row deletes are only for what rotation cannot reach:
# rows past retention still in the current slot (the ring could not rotate), and a
# queue's own shorter retention (an explicit per-queue override).
_FINALIZED_AGED = ("state = %(state)s::awa.job_state"
                   " AND finalized_at < now() - make_interval(secs => %(age_s)s)")
DELETE_FINALIZED = """
DELETE FROM awa.done_entries
 WHERE (ready_slot, id) IN (
    SELECT ready_slot, id FROM awa.done_entries WHERE """ + _FINALIZED_AGED + """ {filter}
     LIMIT %(limit)s)"""
DELETE_FINALIZED_DEFAULT = DELETE_FINALIZED.format(
    filter="AND queue <> ALL(%(excluded_queues)s::text[]) AND ready_slot = awa.qs_slot('queue')")
DELETE_FINALIZED_QUEUE = DELETE_FINALIZED.format(filter="AND queue = %(queue)s")

# --- priority aging: an aged job is re-appended one lane up, the old entry tombstoned ---
AGE_PRIORITIES = """
WITH settings AS (
    SELECT * FROM unnest(%(queues)s::text[], %(intervals_ms)s::bigint[]) AS t(queue, interval_ms)
), waiting AS (
    SELECT r.*, COALESCE((r.metadata ->> %(meta_key)s)::int, r.priority) AS original,
           extract(epoch FROM now() - r.run_at) * 1000
               / nullif(COALESCE(s.interval_ms, %(default_interval_ms)s::bigint), 0) AS steps
      FROM awa.qs_ready_live r
      LEFT JOIN settings s ON s.queue = r.queue
     WHERE r.priority > 1
       AND r.run_at <= now() - make_interval(secs => %(min_interval_s)s)
), aged AS MATERIALIZED (
    SELECT w.*, greatest(1, w.original - floor(w.steps)::int) AS new_priority
      FROM waiting w
     WHERE w.steps IS NOT NULL AND w.steps > 0
       AND greatest(1, w.original - floor(w.steps)::int) < w.priority
     LIMIT %(limit)s
), tomb AS (
    INSERT INTO awa.ready_tombstones (ready_slot, ready_id, job_id, reason)
    SELECT ready_slot, ready_id, job_id, 'aged' FROM aged
), src AS (
    SELECT job_id AS id, kind, queue, args, new_priority::smallint AS priority, attempt,
           max_attempts, run_at, attempted_at, created_at, errors,
           metadata || jsonb_build_object(%(meta_key)s::text, original) AS metadata, tags,
           unique_key, unique_states, run_lease, progress
      FROM aged
)""" + APPEND_READY + """
SELECT id FROM ready"""

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

# --- queue depths: one grouped read of the view's depth branches --------------------
QUEUE_DEPTHS = """
SELECT queue, state::text AS state, count(*) AS n,
       min(run_at) FILTER (WHERE state = 'available') AS oldest_available_at, now() AS db_now
  FROM awa.jobs
 WHERE state = ANY(%(states)s::awa.job_state[])
 GROUP BY queue, state
UNION ALL
SELECT queue, NULL, count(*), NULL, now() FROM awa.dlq_entries GROUP BY queue"""


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


class QueueStorageMaintenance(InSchema, CanonicalMaintenance):
    """The maintenance group on queue storage."""

    SELECT_DUE_SQL = SELECT_DUE
    PROMOTE_SQL = PROMOTE
    CANCEL_DEFERRED_DUPLICATE_SQL = CANCEL_DEFERRED_AS_DUPLICATE
    DELETE_FINALIZED_QUEUE_SQL = DELETE_FINALIZED_QUEUE
    DELETE_FINALIZED_DEFAULT_SQL = DELETE_FINALIZED_DEFAULT

    async def rescue_stale_heartbeats(
            self, conn: psycopg.AsyncConnection[Any], *, staleness_s: float, limit: int,
            dlq_enabled: Callable[[str], bool]) -> RescueBatch:
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
            for action, statement, to_state in (("retry", RETRY, "retryable"),
                                                ("fail", FINALIZE, "failed"),
                                                ("dlq", DEAD_LETTER, None)):
                if by_action[action]:
                    ids = set(await finish(conn, self.schema, statement, by_action[action],
                                           f"rescued_{rescue.name}", to_state, from_states))
                    done += [_rescued(r, action, rescue.dlq_reason if action == "dlq" else None)
                             for r in rows if r["id"] in ids]
            return done

        async def cancel(row: dict[str, Any]) -> list[RescuedAttempt]:
            error = lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, row["attempt"],
                                          terminal=True, cause=rescue.error)
            ids = await finish(conn, self.schema, FINALIZE,
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
        names = list(queue_intervals_ms)
        intervals = [queue_intervals_ms[n] for n in names]
        positive = [i for i in intervals + [default_interval_ms] if i > 0]
        if not positive:
            return 0
        async with conn.transaction():
            rows = await self._rows(conn, AGE_PRIORITIES, {
                "queues": names, "intervals_ms": intervals,
                "default_interval_ms": default_interval_ms,
                "min_interval_s": min(positive) / 1000.0,
                "meta_key": ORIGINAL_PRIORITY_KEY, "limit": limit})
        return len(rows)

    async def fire_cron(self, conn: psycopg.AsyncConnection[Any], schedule: ActiveCronSchedule,
                        slots: Sequence[datetime]) -> CronFired:
        from awa.storage.canonical.maintenance import ADVANCE_CRON_JOB
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
            n = int(r["n"]) if cap is None else min(int(r["n"]), cap)
            state = "dlq" if r["state"] is None else r["state"]
            if r["state"] is None:
                q["dlq_depth"] = n
            else:
                q["depth"][state] = n
            if cap is not None and n >= cap:
                q["capped"].add(state)
            if r["oldest_available_at"] is not None:
                q["oldest_available_at"] = r["oldest_available_at"]
                q["lag_s"] = max((r["db_now"] - r["oldest_available_at"]).total_seconds(), 0.0)
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
