"""The ops reads every engine serves alike, and the pieces of the others they share.

Every statement is in ``sql/reads.sql``: those on the shared tables (the DLQ, runtimes,
descriptors, unique claims) and on each engine's ``awa.jobs`` view once, those on an
engine's own relation of job rows written out once per relation (canonical: ``awa.jobs_hot``,
queue storage: the ``awa.jobs`` view; ``JobStatements.on``).
``SharedReads`` is the ``OpsReads`` methods on them; an engine adds the rest.  Nothing here
imports an engine.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

import psycopg

from awa import config
from awa.job import JOB_COLUMNS, Job
from awa.statements import named_statements
from awa.storage.common.fetch import fetch_all, float_or_none
from awa.storage.common.tables import DEFERRED_STATES, HOT_STATES
from awa.storage.engine import (
    CAPPED_VALUES,
    CancelledAttempt,
    DlqCursor,
    DlqDepth,
    DlqEntriesPage,
    DlqPageQuery,
    DlqSummary,
    JobRecord,
    JobSummary,
    KindCount,
    Oversized,
    RepeatedError,
    RunningAttemptRead,
    RunningCounts,
    RuntimeDescriptorHashes,
    RuntimeInstance,
    StateBucket,
    StoredDescriptor,
    SupersededAttempt,
    UniqueClaimHolder,
    WedgedClaims,
)

NewestPage = Callable[[int | None, int], Awaitable[list[dict[str, Any]]]]
"""An engine's newest jobs (id, state, created_at) below an id (None: the newest), at most
a limit, newest first."""

_SQL = named_statements("awa.storage.common", "sql/reads.sql")

# --- queues that completed lately ---------------------------------------------------------

# Canonical's hot table: the queues that completed a job lately (canonical adds its order).
HOT_RECENTLY_COMPLETED = _SQL["hot_recently_completed"]

# --- DLQ depth ----------------------------------------------------------------------------

DLQ_DEPTHS_BY_QUEUE = _SQL["dlq_depths_by_queue"]
DLQ_DEPTHS = _SQL["dlq_depths"]

# --- runtimes ---------------------------------------------------------------------

# The seed's runtime health query, plus what liveness and the screens need.
RUNTIME_INSTANCES = _SQL["runtime_instances"]

# --- uniqueness ----------------------------------------------------------------------

UNIQUE_HOLDERS = _SQL["unique_holders"]


# --- job lists and detail --------------------------------------------------------------

# Column fragments of canonical's and queue storage's job-list statements (their own files
# and modules, written out by those engines; nothing here runs them: kept importable until
# they no longer compose them).
# A list row: never the args (nor any other big value); the last error's head, as much
# of it as an error fingerprint reads (awa.fingerprint.MAX_TEXT).
JOB_LIST_COLUMNS = ("id, kind, queue, state::text AS state, priority, attempt, max_attempts, "
                    "run_at, created_at, attempted_at, finalized_at, tags, "
                    "left(t.errors[array_upper(t.errors, 1)] ->> 'error', 500) AS last_error")

# Whether a row's kind or args contain the text asked for (case-insensitive: the console's
# "/" search); a column of the inner selects, so it applies after their window like kind
# and tag.
ARGS_MATCH = ("(%(args)s::text IS NULL OR strpos(lower(t.kind), lower(%(args)s)) > 0"
              " OR strpos(lower(t.args::text), lower(%(args)s)) > 0) AS args_match")

# The job, or its DLQ entry with dlq_reason set: by primary key either way.
JOB_RECORD = _SQL["job_record"]

# The same, with args, metadata, errors and progress fetched only when their JSON text is
# at most %(cap)s characters; otherwise their first %(cap)s characters and their size.
JOB_RECORD_CAPPED = _SQL["job_record_capped"]


def capped_record(row: dict[str, Any], **extra: Any) -> JobRecord:
    """A ``JOB_RECORD_CAPPED`` row as a record: oversized values named, left empty."""
    oversized = {c: Oversized(row[f"{c}_head"], int(row[f"{c}_bytes"]))
                 for c in CAPPED_VALUES if row.get(f"{c}_head") is not None}
    values = {k: v for k, v in row.items() if k in JOB_COLUMNS}
    values["args"] = {} if "args" in oversized else values.get("args")
    return JobRecord(Job.from_row(values), row["dlq_reason"], row["dlq_at"], row["claimed_by"],
                     oversized, **extra)


def cap_record(record: JobRecord, cap_bytes: int) -> JobRecord:
    """The capped form of a record already fetched whole (a layout whose values cannot be
    capped in SQL): the rendering stays bounded even though the fetch was not."""
    oversized: dict[str, Oversized] = {}
    job = record.job
    empty: dict[str, Any] = {"args": {}, "metadata": {}, "errors": [], "progress": None}
    for name in CAPPED_VALUES:
        value = getattr(job, name)
        if value is None:
            continue
        text = json.dumps(value, default=str, separators=(", ", ": "))
        size = len(text.encode())
        if size > cap_bytes:
            oversized[name] = Oversized(text[:cap_bytes], size)
            setattr(job, name, empty[name])
    return dataclasses.replace(record, oversized=oversized) if oversized else record

# --- DLQ pages and errors ------------------------------------------------------------------

# DLQ page: the index that serves the most selective given filter (queue, kind, neither),
# newest first; the rest are applied within the newest ``window`` entries.
DLQ_BY_QUEUE = _SQL["dlq_by_queue"]
DLQ_BY_KIND = _SQL["dlq_by_kind"]
DLQ_NEWEST = _SQL["dlq_newest"]

# --- descriptors -----------------------------------------------------------------------------

DESCRIPTORS = _SQL["descriptors"]
RUNTIME_DESCRIPTOR_HASHES = _SQL["runtime_descriptor_hashes"]

def job_summary(row: dict[str, Any]) -> JobSummary:
    """A job-list row (the filters' helper columns left out)."""
    values = {k: v for k, v in row.items() if k != "args_match"}
    values["tags"] = list(values["tags"] or [])
    return JobSummary(**values)


def published_timing(value: Any) -> dict[str, int]:
    """The heartbeat timing a runtime published with its queues (awa.runtime.snapshot)."""
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict) and item.get("heartbeat_staleness_ms") is not None:
            return {key: int(item[key]) for key in ("heartbeat_interval_ms",
                                                    "heartbeat_staleness_ms")
                    if item.get(key) is not None}
    return {}


