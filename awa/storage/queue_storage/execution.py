"""Queue storage: the worker runtime's hot path.

Claim (``awa.qs_claim``) appends a ``lease_claims`` receipt per job and
advances the lane's claim head.  Every later write is guarded by
``(job_id, run_lease)``: an attempt is open while its receipt has no
closure evidence (``awa.qs_receipt_is_open``), or while it has a ``leases`` row
(materialized).  Ending a batch of attempts (``awa.qs_end_attempts``,
sql/execution.sql, the one copy of the rule) appends one
``lease_claim_closure_batches`` row per claim slot, the ranges of the
receipts it closes -- or deletes their lease rows -- then appends each job
where it goes next: ``done_entries``, ``deferred_jobs``, ``awa.dlq_entries``
or, for a callback's retry, its lane again.  One statement per batch.

Exactly one of two concurrent closers of an attempt wins: each claim-slot
partition of ``lease_claim_closure_batches`` has an exclusion constraint (no
two rows' receipt ranges overlap), and a closure row that would overlap one
already written (or being written) is skipped whole -- the statement then
returns a NULL id, *contested*, and ``finish`` runs the full statement again
for the attempts it missed: with a snapshot that sees the winner, it ends
only those still open.

Unique claims (``awa.job_unique_claims``) are kept by each statement itself
(there is no row whose state a trigger could watch): a move into a state of
the mask inserts the claim (a collision raises ``unique_violation`` on
``idx_awa_jobs_unique``, as on canonical), a move out of it deletes it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from awa import lifecycle
from awa.job import Job, JobState
from awa.storage.common.claims import ClaimJsonbLoader, claim_select, job_from_claim
from awa.storage.common.collisions import apply_batch_or_each
from awa.storage.common.runtime_snapshot import RuntimeSnapshotWrites
from awa.storage.engine import AppliedBatch, AttemptWrite
from awa.storage.queue_storage.procedures import Procedure
from awa.storage.queue_storage.schema import InSchema, in_schema

log = logging.getLogger("awa.storage")

CLAIM = f"SELECT {claim_select()} FROM awa.qs_claim(%s, %s, %s, %s, %s)"

# The one rule for "this receipt's attempt is still open" is the installed function
# awa.qs_receipt_is_open (sql/open_receipts.sql), which the planner inlines; every
# attempt-ending function reads it through awa.qs_attempt_receipt (in ``awa.qs_attempts``).
# Over many receipts (rescue, prune, depth counts, awa.jobs) the view awa.qs_open_receipts is
# its set form: the gaps between closed ranges, then the per-receipt closures.


def entry_of(alias: str, job_id: str = "job_id") -> str:
    """The join from a row naming a ready entry (``alias``: a receipt, a lease or an
    attempt, with ``ready_slot``, ``ready_id`` and its job's id in ``job_id``) to that entry,
    ``r``.  By the job id too: ``ready_entries`` has an index on job_id, none on ready_id."""
    return (f"r.job_id = {alias}.{job_id} AND r.ready_slot = {alias}.ready_slot"
            f" AND r.ready_id = {alias}.ready_id")


# The hot path's installed functions (sql/execution.sql), as the engine calls them.
# Every ending of an attempt; ``to_state`` says which (None: dead-lettered).
END_ATTEMPTS = Procedure("qs_end_attempts")
# The common completion: nothing buffered, so only ids and leases are sent.
FINALIZE_PLAIN = Procedure("qs_finalize_plain")
PARK = Procedure("qs_park")
HEARTBEAT = Procedure("qs_heartbeat")
FLUSH_PROGRESS = Procedure("qs_flush_progress")
# Attempts ended as their callback resolves (qs_end_attempts, the callback's timeout cleared).
RESOLVE_CALLBACKS = Procedure("qs_resolve_callbacks")

AVAILABLE_COUNTS = """
SELECT r.queue, count(*) FROM awa.qs_ready_live r
 WHERE r.queue = ANY(%s::text[])
 GROUP BY r.queue"""


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _params(attempts: Sequence[AttemptWrite], outcome: str, to_state: str | None,
            from_states: Sequence[str] = ("running",), *,
            ids_only: bool = False) -> dict[str, Any]:
    """The batch arrays; ``from_states``: which materialized attempts may end (running).
    ``ids_only``: just ids and leases (a function whose ``Procedure.ids_only`` says so)."""
    params: dict[str, Any] = {
        "from_states": list(from_states), "outcome": outcome, "to_state": to_state,
        "ids": [a.id for a in attempts], "leases": [a.run_lease for a in attempts]}
    if not ids_only:
        params.update({
            "delay": [a.delay_s for a in attempts], "error": [_jsonb(a.error) for a in attempts],
            "progress": [_jsonb(a.progress) for a in attempts],
            "meta": [_jsonb(a.metadata) for a in attempts],
            "reason": [a.reason for a in attempts]})
    return params


def _nothing_buffered(attempts: Sequence[AttemptWrite]) -> bool:
    return all(a.progress is None and a.metadata is None and a.error is None
               for a in attempts)


Statement = LiteralString | Procedure


async def _run(conn: psycopg.AsyncConnection[Any], schema: str, query: Statement,
               params: dict[str, Any]) -> tuple[list[int], bool]:
    """The ids a statement returns, and whether it was contested (a NULL among them)."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(in_schema(query.call if isinstance(query, Procedure) else query, schema),
                      params)
    rows = await cur.fetchall()
    ids = [row[0] for row in rows if row[0] is not None]
    return ids, len(ids) < len(rows)


