"""Jobs in any state, written directly the way the database's engine keeps them.

Tests that need a row the runtime would take minutes to produce (a running
attempt with an old heartbeat, a failed job with three errors, a waiting job
whose callback times out soon) arrange it here instead of through a worker.
``insert_job`` asks the database which engine serves it and writes:

* canonical: one row in ``awa.jobs_hot`` or ``awa.scheduled_jobs`` (the
  tables' triggers keep unique claims);
* queue storage: a ``ready_entries`` row on its lane for available jobs; for a
  running or waiting attempt the ready entry of the previous lease plus its
  claim receipt, closed ``materialized`` into a ``leases`` row; ``deferred_jobs``
  / ``done_entries`` rows; and the unique claim its state holds.

Columns are the ``awa.jobs`` view's; values are Python values (psycopg adapts
them), missing ones take the engine's defaults.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from awa.storage import QUEUE_STORAGE, describe_layout_sync

DEFERRED = ("scheduled", "retryable")
TERMINAL = ("completed", "failed", "cancelled")
ATTEMPTS = ("running", "waiting_external")
# What a ready entry keeps of a job (the rest is attempt or terminal state).
READY_COLUMNS = ("kind", "queue", "args", "priority", "attempt", "max_attempts", "run_at",
                 "attempted_at", "created_at", "errors", "metadata", "tags", "unique_key",
                 "unique_states", "run_lease", "progress")
LEASE_COLUMNS = ("heartbeat_at", "deadline_at", "callback_id", "callback_timeout_at",
                 "callback_filter", "callback_on_complete", "callback_on_fail",
                 "callback_transform")

_QS_READY = """
INSERT INTO awa.ready_entries (ready_slot, ready_id, job_id, shard, lane_seq, {columns})
SELECT awa.qs_slot('queue'), nextval('awa.qs_ready_id_seq'), nextval('awa.jobs_id_seq'),
       lane.lane_shard, lane.base, {values}
  FROM awa.qs_reserve_lane(%(queue)s, %(priority)s::smallint) lane
RETURNING job_id AS id, ready_slot, ready_id, lane_seq, shard"""
_QS_ATTEMPT = """
WITH c AS (
    INSERT INTO awa.lease_claims (claim_slot, receipt_id, job_id, run_lease, queue, priority,
                                  attempt, claimed_at, deadline_at, ready_slot, ready_id, shard,
                                  lane_seq)
    VALUES (awa.qs_slot('claim'), nextval('awa.qs_receipt_id_seq'), %(id)s, %(run_lease)s,
            %(queue)s, %(priority)s, %(attempt)s, %(attempted_at)s, %(deadline_at)s,
            %(ready_slot)s, %(ready_id)s, %(shard)s, %(lane_seq)s)
    RETURNING *
), x AS (
    INSERT INTO awa.lease_claim_closures (claim_slot, receipt_id, job_id, run_lease, outcome)
    SELECT claim_slot, receipt_id, job_id, run_lease, 'materialized' FROM c
)
INSERT INTO awa.leases (lease_slot, job_id, run_lease, queue, state, attempt, claim_slot,
                        receipt_id, ready_slot, ready_id, claimed_at, {lease_columns})