def queue_names(value: Any) -> list[str]:
    """Queue names from a runtime's ``queues`` json, whatever shape a runtime wrote, sorted."""
    names: set[str] = set()
    if isinstance(value, dict):
        value = [{"name": k, **(v if isinstance(v, dict) else {})} for k, v in value.items()]
    for item in value or []:
        if isinstance(item, str):
            names.add(item)
        elif isinstance(item, (list, tuple)) and item:
            names.add(str(item[0]))
        elif isinstance(item, dict):
            name = item.get("name") or item.get("queue")
            if name:
                names.add(str(name))
    return sorted(names)


# The relations of job rows the statements below are written out for, by the suffix of their
# names in ``sql/reads.sql``.
_RELATIONS = {"awa.jobs_hot": "jobs_hot", "awa.jobs": "jobs"}


@dataclass(frozen=True)
class JobStatements:
    """An engine's statements on its relation of job rows: what ``SharedReads`` runs for
    running attempts, wedges and errors (``sql/reads.sql``, one written-out statement per
    relation: ``running_on_jobs_hot``, ``running_on_jobs`` ...)."""

    running: str
    running_by_id: str
    running_counts: str
    cancelled_while_running: str
    wedged_claims: str
    superseded: str
    repeated_errors: str

    @classmethod
    def on(cls, table: str) -> JobStatements:
        """The statements on ``table`` (``awa.jobs_hot`` or ``awa.jobs``)."""
        suffix = _RELATIONS[table]
        return cls(*(_SQL[f"{field.name}_on_{suffix}"] for field in dataclasses.fields(cls)))


def running_attempt(r: dict[str, Any]) -> RunningAttemptRead:
    """A running-attempt row (``JobStatements.running`` and the engines' own) as the read
    returns it."""
    return RunningAttemptRead(
        id=r["id"], kind=r["kind"], queue=r["queue"], attempt=r["attempt"],
        max_attempts=r["max_attempts"], run_lease=r["run_lease"], priority=r["priority"],
        attempted_at=r["attempted_at"], heartbeat_at=r["heartbeat_at"],
        deadline_at=r["deadline_at"], tags=list(r["tags"] or []),
        heartbeat_age_s=float_or_none(r["heartbeat_age_s"]),
        deadline_remaining_s=float_or_none(r["deadline_remaining_s"]),
        running_for_s=float_or_none(r["running_for_s"]), claimed_by=r.get("claimed_by"))


