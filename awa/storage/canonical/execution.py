"""Hot-path SQL of the worker runtime on the canonical engine.

Every statement after the claim is guarded by ``(id, run_lease)`` and the
expected state, so a write for an attempt that was cancelled, rescued or
re-claimed meanwhile matches nothing (a stale write) instead of clobbering
the newer state.  Batches are arrays bound once and expanded with
``unnest``: one round trip per batch, never one per job.

Jobs moving between ``awa.jobs_hot`` and ``awa.scheduled_jobs`` (retry,
snooze) or into ``awa.dlq_entries`` are DELETEd and INSERTed in one
statement, keeping their id.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from awa import lifecycle
from awa.job import Job, JobState
from awa.statements import named_statements
from awa.storage.common.claims import ClaimJsonbLoader, job_from_claim
from awa.storage.common.collisions import apply_batch_or_each
from awa.storage.common.runtime_snapshot import RuntimeSnapshotWrites
from awa.storage.engine import AppliedBatch, AttemptWrite

log = logging.getLogger("awa.storage")

# Every statement is in sql/execution.sql, read once, at import: the claim, the guarded batch
# writes (each locking its rows in id order first: the file's header says why) and the
# dispatcher's counts.  Arrays of ids, leases, jsonb and uuids are %b placeholders
# (awa.db.BINARY_ARRAY_TYPES).
_SQL = named_statements("awa.storage.canonical", "sql/execution.sql")
CLAIM_JOBS = _SQL["claim_jobs"]  # columns as common.claims.claim_select("j"): job_from_claim
COMPLETE_JOBS = _SQL["complete_jobs"]
COMPLETE_JOBS_WITH_PROGRESS = _SQL["complete_jobs_with_progress"]
FINALIZE_JOBS = _SQL["finalize_jobs"]
PARK_JOBS = _SQL["park_jobs"]
RETRY_JOBS = _SQL["retry_jobs"]
SNOOZE_JOBS = _SQL["snooze_jobs"]
DEAD_LETTER_JOBS = _SQL["dead_letter_jobs"]
CANCEL_SUPERSEDED = _SQL["cancel_superseded"]
HEARTBEAT_JOBS = _SQL["heartbeat_jobs"]
FLUSH_PROGRESS = _SQL["flush_progress"]
AVAILABLE_COUNTS = _SQL["available_counts"]


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


async def _ids(conn: psycopg.AsyncConnection[Any], query: str,
               params: Sequence[Any]) -> list[int]:
    """Run a guarded write on a tuple-row cursor (the hot path never builds dict rows)
    and return the ids it touched."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(query, params)
    return [row[0] for row in await cur.fetchall()]


def _in_id_order(attempts: Sequence[AttemptWrite]) -> list[AttemptWrite]:
    """A batch sorted by job id.  One worker's heartbeat and completion batches run at once on
    two connections and can name the same jobs: each statement locks its rows as it joins
    them in the arrays' order (one index probe per id), so sorted arrays lock in one order
    and the two never deadlock (tests/upgrade found them doing so)."""
    return sorted(attempts, key=lambda a: a.id)


def _buffered(attempts: Sequence[AttemptWrite]) -> tuple[list[Jsonb | None], list[Jsonb | None]]:
    return ([None if a.progress is None else Jsonb(a.progress) for a in attempts],
            [None if a.metadata is None else Jsonb(a.metadata) for a in attempts])


def _move_params(attempts: Sequence[AttemptWrite]) -> tuple[Any, ...]:
    progress, meta = _buffered(attempts)
    return ([a.id for a in attempts], [a.run_lease for a in attempts],
            [a.delay_s for a in attempts], [_jsonb(a.error) for a in attempts],
            progress, meta, [a.reason for a in attempts])


def _finalize_params(state: JobState, attempts: Sequence[AttemptWrite]) -> tuple[Any, ...]:
    progress, meta = _buffered(attempts)
    return (state.value, [a.id for a in attempts], [a.run_lease for a in attempts],
            [_jsonb(a.error) for a in attempts], progress, meta)


def _progress_params(attempts: Sequence[AttemptWrite]) -> tuple[Any, ...]:
    progress, meta = _buffered(attempts)
    return ([a.id for a in attempts], [a.run_lease for a in attempts], progress, meta)