def _reads_ids_only(statement: Statement) -> bool:
    return isinstance(statement, Procedure) and statement.ids_only


async def _ids(conn: psycopg.AsyncConnection[Any], schema: str, query: Statement,
               params: dict[str, Any]) -> list[int]:
    return (await _run(conn, schema, query, params))[0]


async def finish(conn: psycopg.AsyncConnection[Any], schema: str, statement: Statement,
                 attempts: Sequence[AttemptWrite], outcome: str, to_state: str | None,
                 from_states: Sequence[str] = ("running",), *,
                 fallback: Statement | None = None) -> list[int]:
    """Run an attempt-closing statement; while it is contested, run ``fallback`` (the
    full statement; default ``statement`` itself) for the attempts it missed.

    Contested: another closer -- a heartbeat materializing the attempt, a rescue, a
    cancel, a second delivery of this very batch -- closed one of the batch's receipts
    first, so this statement's closure row for that claim slot was skipped whole.  The
    next statement's snapshot sees the winner: it ends what is still open (a lease the
    heartbeat created included) and skips the rest.  Each contested round waited for a
    winner, so the rounds end; a stale write is simply missed.  Each attempt is sent
    once, however often the batch names it.
    """
    distinct = list({(a.id, a.run_lease): a for a in attempts}.values())
    ids, contested = await _run(conn, schema, statement, _params(
        distinct, outcome, to_state, from_states, ids_only=_reads_ids_only(statement)))
    again = fallback or statement
    pending = distinct
    while contested:
        got = set(ids)
        pending = [a for a in pending if a.id not in got]
        if not pending:
            break
        more, contested = await _run(conn, schema, again, _params(
            pending, outcome, to_state, from_states, ids_only=_reads_ids_only(again)))
        ids += more
    return ids