def running_counts(rows: Iterable[dict[str, Any]]) -> list[RunningCounts]:
    """``JobStatements.running_counts`` rows (and the engines' own) as the read returns them."""
    return [RunningCounts(r["queue"], int(r["running"]), float_or_none(r["oldest_heartbeat_s"]),
                          int(r["stale"]), int(r["overdue"])) for r in rows]


class SharedReads:
    """The ``OpsReads`` methods every engine serves alike: the shared tables' reads, and the
    attempt, wedge and error reads on the engine's ``statements``."""

    statements: ClassVar[JobStatements]
    kind_counts_statement: ClassVar[str]
    """Rows of (kind, queue, n, recent, capped) from every part of the engine's layout."""

    async def _planned_rows(self, conn: psycopg.AsyncConnection[Any], statement: str,
                            params: dict[str, Any]) -> list[dict[str, Any]]:
        """``statement``'s rows, as the engine sends its own statements."""
        return await fetch_all(conn, statement, params)

    async def kind_counts(self, conn: psycopg.AsyncConnection[Any], *,
                          cap: int) -> list[KindCount]:
        return kind_counts(await without_bitmap_scans(conn, lambda: self._planned_rows(
            conn, self.kind_counts_statement, kind_count_params(cap))))

    async def completed_totals(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int] | None:
        """None: retention deletes completed rows without counting them."""
        return None

    async def dlq_depths_by_queue(self, conn: psycopg.AsyncConnection[Any], *, cap: int,
                                  max_queues: int) -> list[DlqDepth]:
        rows = await fetch_all(conn, DLQ_DEPTHS_BY_QUEUE, {"cap": cap, "max_queues": max_queues})
        return [DlqDepth(r["queue"], None, int(r["n"]), r["n"] >= cap) for r in rows]

    async def dlq_depths(self, conn: psycopg.AsyncConnection[Any], *, queue: str | None = None,
                         recent_s: float = 0.0) -> list[DlqDepth]:
        rows = await fetch_all(conn, DLQ_DEPTHS, {"queue": queue, "recent": recent_s})
        return [DlqDepth(r["queue"], r["dlq_reason"], int(r["depth"]), False, r["newest"],
                         int(r["recent"])) for r in rows]

    async def runtime_instances(self, conn: psycopg.AsyncConnection[Any], *,
                                limit: int | None = None) -> list[RuntimeInstance]:
        rows = await fetch_all(conn, RUNTIME_INSTANCES, {"limit": limit})
        return [RuntimeInstance(
            instance_id=str(r["instance_id"]), hostname=r["hostname"], pid=r["pid"],
            version=r["version"], started_at=r["started_at"], last_seen_at=r["last_seen_at"],
            snapshot_interval_ms=int(r["snapshot_interval_ms"]), healthy=bool(r["healthy"]),
            postgres_connected=bool(r["postgres_connected"]),
            poll_loop_alive=bool(r["poll_loop_alive"]), heartbeat_alive=bool(r["heartbeat_alive"]),
            maintenance_alive=bool(r["maintenance_alive"]), leader=bool(r["leader"]),
            shutting_down=bool(r["shutting_down"]), queues=queue_names(r["queues"]),
            **published_timing(r["queues"]),
            last_seen_age_s=float(r["last_seen_age_s"]), uptime_s=float_or_none(r["uptime_s"]),
            schema_version=r["schema_version"], layout_version=r["layout_version"])
            for r in rows]

    async def running_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                               started_before: datetime | None = None,
                               job_ids: Sequence[int] | None = None,
                               limit: int) -> list[RunningAttemptRead]:
        if job_ids is not None:
            rows = await fetch_all(conn, self.statements.running_by_id,
                                   {"ids": list(job_ids), "limit": limit})
        else:
            rows = await fetch_all(conn, self.statements.running,
                                   {"started_before": started_before, "limit": limit})
        return [running_attempt(r) for r in rows]

    async def running_counts(self, conn: psycopg.AsyncConnection[Any], *, stale_after_s: float,
                             queue: str | None = None) -> list[RunningCounts]:
        return running_counts(await fetch_all(conn, self.statements.running_counts,
                                              {"staleness": stale_after_s, "queue": queue}))

    async def cancelled_while_running(self, conn: psycopg.AsyncConnection[Any], *,
                                      window_s: float, stale_after_s: float,
                                      queue: str | None = None,
                                      limit: int) -> list[CancelledAttempt]:
        rows = await fetch_all(conn, self.statements.cancelled_while_running, {
            "window": window_s, "staleness": stale_after_s, "queue": queue, "limit": limit})
        return [CancelledAttempt(**r) for r in rows]

    async def unique_claim_holders(self, conn: psycopg.AsyncConnection[Any],
                                   keys: Sequence[bytes]) -> list[UniqueClaimHolder]:
        if not keys:
            return []
        rows = await fetch_all(conn, UNIQUE_HOLDERS, {"keys": [bytes(k) for k in keys]})
        return [UniqueClaimHolder(bytes(r["unique_key"]), r["job_id"], r["state"],
                                  bool(r["in_dlq"])) for r in rows]

    async def wedged_claims(self, conn: psycopg.AsyncConnection[Any]) -> list[WedgedClaims]:
        return [WedgedClaims(r["queue"], int(r["wedged"]))
                for r in await fetch_all(conn, self.statements.wedged_claims)]

    async def superseded_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                                  queue: str | None = None,
                                  limit: int) -> list[SupersededAttempt]:
        rows = await fetch_all(conn, self.statements.superseded, {"queue": queue, "limit": limit})
        return [SupersededAttempt(r["stuck_job"], r["kind"], r["queue"], bytes(r["unique_key"]),
                                  r["claim_holder"], r["holder_state"]) for r in rows]

    async def job_record(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                         cap_bytes: int | None = None) -> JobRecord | None:
        if cap_bytes is not None:
            rows = await fetch_all(conn, JOB_RECORD_CAPPED, {"id": job_id, "cap": cap_bytes})
            return capped_record(rows[0]) if rows else None
        rows = await fetch_all(conn, JOB_RECORD, {"id": job_id})
        if not rows:
            return None
        row = rows[0]
        return JobRecord(Job.from_row(row), row["dlq_reason"], row["dlq_at"], row["claimed_by"])

    async def dlq_page(self, conn: psycopg.AsyncConnection[Any],
                       query: DlqPageQuery) -> DlqEntriesPage:
        statement = DLQ_BY_QUEUE if query.queue else DLQ_BY_KIND if query.kind else DLQ_NEWEST
        before = query.before
        rows = await fetch_all(conn, statement, {
            "queue": query.queue, "kind": query.kind, "reason": query.reason,
            "window": query.window, "page": query.page,
            "before_at": before.dlq_at if before else None,
            "before_id": before.job_id if before else None})
        entries = [DlqSummary(**r) for r in rows]
        last = entries[-1] if len(entries) >= query.page and entries else None
        return DlqEntriesPage(entries, DlqCursor(last.dlq_at, last.job_id) if last else None)

    async def repeated_errors(self, conn: psycopg.AsyncConnection[Any], *,
                              queue: str | None = None, sample: int,
                              limit: int = 10) -> list[RepeatedError]:
        rows = await fetch_all(conn, self.statements.repeated_errors,
                               {"queue": queue, "sample": sample, "limit": limit})
        return [RepeatedError(r["kind"], r["queue"], r["message"], int(r["jobs"]),
                              int(r["max_repeats_in_one_job"]), list(r["sample_job_ids"]),
                              list(r["places"]), r["first_seen"], r["last_seen"])
                for r in rows]

    async def descriptors(self, conn: psycopg.AsyncConnection[Any]) -> list[StoredDescriptor]:
        return [StoredDescriptor(r["type"], r["key"], r["descriptor_hash"], r["last_seen_at"],
                           float_or_none(r["age_s"])) for r in await fetch_all(conn, DESCRIPTORS)]

    async def runtime_descriptor_hashes(
            self, conn: psycopg.AsyncConnection[Any]) -> list[RuntimeDescriptorHashes]:
        return [RuntimeDescriptorHashes(str(r["instance_id"]), r["descriptor_hashes"])
                for r in await fetch_all(conn, RUNTIME_DESCRIPTOR_HASHES)]