class CanonicalExecution(RuntimeSnapshotWrites):
    """The execution group of the Engine protocol on the canonical engine."""

    async def claim_batch(self, conn: psycopg.AsyncConnection[Any], queue: str, limit: int,
                          deadline_ms: int | None, instance_id: uuid.UUID | None = None,
                          aging_interval_ms: int = 0) -> list[Job[Any]]:
        cur = conn.cursor(row_factory=tuple_row)
        cur.adapters.register_loader("jsonb", ClaimJsonbLoader)
        await cur.execute(CLAIM_JOBS, (queue, queue, limit, deadline_ms, instance_id))
        return [job_from_claim(row) for row in await cur.fetchall()]

    async def warm_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # No queue has the empty name; a limit of 0 claims nothing, an empty batch ends nothing.
        await conn.execute(CLAIM_JOBS, ("", "", 0, 0, None))
        await _ids(conn, COMPLETE_JOBS, ([], []))

    async def complete_batch(self, conn: psycopg.AsyncConnection[Any],
                             attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        ids = [a.id for a in attempts]
        leases = [a.run_lease for a in attempts]
        if any(a.progress is not None or a.metadata is not None for a in attempts):
            progress, meta = _buffered(attempts)
            return AppliedBatch(await _ids(conn, COMPLETE_JOBS_WITH_PROGRESS,
                                           (ids, leases, progress, meta)))
        return AppliedBatch(await _ids(conn, COMPLETE_JOBS, (ids, leases)))

    async def retry_batch(self, conn: psycopg.AsyncConnection[Any],
                          attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, RETRY_JOBS, attempts, "retry")

    async def snooze_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, SNOOZE_JOBS, attempts, "snooze")

    async def dead_letter_batch(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, DEAD_LETTER_JOBS, attempts, "dead-letter")

    async def cancel_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        return AppliedBatch(await _ids(conn, FINALIZE_JOBS,
                                       _finalize_params(JobState.Cancelled, attempts)))

    async def fail_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        return AppliedBatch(await _ids(conn, FINALIZE_JOBS,
                                       _finalize_params(JobState.Failed, attempts)))

    async def park_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        progress, meta = _buffered(attempts)
        return AppliedBatch(await _ids(conn, PARK_JOBS, (
            [a.id for a in attempts], [a.run_lease for a in attempts],
            [a.callback_id for a in attempts], progress, meta)))

    async def cancel_superseded(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        attempts = _in_id_order(attempts)
        errors = [Jsonb(lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE, a.attempt))
                  for a in attempts]
        return await _ids(conn, CANCEL_SUPERSEDED,
                          ([a.id for a in attempts], [a.run_lease for a in attempts], errors))

    async def heartbeat_batch(self, conn: psycopg.AsyncConnection[Any],
                              attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        attempts = _in_id_order(attempts)
        return await _ids(conn, HEARTBEAT_JOBS, _progress_params(attempts))

    async def flush_progress_batch(self, conn: psycopg.AsyncConnection[Any],
                                   attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        attempts = _in_id_order(attempts)
        return await _ids(conn, FLUSH_PROGRESS, _progress_params(attempts))

    async def available_counts(self, conn: psycopg.AsyncConnection[Any],
                               queues: Sequence[str]) -> dict[str, int]:
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(AVAILABLE_COUNTS, (list(queues),))
        return {queue: int(n) for queue, n in await cur.fetchall()}

    async def _move(self, conn: psycopg.AsyncConnection[Any], statement: str,
                    attempts: Sequence[AttemptWrite], what: str) -> AppliedBatch:
        """A move out of ``jobs_hot`` (retry, snooze, dead-letter): one statement, and
        on a unique collision the shared fallback (row by row, the superseded
        attempt cancelled) so one wedged row never stops the rest."""
        if not attempts:
            return AppliedBatch()
        attempts = _in_id_order(attempts)
        if conn.autocommit:
            # The common case in one round trip: a lone statement is atomic by
            # itself; the fallback's transaction is only paid when it collides.
            try:
                return AppliedBatch(await _ids(conn, statement, _move_params(attempts)))
            except psycopg.errors.UniqueViolation:
                pass

        async def batch(items: Sequence[AttemptWrite]) -> list[int]:
            return await _ids(conn, statement, _move_params(items))

        async def supersede(item: AttemptWrite) -> list[int]:
            return await self.cancel_superseded(conn, [item])

        outcome = await apply_batch_or_each(conn, attempts, batch=batch, on_collision=supersede,
                                            what=f"{what} of {len(attempts)} job(s)")
        for job_id in outcome.superseded:
            log.info("job %s: %s collided with a newer unique job; cancelled", job_id, what)
        return AppliedBatch(outcome.applied, outcome.superseded)
