"""Rescue: attempts whose owner is gone (stale heartbeat), that ran past their
deadline, or whose callback wait expired.

Each rescue counts the attempt: retryable with backoff while attempts remain,
else ``failed`` or the DLQ.  A batch is two statements (lock the candidates,
move them all); if a move collides with a newer holder of the job's unique
key, the batch degrades to row-at-a-time and the superseded attempt is
cancelled (``rescued as duplicate``), so one wedged row never stops rescue of
the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa import config, lifecycle
from awa.runtime.maintenance import recording
from awa.storage.canonical import maintenance as sql

log = logging.getLogger("awa.maintenance.rescue")


@dataclass(frozen=True)
class RescueKind:
    """One way an attempt ends without its handler saying so."""

    name: str            # the awa.rescue.kind attribute value
    select_sql: str
    state: str           # the state the attempt is found in
    error: str           # the seed's error text
    dlq_reason: str


HEARTBEAT_STALE = RescueKind("heartbeat", sql.SELECT_STALE_HEARTBEATS, "running",
                             lifecycle.HEARTBEAT_STALE_ERROR, lifecycle.DLQ_HEARTBEAT_STALE)
DEADLINE_EXCEEDED = RescueKind("deadline", sql.SELECT_EXPIRED_DEADLINES, "running",
                               lifecycle.DEADLINE_EXCEEDED_ERROR,
                               lifecycle.DLQ_DEADLINE_EXCEEDED)
CALLBACK_TIMEOUT = RescueKind("callback", sql.SELECT_EXPIRED_CALLBACKS,
                              "waiting_external", lifecycle.CALLBACK_TIMEOUT_ERROR,
                              lifecycle.DLQ_CALLBACK_TIMEOUT)


@dataclass
class RescueOutcome:
    retried: int = 0
    failed: int = 0
    dead_lettered: int = 0
    duplicates: int = 0
    statements: int = 0
    batches: int = 0
    # (job_id, run_lease) of every attempt ended here, for the cancel flags.
    ended: list[tuple[int, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.retried + self.failed + self.dead_lettered + self.duplicates


def _plan(rows: list[dict[str, Any]], kind: RescueKind,
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
        plan["errors"].append(Jsonb(lifecycle.error_entry(kind.error, row["attempt"],
                                                          terminal=exhausted)))
        plan["dlq_reasons"].append(kind.dlq_reason if action == "dlq" else None)
    return {**plan, "state": kind.state}


def _count(outcome: RescueOutcome, applied: list[dict[str, Any]], kind: RescueKind,
           *, record: bool = True) -> None:
    for row in applied:
        outcome.ended.append((row["id"], row["run_lease"]))
        if row["action"] == "retry":
            outcome.retried += 1
        elif row["action"] == "fail":
            outcome.failed += 1
        else:
            outcome.dead_lettered += 1
    if record:
        recording.record_rescues(kind.name, applied)


async def _rescue_batch(conn: psycopg.AsyncConnection[Any], kind: RescueKind, outcome: RescueOutcome,
                        *, batch_size: int, staleness_ms: int,
                        dlq_enabled: Callable[[str], bool]) -> int:
    """One batch; returns how many candidates it found."""
    params = {"limit": batch_size, "staleness_s": staleness_ms / 1000.0}
    try:
        async with conn.transaction():
            rows = await (await conn.execute(kind.select_sql, params)).fetchall()
            outcome.statements += 1
            if not rows:
                return 0
            applied = await (await conn.execute(sql.APPLY_RESCUE,
                                                _plan(rows, kind, dlq_enabled))).fetchall()
            outcome.statements += 1
    except psycopg.errors.UniqueViolation as exc:
        outcome.statements += 1
        log.warning("rescue of %s jobs collided on a unique key (%s); retrying row by row",
                    kind.name, " ".join(str(exc).split()))
        return await _rescue_row_at_a_time(conn, kind, outcome, params=params,
                                           dlq_enabled=dlq_enabled)
    _count(outcome, applied, kind)
    return len(rows)


async def _rescue_row_at_a_time(conn: psycopg.AsyncConnection[Any], kind: RescueKind,
                                outcome: RescueOutcome, *, params: dict[str, Any],
                                dlq_enabled: Callable[[str], bool]) -> int:
    """The wedge fallback: each row in its own savepoint; a collision cancels it."""
    committed: list[dict[str, Any]] = []  # recorded once the outer transaction commits
    async with conn.transaction():
        rows = await (await conn.execute(kind.select_sql, params)).fetchall()
        outcome.statements += 1
        for row in rows:
            try:
                async with conn.transaction():
                    applied = await (await conn.execute(
                        sql.APPLY_RESCUE, _plan([row], kind, dlq_enabled))).fetchall()
                    outcome.statements += 1
                _count(outcome, applied, kind, record=False)
                committed.extend(applied)
            except psycopg.errors.UniqueViolation:
                outcome.statements += 1
                error = lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, row["attempt"],
                                              terminal=True, cause=kind.error)
                try:
                    async with conn.transaction():
                        cancelled = await (await conn.execute(
                            sql.CANCEL_RUNNING_AS_DUPLICATE, {
                                "id": row["id"], "run_lease": row["run_lease"],
                                "state": kind.state, "error": Jsonb(error)})).fetchall()
                        outcome.statements += 1
                except psycopg.errors.UniqueViolation:
                    # Only a mask that includes cancelled gets here: nothing safe is left.
                    log.error("job %s cannot be rescued or cancelled: its unique_states mask "
                              "includes cancelled and a newer job holds its key; cancel the "
                              "newer job or fix the mask (see the unique-claim wedge runbook)",
                              row["id"])
                    continue
                for c in cancelled:
                    outcome.duplicates += 1
                    outcome.ended.append((c["id"], c["run_lease"]))
                    log.warning("job %s (%s) %s: a newer job holds its unique key",
                                c["id"], c["kind"], lifecycle.RESCUED_AS_DUPLICATE)
                committed.extend(cancelled)
    recording.record_rescues(kind.name, committed)
    return len(rows)


async def rescue(pool: AsyncConnectionPool, kind: RescueKind, *,
                 batch_size: int = config.RESCUE_BATCH_SIZE,
                 staleness_ms: int = config.HEARTBEAT_STALENESS_MS,
                 dlq_enabled: Callable[[str], bool] = lambda queue: False,
                 in_flight: Mapping[tuple[int, int], Any] | None = None,
                 max_batches: int = config.MAINTENANCE_MAX_BATCHES_PER_TICK) -> RescueOutcome:
    """Rescue up to ``max_batches`` batches of one kind; flag rescued local handlers."""
    outcome = RescueOutcome()
    async with pool.connection() as conn:
        for _ in range(max_batches):
            found = await _rescue_batch(conn, kind, outcome, batch_size=batch_size,
                                        staleness_ms=staleness_ms, dlq_enabled=dlq_enabled)
            if found:
                outcome.batches += 1
            if found < batch_size:
                break
    if in_flight:
        for key in outcome.ended:
            ctx = in_flight.get(key)
            if ctx is not None:
                ctx.cancel(kind.error)
    if outcome.total:
        log.info("rescued %d %s jobs: %d retryable, %d failed, %d dead-lettered, "
                 "%d cancelled as duplicates", outcome.total, kind.name, outcome.retried,
                 outcome.failed, outcome.dead_lettered, outcome.duplicates)
    return outcome