# --- the REST API's summaries (/api/kinds, /api/stats/timeseries): bounded ---------------

# The canonical tables' part of every engine's kind counts (queue storage reads them too,
# empty on a database it laid out): rows of (kind, queue, n, recent, capped).
CANONICAL_KIND_PARTS = _SQL["canonical_kind_counts"]


# CANONICAL_KIND_PARTS must walk each queue's completions newest first and stop at the cap;
# a bitmap scan -- which the planner prefers whenever queues average fewer completions than
# the cap -- reads every completion of the queue, however many, to sort them.  Bitmap scans
# are off for that statement only (the caller's setting restored after it).
BITMAP_SCANS_OFF = _SQL["bitmap_scans_off"]
BITMAP_SCANS_BACK = _SQL["bitmap_scans_back"]


async def without_bitmap_scans(conn: psycopg.AsyncConnection[Any],
                               read: Callable[[], Awaitable[list[dict[str, Any]]]]
                               ) -> list[dict[str, Any]]:
    """``read()``'s rows, planned without bitmap scans (in a transaction or savepoint)."""
    async with conn.transaction():
        [setting] = await fetch_all(conn, BITMAP_SCANS_OFF)
        try:
            return await read()
        finally:
            await fetch_all(conn, BITMAP_SCANS_BACK, {"was": setting["was"]})