class QueueStorageExecution(InSchema, RuntimeSnapshotWrites):
    """The execution group of the Engine protocol on queue storage."""

    async def claim_batch(self, conn: psycopg.AsyncConnection[Any], queue: str, limit: int,
                          deadline_ms: int | None, instance_id: uuid.UUID | None = None,
                          aging_interval_ms: int = 0) -> list[Job[Any]]:
        cur = conn.cursor(row_factory=tuple_row)
        cur.adapters.register_loader("jsonb", ClaimJsonbLoader)
        await cur.execute(self.sql(CLAIM),
                          (queue, limit, deadline_ms, instance_id, aging_interval_ms))
        return [job_from_claim(row) for row in await cur.fetchall()]

    async def warm_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # qs_claim with a limit of 0 runs (so plans) its statements on no lane; the plain
        # completion of no attempt plans its short path.
        await conn.execute(self.sql(CLAIM), ("", 0, 0, None, 0))
        await _ids(conn, self.schema, FINALIZE_PLAIN,
                   _params([], "completed", "completed", ids_only=True))

    async def complete_batch(self, conn: psycopg.AsyncConnection[Any],
                             attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        if _nothing_buffered(attempts):
            return AppliedBatch(await finish(conn, self.schema, FINALIZE_PLAIN, attempts,
                                             "completed", "completed", fallback=END_ATTEMPTS))
        return AppliedBatch(await finish(conn, self.schema, END_ATTEMPTS, attempts, "completed",
                                         "completed"))

    async def retry_batch(self, conn: psycopg.AsyncConnection[Any],
                          attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, attempts, "retry", "retryable")

    async def snooze_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, attempts, "snooze", "scheduled")

    async def dead_letter_batch(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, attempts, "dead-letter", None)

    async def cancel_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        return AppliedBatch(await finish(conn, self.schema, END_ATTEMPTS, attempts, "cancelled",
                                         "cancelled"))

    async def fail_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        return AppliedBatch(await finish(conn, self.schema, END_ATTEMPTS, attempts, "failed",
                                         "failed"))

    async def park_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        return AppliedBatch(await _ids(conn, self.schema, PARK, {
            "ids": [a.id for a in attempts], "leases": [a.run_lease for a in attempts],
            "callback_ids": [a.callback_id for a in attempts],
            "progress": [_jsonb(a.progress) for a in attempts],
            "meta": [_jsonb(a.metadata) for a in attempts]}))

    async def cancel_superseded(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        marked = [AttemptWrite(a.id, a.run_lease,
                               error=lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE,
                                                           a.attempt))
                  for a in attempts]
        return await finish(conn, self.schema, END_ATTEMPTS, marked, "superseded", "cancelled")

    async def heartbeat_batch(self, conn: psycopg.AsyncConnection[Any],
                              attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        return await finish(conn, self.schema, HEARTBEAT, attempts, "materialized", None)

    async def flush_progress_batch(self, conn: psycopg.AsyncConnection[Any],
                                   attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        return await _ids(conn, self.schema, FLUSH_PROGRESS, _params(attempts, "progress", None))

    async def available_counts(self, conn: psycopg.AsyncConnection[Any],
                               queues: Sequence[str]) -> dict[str, int]:
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(self.sql(AVAILABLE_COUNTS), (list(queues),))
        return {queue: int(n) for queue, n in await cur.fetchall()}

    async def _move(self, conn: psycopg.AsyncConnection[Any],
                    attempts: Sequence[AttemptWrite], what: str,
                    to_state: str | None) -> AppliedBatch:
        """Retry, snooze, dead-letter: one statement; on a unique collision the shared
        fallback (row by row, the superseded attempt cancelled)."""
        if not attempts:
            return AppliedBatch()
        outcome_name = to_state or "dead_lettered"
        if conn.autocommit:
            try:
                return AppliedBatch(await finish(conn, self.schema, END_ATTEMPTS, attempts,
                                                 outcome_name, to_state))
            except psycopg.errors.UniqueViolation:
                pass

        async def batch(items: Sequence[AttemptWrite]) -> list[int]:
            return await finish(conn, self.schema, END_ATTEMPTS, items, outcome_name, to_state)

        async def supersede(item: AttemptWrite) -> list[int]:
            return await self.cancel_superseded(conn, [item])

        outcome = await apply_batch_or_each(conn, attempts, batch=batch, on_collision=supersede,
                                            what=f"{what} of {len(attempts)} job(s)")
        for job_id in outcome.superseded:
            log.info("job %s: %s collided with a newer unique job; cancelled", job_id, what)
        return AppliedBatch(outcome.applied, outcome.superseded)


__all__ = ["QueueStorageExecution", "JobState"]
