"""The enqueue group: insert batch, COPY batch, unique-holder lookup."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg

from awa.job import Job, JobState


@dataclass
class EnqueueBatch:
    """Validated, encoded columns of the rows one statement writes.

    Built by ``awa.storage.common.enqueue.build_batch`` before anything is
    written, so bad input fails with one line; every engine writes the same
    columns.  ``originals`` are the caller's own args objects, handed back in
    the returned jobs.
    """

    kind: list[str] = field(default_factory=list)
    queue: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)  # JSON text, exactly as stored
    priority: list[int] = field(default_factory=list)
    max_attempts: list[int] = field(default_factory=list)
    run_at: list[datetime | None] = field(default_factory=list)
    metadata: list[str] = field(default_factory=list)  # JSON text
    tags: list[str] = field(default_factory=list)  # text[] literals
    unique_key: list[bytes | None] = field(default_factory=list)
    unique_states: list[str | None] = field(default_factory=list)  # bit(8) text
    originals: list[Any] = field(default_factory=list)
    metadata_dicts: list[dict[str, Any]] = field(default_factory=list)
    tag_lists: list[list[str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def needs_general(self) -> bool:
        """Unique keys or explicit run_at need the general statement."""
        return self.has_unique or any(r is not None for r in self.run_at)

    @property
    def has_unique(self) -> bool:
        return any(k is not None for k in self.unique_key)

    def chunks(self, size: int) -> list[EnqueueBatch]:
        """Slices of at most ``size`` rows, each written by one statement."""
        if len(self) <= size:
            return [self]
        names = [f.name for f in dataclasses.fields(self)]
        return [EnqueueBatch(**{n: getattr(self, n)[i:i + size] for n in names})
                for i in range(0, len(self), size)]


@dataclass
class InsertOutcome:
    """What one insert wrote: the jobs (when asked to return them) and the duplicates left out."""

    jobs: list[Job[Any]]
    """The inserted jobs in input order (empty when ``returning=False``)."""
    inserted: int
    skipped: int
    """Unique duplicates left out (their key was already claimed, or earlier in the batch)."""


@dataclass(frozen=True)
class UniqueHolder:
    """The job holding a unique key's claim."""

    job_id: int
    state: JobState | None
    """``None`` when the claim names a job that no longer exists (a wedged claim)."""


class EnqueueOps(Protocol):
    """Producer side: appends jobs in the caller's transaction.

    A lost race with a concurrent producer on a unique key is retried inside
    the engine; only a key that stays taken is reported, and only for inserts
    that must report it (a single insert raises ``UniqueConflict`` from the
    ``skipped`` count, a bulk insert just skips).
    """

    async def insert_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                           returning: bool = True) -> InsertOutcome:
        """One statement per batch; duplicates of a claimed unique key are skipped."""
        ...

    def insert_batch_sync(self, conn: psycopg.Connection[Any], batch: EnqueueBatch,
                          returning: bool = True) -> InsertOutcome:
        """``insert_batch`` on a user's blocking connection (``awa.bridge.insert_job_sync``)."""
        ...

    async def copy_batch(self, conn: psycopg.AsyncConnection[Any], batch: EnqueueBatch,
                         returning: bool = True) -> InsertOutcome:
        """The same rows written through ``COPY``: the bulk path."""
        ...

    async def unique_holder(self, conn: psycopg.AsyncConnection[Any],
                            key: bytes) -> UniqueHolder | None:
        """Who holds ``key``'s unique claim; ``None`` when nobody does."""
        ...

    def unique_holder_sync(self, conn: psycopg.Connection[Any],
                           key: bytes) -> UniqueHolder | None:
        ...