def kind_count_params(cap: int) -> dict[str, Any]:
    """The parameters of ``CANONICAL_KIND_PARTS`` (and of the statements built on it)."""
    return {"cap": cap, "max_kinds": config.OPS_KNOWN_QUEUE_LIMIT,
            "hot_states": [s for s in HOT_STATES if s != "completed"],
            "deferred_states": list(DEFERRED_STATES)}


def kind_counts(rows: Iterable[dict[str, Any]]) -> list[KindCount]:
    """Rows of (kind, queue, n, recent, capped), from every part of an engine, per kind."""
    jobs: dict[str, int] = {}
    queues: dict[str, set[str]] = {}
    recent: dict[str, int] = {}
    capped: set[str] = set()
    for r in rows:
        kind = r["kind"]
        jobs[kind] = jobs.get(kind, 0) + int(r["n"])
        queues.setdefault(kind, set()).add(r["queue"])
        recent[kind] = recent.get(kind, 0) + int(r["recent"])
        if r["capped"]:
            capped.add(kind)
    return [KindCount(kind, jobs[kind], len(queues[kind]), recent[kind], kind in capped)
            for kind in sorted(jobs)]


# Newest first by id, a page at a time: the jobs created since %(since)s are the newest, so
# the walk stops at the first page reaching past the window (or at the cap).
TIMESERIES_PAGE = 5_000
WINDOW_START = _SQL["window_start"]


async def created_buckets(conn: psycopg.AsyncConnection[Any], newest: NewestPage, *,
                          minutes: int, cap: int) -> list[StateBucket]:
    """``created_timeseries`` from ``newest(before_id, limit)`` (an engine's rows of
    id, state, created_at, newest first, ids below ``before_id``), read up to ``cap``."""
    [window] = await fetch_all(conn, WINDOW_START, {"minutes": minutes})
    since: datetime = window["since"]
    counts: dict[tuple[datetime, str], int] = {}
    read, before, last = 0, None, None
    while read < cap:
        limit = min(TIMESERIES_PAGE, cap - read)
        rows = await newest(before, limit)
        read += len(rows)
        for r in rows:
            if r["created_at"] >= since:
                key = (_minute(r["created_at"]), r["state"])
                counts[key] = counts.get(key, 0) + 1
        if len(rows) < limit or rows[-1]["created_at"] < since:
            last = None  # the window was read whole
            break
        before, last = rows[-1]["id"], rows[-1]["created_at"]
    edge = _minute(last) if last is not None else None  # the cap ended inside the window
    return [StateBucket(bucket, state, n, bucket == edge)
            for (bucket, state), n in sorted(counts.items())]


def _minute(at: datetime) -> datetime:
    return at - timedelta(seconds=at.second, microseconds=at.microsecond)
