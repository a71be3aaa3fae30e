"""Exactly which jobs a bulk command touches: the one selection rule.

``awa dlq retry-bulk|purge|move`` and ``awa job retry-failed`` (``--dry-run``
included), and the suggestions ``awa-ops diagnose`` prints, select through
``select_targets``: DLQ entries or failed jobs by kind, queue, tag and error
fingerprint (``awa.fingerprint``, the console's DLQ groups).  It reads through
the storage engine's bounded read side, never a job's args; the REST API can
reuse it as is (a ``BulkFilter`` in, the targets out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from awa import config
from awa.fingerprint import fingerprint as fingerprint_of
from awa.job import ValidationError
from awa.storage.engine import DlqCursor, DlqFilter, DlqPageQuery, JobListQuery, ReadEngine

DLQ = "dlq"
FAILED = "failed"
PAGE = 1_000


@dataclass(frozen=True)
class BulkFilter:
    """Which DLQ entries (``place="dlq"``) or failed jobs (``place="failed"``) to act on;
    None fields do not filter.  ``fingerprint``: the error fingerprint of the last error
    (awa.fingerprint.fingerprint), as the console's DLQ groups and ``diagnose dlq`` show it."""

    place: str
    kind: str | None = None
    queue: str | None = None
    tag: str | None = None
    fingerprint: str | None = None
    reason: str | None = None  # the DLQ reason (DLQ entries only)

    def __post_init__(self) -> None:
        if self.place not in (DLQ, FAILED):
            raise ValidationError(f"unknown place {self.place!r}; expected {DLQ} or {FAILED}")
        if self.reason is not None and self.place != DLQ:
            raise ValidationError("a DLQ reason filters DLQ entries only; drop it for failed jobs")

    @property
    def is_empty(self) -> bool:
        return all(v is None for v in (self.kind, self.queue, self.tag, self.fingerprint,
                                       self.reason))

    def describe(self) -> str:
        words = [f"{k}={v}" for k, v in (("kind", self.kind), ("queue", self.queue),
                                          ("tag", self.tag), ("reason", self.reason),
                                          ("fingerprint", self.fingerprint))
                 if v is not None]
        what = "DLQ entries" if self.place == DLQ else "failed jobs"
        return f"{what} with {' '.join(words)}" if words else f"every one of the {what}"


@dataclass(frozen=True)
class Target:
    job_id: int
    kind: str
    queue: str
    last_error: str | None


def _matches(flt: BulkFilter, kind: str, queue: str, error: str | None) -> bool:
    return ((flt.kind is None or kind == flt.kind) and (flt.queue is None or queue == flt.queue)
            and (flt.fingerprint is None or fingerprint_of(error) == flt.fingerprint))


async def select_targets(engine: ReadEngine, conn: psycopg.AsyncConnection[Any], flt: BulkFilter,
                         *, limit: int = config.BULK_SELECT_LIMIT) -> list[Target]:
    """The jobs ``flt`` selects, newest first, at most ``limit``."""
    found: list[Target] = []
    if flt.place == FAILED:
        rows = await engine.job_page(conn, JobListQuery(
            state=FAILED, queue=flt.queue, kind=flt.kind, tag=flt.tag, page=limit,
            window=limit, max_pairs=config.OPS_KNOWN_QUEUE_LIMIT))
        return [Target(r.id, r.kind, r.queue, r.last_error) for r in rows
                if _matches(flt, r.kind, r.queue, r.last_error)]
    if flt.tag is not None:  # no index for tags: the entries themselves, page by page
        where = DlqFilter(kind=flt.kind, queue=flt.queue, tag=flt.tag)
        while len(found) < limit:
            entries = await engine.list_dlq(conn, where, PAGE)
            for e in entries:
                error = str(e.job.errors[-1].get("error", "")) if e.job.errors else None
                if _matches(flt, e.job.kind, e.job.queue, error) \
                        and flt.reason in (None, e.reason):
                    found.append(Target(e.job.id, e.job.kind, e.job.queue, error))
            if len(entries) < PAGE:
                break
            last = entries[-1]
            where = DlqFilter(kind=flt.kind, queue=flt.queue, tag=flt.tag,
                              before_id=last.job.id, before_dlq_at=last.dlq_at)
        return found[:limit]
    before: DlqCursor | None = None
    while len(found) < limit:
        page = await engine.dlq_page(conn, DlqPageQuery(
            queue=flt.queue, kind=flt.kind, reason=flt.reason, page=PAGE, window=limit,
            before=before))
        found += [Target(e.job_id, e.kind, e.queue, e.last_error) for e in page.entries
                  if _matches(flt, e.kind, e.queue, e.last_error)]
        if page.next_before is None:
            break
        before = page.next_before
    return found[:limit]