SELECT awa.qs_slot('lease'), c.job_id, c.run_lease, c.queue, %(state)s::awa.job_state,
       c.attempt, c.claim_slot, c.receipt_id, c.ready_slot, c.ready_id, c.claimed_at,
       {lease_values}
  FROM c"""
_QS_UNIQUE = """
INSERT INTO awa.job_unique_claims (unique_key, job_id)
SELECT %(unique_key)s, %(id)s WHERE awa.qs_in_mask(%(unique_states)s::bit(8),
                                                  %(state)s::awa.job_state)"""


def _defaults(state: str, given: dict[str, Any]) -> dict[str, Any]:
    now = datetime.now(UTC)
    attempt = given.get("attempt", 1 if state in ATTEMPTS else 0)
    values: dict[str, Any] = {
        "kind": "k", "queue": "q", "args": {}, "state": state, "priority": 2,
        "attempt": attempt, "max_attempts": 25, "run_at": now,
        "attempted_at": now if attempt else None, "created_at": now, "errors": None,
        "metadata": {}, "tags": [], "unique_key": None, "unique_states": None,
        "run_lease": attempt, "progress": None,
        "heartbeat_at": now if state in ATTEMPTS else None,
        "deadline_at": None, "finalized_at": now if state in TERMINAL else None,
        "callback_id": None, "callback_timeout_at": None, "callback_filter": None,
        "callback_on_complete": None, "callback_on_fail": None, "callback_transform": None,
    }
    values.update(given)
    for key in ("args", "metadata", "progress"):
        if isinstance(values[key], (dict, list)):
            values[key] = Jsonb(values[key])
    if values["errors"] is not None:
        values["errors"] = [Jsonb(e) for e in values["errors"]]
    return values


def _list(names: tuple[str, ...] | list[str]) -> tuple[sql.Composable, sql.Composable]:
    columns = sql.SQL(", ").join(sql.Identifier(n) for n in names)
    values = sql.SQL(", ").join(sql.Placeholder(n) for n in names)
    return columns, values


def _casts(names: tuple[str, ...]) -> sql.Composable:
    casts = {"priority": "::smallint", "attempt": "::smallint", "max_attempts": "::smallint",
             "unique_states": "::bit(8)", "tags": "::text[]", "errors": "::jsonb[]"}
    return sql.SQL(", ").join(sql.SQL("{}{}").format(sql.Placeholder(n),
                                                     sql.SQL(casts.get(n, "")))
                              for n in names)


def insert_job(conn: Any, state: str = "running", **columns: Any) -> int:
    """One job in ``state`` with the given ``awa.jobs`` columns; returns its id."""
    values = _defaults(state, columns)
    if describe_layout_sync(conn).engine != QUEUE_STORAGE:
        table = "scheduled_jobs" if state in DEFERRED else "jobs_hot"
        names = [n for n in values if n != "id" or values[n] is not None]
        cols, vals = _list(names)
        query = sql.SQL("INSERT INTO awa.{} ({}) VALUES ({}) RETURNING id").format(
            sql.Identifier(table), cols, _casts(tuple(names)))
        return int(_first(conn.execute(query, values).fetchone()))
    if state in DEFERRED or state in TERMINAL:
        table = "deferred_jobs" if state in DEFERRED else "done_entries"
        names = [n for n in values if n != "id"]
        cols, _ = _list(names)
        # done_entries has no id default: the id comes from the jobs' sequence.
        slot = sql.SQL("") if state in DEFERRED else sql.SQL("ready_slot, id, ")
        slot_value = (sql.SQL("") if state in DEFERRED
                      else sql.SQL("awa.qs_slot('queue'), nextval('awa.jobs_id_seq'), "))
        query = sql.SQL("INSERT INTO awa.{} ({}{}) VALUES ({}{}) RETURNING id").format(
            sql.Identifier(table), slot, cols, slot_value, _casts(tuple(names)))
        if state in TERMINAL and values["finalized_at"] is None:
            values["finalized_at"] = datetime.now(UTC)
        job_id = int(_first(conn.execute(query, values).fetchone()))
    else:
        ready = dict(values)
        if state in ATTEMPTS:  # the entry the attempt was claimed from
            ready["attempt"] = max(values["attempt"] - 1, 0)
            ready["run_lease"] = max(values["run_lease"] - 1, 0)
        cols, _ = _list(READY_COLUMNS)
        query = sql.SQL(_QS_READY).format(columns=cols, values=_casts(READY_COLUMNS))
        row = conn.execute(query, ready).fetchone()
        job_id = int(_first(row))
        if state in ATTEMPTS:
            lease_cols, _ = _list(LEASE_COLUMNS)
            placed = dict(zip(("id", "ready_slot", "ready_id", "lane_seq", "shard"), _values(row),
                              strict=True))
            conn.execute(sql.SQL(_QS_ATTEMPT).format(lease_columns=lease_cols,
                                                     lease_values=_casts(LEASE_COLUMNS)),
                         {**values, **placed,
                          "attempted_at": values["attempted_at"] or datetime.now(UTC),
                          "heartbeat_at": values["heartbeat_at"] or datetime.now(UTC)})
        elif state != "available":
            raise ValueError(f"no such job state {state!r}")
    if values["unique_key"] is not None:
        conn.execute(_QS_UNIQUE, {**values, "id": job_id})
    return job_id


def _values(row: Any) -> list[Any]:
    return list(row.values()) if isinstance(row, dict) else list(row)


def _first(row: Any) -> Any:
    assert row is not None
    return _values(row)[0]
