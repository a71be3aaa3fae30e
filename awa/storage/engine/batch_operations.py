"""The batch-operations group: durable ``set_priority`` / ``move_queue`` over a filter
(the module ``awa.batch_operations`` runs them), its operation rows, their items, and the
chunked change."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import psycopg

from awa.job import Job


@dataclass(frozen=True)
class BatchOperation:
    """One operation: a row of ``awa.batch_operations`` (migration 0005), its columns in
    table order.  ``filter`` and ``spec`` are its documents as stored; ``cursor`` holds
    the scan's position (``scan_cursor``) and the highest item id a chunk finished
    (``applied_through``)."""

    id: uuid.UUID
    op_kind: str
    filter: dict[str, Any]
    spec: dict[str, Any]
    state: str
    submitted_by: str | None
    submitted_at: datetime
    started_at: datetime | None
    finalized_at: datetime | None
    cursor: dict[str, Any] | None
    total_matched: int | None
    processed: int
    skipped: int
    errored: int
    last_error: str | None
    runner_instance: uuid.UUID | None
    retention_until: datetime | None
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The row as the client API, ``awa batch --json`` and ``/api/batch-ops`` show it:
        every column, in table order, values as read."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def scan_cursor(self) -> ScanCursor:
        """Where the scan stands (the start, before ``batch_start_scan`` stored one)."""
        if not self.cursor:
            return ScanCursor()
        return ScanCursor(int(self.cursor["after_job_id"]), int(self.cursor["max_job_id"]))

    @property
    def applied_through(self) -> int:
        """The highest item id a chunk has finished (0 before the first)."""
        return int((self.cursor or {}).get("applied_through") or 0)


# The columns every statement reads an operation by (never ``*``: a column a later release
# adds is not this code's).
BATCH_OPERATION_COLUMNS = tuple(f.name for f in dataclasses.fields(BatchOperation))


@dataclass(frozen=True)
class ScanCursor:
    """The scan's position: items are recorded for matching ids in ``(after_job_id,
    max_job_id]``; ``max_job_id`` is the highest matching id when the scan started."""

    after_job_id: int = 0
    max_job_id: int = 0


@dataclass(frozen=True)
class BatchPreview:
    """How many jobs an operation would change now, and the lowest ids of them."""

    total_matched: int
    sample: list[Job[Any]]


@dataclass(frozen=True)
class ChunkOutcome:
    """What one chunk did to its items."""

    processed: int
    skipped: int
    errored: int


class BatchOps(Protocol):
    """The operation rows, their items, and the chunked change of matched jobs.

    Only ``available`` and ``scheduled`` jobs are ever matched or changed.
    ``filter`` is the operation's filter document (kind, queue, tag, state, ids,
    created_at_gte, created_at_lt; absent or null = unset), ``spec`` its change
    document (``awa.batch_operations.normalize_spec``); both are stored as given.  The caller
    owns every transaction: one scan page, or one chunk with its outcomes, per transaction.
    """

    async def batch_insert(self, conn: psycopg.AsyncConnection[Any], *, op_kind: str,
                           filter: dict[str, Any], spec: dict[str, Any],
                           submitted_by: str | None) -> BatchOperation:
        ...

    async def batch_list(self, conn: psycopg.AsyncConnection[Any], *, state: str | None,
                         limit: int) -> list[BatchOperation]:
        """Newest first."""
        ...

    async def batch_get(self, conn: psycopg.AsyncConnection[Any],
                        op_id: uuid.UUID) -> BatchOperation | None:
        ...

    async def batch_request_cancel(self, conn: psycopg.AsyncConnection[Any],
                                   op_id: uuid.UUID) -> BatchOperation | None:
        """pending/scanning/running -> cancelling; None when not cancellable (or unknown)."""
        ...

    async def batch_preview(self, conn: psycopg.AsyncConnection[Any], filter: dict[str, Any],
                            *, sample: int) -> BatchPreview:
        """How many jobs match now, and the ``sample`` lowest ids of them."""
        ...

    async def batch_next_active(self, conn: psycopg.AsyncConnection[Any]) -> BatchOperation | None:
        """The oldest active operation, locked (``SKIP LOCKED``) for the transaction."""
        ...

    async def batch_start_scan(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                               runner: uuid.UUID) -> ScanCursor:
        """pending -> scanning: the upper bound of the ids to match is fixed now."""
        ...

    async def batch_scan_page(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                              cursor: ScanCursor, runner: uuid.UUID,
                              page: int) -> ScanCursor | None:
        """Record the next page of matching ids as items (the cursor moved in the same
        transaction); None when the scan is done."""
        ...

    async def batch_scanned(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID) -> None:
        """scanning -> running, the matched items counted."""
        ...

    async def batch_apply_chunk(self, conn: psycopg.AsyncConnection[Any], op: BatchOperation,
                                limit: int) -> ChunkOutcome | None:
        """The change on the next ``limit`` pending items, their outcomes and the counters;
        None when nothing is pending."""
        ...

    async def batch_finish(self, conn: psycopg.AsyncConnection[Any], op_id: uuid.UUID, *,
                           cancelled: bool, retention_days: float) -> BatchOperation:
        """-> completed, or cancelled (its pending items skipped)."""
        ...
