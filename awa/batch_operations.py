"""Durable batch operations: ``set_priority`` and ``move_queue`` over a filter.

An operator previews (how many jobs match now, and a sample), submits, and
watches; the maintenance leader runs the operation in the background:

1. ``pending -> scanning``: the highest matching id is fixed as the upper bound;
   matching ids are recorded as items, a page (``BATCH_OP_SCAN_PAGE``) per
   transaction with the cursor moved in the same transaction;
2. ``running``: chunks of ``BATCH_OP_CHUNK_SIZE`` pending items: each chunk changes its
   jobs and records their outcomes and the counters in ONE transaction, so a
   crash (a SIGKILLed leader) resumes at the next chunk and no job is changed twice;
3. ``completed`` (or ``cancelling -> cancelled``: cooperative, between steps; what
   changed stays changed; pending items are marked skipped).

Only ``available`` and ``scheduled`` jobs are matched or changed; a job a worker
claimed meanwhile is skipped.  Names and rules are the Rust-core awa's (ADR-030).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa import config
from awa.admin import ConnectionLender
from awa.job import Job, ValidationError
from awa.storage.common.enqueue import storable_text, validate_queue
from awa.storage.engine import BatchOperation, Engine

OP_KINDS = ("set_priority", "move_queue")
STATES = ("pending", "scanning", "running", "cancelling", "completed", "cancelled", "failed")
FILTER_KEYS = ("kind", "queue", "ids", "tag", "state", "created_at_gte", "created_at_lt")
ELIGIBLE_STATES = ("available", "scheduled")


def _priority(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or \
            not config.MIN_PRIORITY <= value <= config.MAX_PRIORITY:
        raise ValidationError(f"{what} must be an integer from {config.MIN_PRIORITY} to "
                              f"{config.MAX_PRIORITY}, got {value!r}")
    return value


def _timestamp(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    try:
        return datetime.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise ValidationError(f"{what} must be an ISO 8601 timestamp, got {value!r}") from None


def normalize_filter(op_kind: str, flt: dict[str, Any] | None) -> dict[str, Any]:
    """All seven keys (null when unset), checked: unknown keys and bad states refused."""
    flt = dict(flt or {})
    unknown = sorted(set(flt) - set(FILTER_KEYS))
    if unknown:
        raise ValidationError(f"unknown filter field(s) {', '.join(unknown)}; expected "
                              f"{', '.join(FILTER_KEYS)}")
    state = flt.get("state")
    if state is not None and state not in ELIGIBLE_STATES:
        raise ValidationError(f"{op_kind} only supports available or scheduled state filters")
    ids = flt.get("ids")
    if ids is not None and (not isinstance(ids, list | tuple)
                            or not all(isinstance(i, int) and not isinstance(i, bool)
                                       for i in ids)):
        raise ValidationError("filter ids must be a list of integers")
    out = {k: flt.get(k) for k in FILTER_KEYS}
    if out["queue"] is not None:
        validate_queue(out["queue"])
    for key in ("kind", "tag"):
        text = out[key]
        if text is not None:
            if not isinstance(text, str):
                raise ValidationError(f"filter {key} must be a string, got {text!r}")
            storable_text(text, f"filter {key}")
    out["ids"] = list(ids) if ids else None
    out["created_at_gte"] = _timestamp(flt.get("created_at_gte"), "created_at_gte")
    out["created_at_lt"] = _timestamp(flt.get("created_at_lt"), "created_at_lt")
    return out


def filter_is_empty(flt: dict[str, Any]) -> bool:
    return all(not flt.get(k) for k in FILTER_KEYS)


def normalize_spec(op_kind: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    """The stored, internally tagged spec: ``{"op_kind": ..., ...}``."""
    spec = dict(spec or {})
    if op_kind == "set_priority":
        return {"op_kind": op_kind, "priority": _priority(spec.get("priority"), "priority")}
    if op_kind == "move_queue":
        queue = validate_queue(spec.get("queue"))  # the one rule, as for every queue name
        priority = spec.get("priority")
        return {"op_kind": op_kind, "queue": queue,
                "priority": None if priority is None else _priority(priority, "priority")}
    raise ValidationError(f"unknown op_kind {op_kind!r}; expected one of {', '.join(OP_KINDS)}")


def parse_id(op_id: Any) -> uuid.UUID:
    try:
        return op_id if isinstance(op_id, uuid.UUID) else uuid.UUID(str(op_id))
    except ValueError:
        raise ValidationError(f"batch operation ids are UUIDs, got {op_id!r}") from None


class BatchOperationsMixin(ConnectionLender):
    """Batch operations on what ``ConnectionLender`` lends (the CLI, the API and the console
    use these).

    An operation comes back as the engine's ``BatchOperation``, every column of its row as
    an attribute; the CLI's and the REST API's JSON show ``BatchOperation.to_dict()``.
    (awa-pg 0.6.9 answers with a ``BatchOperation`` object too, never a dict.)"""

    async def preview_batch_operation(self, op_kind: str, filter: dict[str, Any] | None,
                                      spec: dict[str, Any] | None, *,
                                      sample: int = config.BATCH_OP_PREVIEW_SAMPLE
                                      ) -> tuple[int, list[Job[Any]]]:
        """How many jobs the operation would change now, and the lowest ids of them.
        Advisory: nothing is locked or stored."""
        normalize_spec(op_kind, spec)
        flt = normalize_filter(op_kind, filter)
        engine = await self._get_engine()
        async with self._connection() as conn:
            preview = await engine.batch_preview(conn, flt, sample=sample)
        return preview.total_matched, preview.sample

    async def submit_batch_operation(self, op_kind: str, filter: dict[str, Any] | None,
                                     spec: dict[str, Any] | None, *,
                                     submitted_by: str | None = None,
                                     allow_all: bool = False) -> BatchOperation:
        """Store the operation (``pending``); the maintenance leader runs it."""
        stored_spec = normalize_spec(op_kind, spec)
        flt = normalize_filter(op_kind, filter)
        if filter_is_empty(flt) and not allow_all:
            raise ValidationError("refusing a batch operation over every job without a filter:"
                                  " give kind/queue/tag/state/ids/created_at, or all=true "
                                  "(CLI: --all)")
        engine = await self._get_engine()
        async with self._connection() as conn:
            op = await engine.batch_insert(conn, op_kind=op_kind, filter=flt,
                                           spec=stored_spec, submitted_by=submitted_by)
        return op

    async def list_batch_operations(self, *, state: str | None = None,
                                    limit: int = 100) -> list[BatchOperation]:
        if state is not None and state not in STATES:
            raise ValidationError(f"unknown batch operation state {state!r}; expected one of "
                                  f"{', '.join(STATES)}")
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.batch_list(conn, state=state,
                                           limit=max(1, min(limit, 1000)))

    async def get_batch_operation(self, op_id: Any) -> BatchOperation:
        engine = await self._get_engine()
        async with self._connection() as conn:
            found = await engine.batch_get(conn, parse_id(op_id))
        if found is None:
            raise ValidationError(f"batch operation not found: {op_id}")
        return found

    async def cancel_batch_operation(self, op_id: Any) -> BatchOperation:
        engine = await self._get_engine()
        async with self._connection() as conn:
            found = await engine.batch_request_cancel(conn, parse_id(op_id))
        if found is None:
            raise ValidationError(f"batch operation cannot be cancelled: {op_id}")
        return found


async def run_batch_operations(pool: AsyncConnectionPool, engine: Engine, *,
                               runner: uuid.UUID,
                               chunk: int = config.BATCH_OP_CHUNK_SIZE,
                               scan_page: int = config.BATCH_OP_SCAN_PAGE,
                               budget_s: float = config.BATCH_OP_TICK_BUDGET_S,
                               retention_days: float = config.BATCH_OP_RETENTION_DAYS,
                               pace: float = config.BATCH_OP_PACE) -> dict[str, float]:
    """One maintenance tick: steps of the oldest active operation until ``budget_s``
    is spent (at least one step) or none is left.  Each step is one transaction holding
    the operation's row lock (so two runners never step the same operation at once),
    followed by a rest of ``pace`` times its own duration (``config.BATCH_OP_PACE``).
    Returns the tick's counts, and the seconds it worked (``busy_s``) and rested."""
    done: dict[str, float] = {"steps": 0, "processed": 0, "skipped": 0, "errored": 0,
                              "finished": 0, "busy_s": 0.0, "rested_s": 0.0}
    deadline = time.monotonic() + budget_s
    async with pool.connection() as conn:
        while True:
            step_started = time.monotonic()
            async with conn.transaction():
                op = await engine.batch_next_active(conn)
                if op is None:
                    break
                done["steps"] += 1
                if op.state == "cancelling":
                    await engine.batch_finish(conn, op.id, cancelled=True,
                                              retention_days=retention_days)
                    done["finished"] += 1
                elif op.state == "pending":
                    await engine.batch_start_scan(conn, op, runner)
                elif op.state == "scanning":
                    moved = await engine.batch_scan_page(conn, op, op.scan_cursor, runner,
                                                         scan_page)
                    if moved is None:
                        await engine.batch_scanned(conn, op.id)
                else:  # running
                    outcome = await engine.batch_apply_chunk(conn, op, chunk)
                    if outcome is None:
                        await engine.batch_finish(conn, op.id, cancelled=False,
                                                  retention_days=retention_days)
                        done["finished"] += 1
                    else:
                        done["processed"] += outcome.processed
                        done["skipped"] += outcome.skipped
                        done["errored"] += outcome.errored
            busy = time.monotonic() - step_started
            done["busy_s"] += busy
            rest_started = time.monotonic()
            await asyncio.sleep(pace * busy)
            done["rested_s"] += time.monotonic() - rest_started
            if time.monotonic() >= deadline:
                break
    return done
