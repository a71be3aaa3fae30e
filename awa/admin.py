"""Operator functions: inspect, cancel, retry, pause, drain, and the DLQ.

The ``awa`` CLI, the TUI and awa-ops' operator actions all call these, so
each action has exactly one implementation.  Every read is index-backed:
lookups by id, by ``(state, queue, id)``, ``(kind, state)`` or the finalized
index; nothing scans a jobs table without a leading-column predicate.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool

from awa import config, lifecycle, metrics
from awa.job import JOB_COLUMNS, Job, JobNotFound, JobState, UniqueConflict, ValidationError
from awa.serialization import encode_args
from awa.storage.canonical.enqueue import (UNIQUE_INDEX, normalize_run_at, validate_priority,
                                            validate_queue)
from awa.unique import unique_key

# --- column lists (constants built from the schema's column names) -----------
_COLUMNS = ", ".join(JOB_COLUMNS)
_DLQ_AS_JOB = ", ".join("job_id AS id" if c == "id" else c for c in JOB_COLUMNS)


def _select_list(overrides: dict[str, str], source: str = "m", id_column: str = "id") -> str:
    """The job columns of ``source`` in table order, some replaced by expressions."""
    parts = []
    for column in JOB_COLUMNS:
        if column in overrides:
            parts.append(f"{overrides[column]} AS {column}")
        elif column == "id":
            parts.append(f"{source}.{id_column} AS id")
        else:
            parts.append(f"{source}.{column}")
    return ", ".join(parts)


_FINALIZED_NOW = {"finalized_at": "now()"}
_FRESH_RUN = {
    "attempt": "0", "heartbeat_at": "NULL", "deadline_at": "NULL", "finalized_at": "NULL",
    "callback_id": "NULL", "callback_timeout_at": "NULL", "callback_filter": "NULL",
    "callback_on_complete": "NULL", "callback_on_fail": "NULL", "callback_transform": "NULL",
}
_FRESH_RUN_SET = ", ".join(f"{k} = {v}" for k, v in _FRESH_RUN.items())

# --- jobs ------------------------------------------------------------------
GET_JOB = f"""
SELECT {_COLUMNS}, NULL::text AS dlq_reason, NULL::timestamptz AS dlq_at
  FROM awa.jobs WHERE id = %(id)s
UNION ALL
SELECT {_DLQ_AS_JOB}, dlq_reason, dlq_at FROM awa.dlq_entries WHERE job_id = %(id)s
LIMIT 1"""
LIST_JOBS = f"SELECT {_COLUMNS} FROM awa.jobs"
LIST_JOBS_ORDER = " ORDER BY id DESC LIMIT %(limit)s"
# Filter fragments joined with AND; values always travel as parameters.
STATE_FILTER = "state = %(state)s::awa.job_state"
KIND_FILTER = "kind = %(kind)s"
QUEUE_FILTER = "queue = %(queue)s"
TAG_FILTER = "tags @> ARRAY[%(tag)s]::text[]"

CANCEL_LIVE = """
UPDATE awa.jobs_hot j
   SET state = 'cancelled', finalized_at = now(), callback_timeout_at = NULL
  FROM (SELECT id, state AS previous_state FROM awa.jobs_hot WHERE id = %(id)s FOR UPDATE) old
 WHERE j.id = old.id AND j.state IN ('available', 'running', 'waiting_external')
RETURNING j.*, old.previous_state"""
CANCEL_DEFERRED = f"""
WITH m AS (DELETE FROM awa.scheduled_jobs WHERE id = %(id)s RETURNING *)
INSERT INTO awa.jobs_hot ({_COLUMNS})
SELECT {_select_list({**_FINALIZED_NOW, "state": "'cancelled'"})} FROM m
RETURNING *"""
NOTIFY = "SELECT pg_notify(%(channel)s, %(payload)s)"

RETRY_JOB = f"""
UPDATE awa.jobs_hot SET state = 'available', run_at = now(), {_FRESH_RUN_SET}
 WHERE id = %(id)s AND state IN ('failed', 'cancelled')
RETURNING *"""
RETRY_FAILED = f"""
UPDATE awa.jobs_hot SET state = 'available', run_at = now(), {_FRESH_RUN_SET}
 WHERE state = 'failed' AND {{filter}}
RETURNING *"""
FAILED_IDS = "SELECT id FROM awa.jobs_hot WHERE state = 'failed' AND {filter} ORDER BY id"
DISCARD_FAILED = "DELETE FROM awa.jobs_hot WHERE state = 'failed' AND kind = %(kind)s"

# --- queues ----------------------------------------------------------------
PAUSE_QUEUE = """
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by)
VALUES (%(queue)s, true, now(), %(paused_by)s)
ON CONFLICT (queue)
DO UPDATE SET paused = true, paused_at = now(), paused_by = EXCLUDED.paused_by"""
RESUME_QUEUE = """
INSERT INTO awa.queue_meta (queue, paused) VALUES (%(queue)s, false)
ON CONFLICT (queue) DO UPDATE SET paused = false, paused_at = NULL, paused_by = NULL"""
DRAIN_QUEUE = f"""
WITH live AS (
    UPDATE awa.jobs_hot SET state = 'cancelled', finalized_at = now()
     WHERE state = 'available' AND queue = %(queue)s
    RETURNING kind
), m AS (
    DELETE FROM awa.scheduled_jobs
     WHERE state IN ('scheduled', 'retryable') AND queue = %(queue)s
    RETURNING *
), moved AS (
    INSERT INTO awa.jobs_hot ({_COLUMNS})
    SELECT {_select_list({**_FINALIZED_NOW, "state": "'cancelled'"})} FROM m
    RETURNING kind
)
SELECT kind, %(queue)s AS queue, count(*) AS drained
  FROM (SELECT kind FROM live UNION ALL SELECT kind FROM moved) AS cancelled
 GROUP BY kind"""
# Each branch is served by an index: (state, queue, id) on both tables, the
# finalized index for the last hour's completions, the claim index for lag.
QUEUE_STATS = """
WITH counts AS (
    SELECT queue, state, count(*) AS n FROM awa.jobs_hot
     WHERE state IN ('available', 'running', 'waiting_external', 'failed')
     GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*) FROM awa.scheduled_jobs
     WHERE state IN ('scheduled', 'retryable')
     GROUP BY queue, state
), completed AS (
    SELECT queue, count(*) AS n FROM awa.jobs_hot
     WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'
     GROUP BY queue
), lag AS (
    SELECT queue, EXTRACT(EPOCH FROM now() - min(run_at))::float8 AS seconds
      FROM awa.jobs_hot WHERE state = 'available' GROUP BY queue
), queues AS (
    SELECT queue FROM counts UNION SELECT queue FROM completed
    UNION SELECT queue FROM awa.queue_meta
)
SELECT q.queue,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'available'), 0)::bigint AS available,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'running'), 0)::bigint AS running,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'failed'), 0)::bigint AS failed,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'scheduled'), 0)::bigint AS scheduled,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'retryable'), 0)::bigint AS retryable,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'waiting_external'), 0)::bigint
           AS waiting_external,
       COALESCE(max(d.n), 0)::bigint AS completed_last_hour,
       CASE WHEN max(l.seconds) IS NOT NULL THEN GREATEST(max(l.seconds), 0) END AS lag_seconds,
       COALESCE(bool_or(m.paused), false) AS paused
  FROM queues q
  LEFT JOIN counts c ON c.queue = q.queue
  LEFT JOIN completed d ON d.queue = q.queue
  LEFT JOIN lag l ON l.queue = q.queue
  LEFT JOIN awa.queue_meta m ON m.queue = q.queue
 GROUP BY q.queue
 ORDER BY q.queue"""

# --- dead-letter queue -------------------------------------------------------
DLQ_DEPTH = "SELECT count(*) AS n FROM awa.dlq_entries"
DLQ_DEPTH_BY_QUEUE = ("SELECT queue, count(*) AS n FROM awa.dlq_entries "
                      "GROUP BY queue ORDER BY queue")
GET_DLQ = "SELECT * FROM awa.dlq_entries WHERE job_id = %(id)s"
LIST_DLQ = "SELECT * FROM awa.dlq_entries"
LIST_DLQ_ORDER = " ORDER BY dlq_at DESC, job_id DESC LIMIT %(limit)s"
BEFORE_CURSOR_FILTER = "(dlq_at, job_id) < (%(before_dlq_at)s, %(before_id)s)"
BEFORE_ID_FILTER = "job_id < %(before_id)s"
BEFORE_DLQ_AT_FILTER = "dlq_at < %(before_dlq_at)s"
PURGE_DLQ = "DELETE FROM awa.dlq_entries"
PURGE_DLQ_JOB = "DELETE FROM awa.dlq_entries WHERE job_id = %(id)s"
# Wraps a PURGE_DLQ statement: how many entries per queue it deleted (for the metric).
PURGE_COUNTED = ("WITH purged AS ({purge} RETURNING queue) "
                 "SELECT queue, count(*) AS n FROM purged GROUP BY queue")
DLQ_IDS = "SELECT job_id FROM awa.dlq_entries WHERE {filter} ORDER BY job_id"

_REDRIVE = {
    **_FRESH_RUN,
    "queue": "COALESCE(%(queue)s, m.queue)",
    "priority": "COALESCE(%(priority)s::smallint, m.priority)",
    "run_at": "COALESCE(%(run_at)s::timestamptz, now())",
    "run_lease": "m.original_run_lease",
}
# A redriven job keeps its id and run_lease (so a stale write of an old
# attempt still cannot match) and starts with a fresh attempt budget.
_REDRIVE_FROM = f"""
WITH m AS (DELETE FROM awa.dlq_entries WHERE {{filter}} RETURNING *),
hot AS (
    INSERT INTO awa.jobs_hot ({_COLUMNS})
    SELECT {_select_list({**_REDRIVE, "state": "'available'"}, id_column="job_id")} FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) <= now()
    RETURNING *
), later AS (
    INSERT INTO awa.scheduled_jobs ({_COLUMNS})
    SELECT {_select_list({**_REDRIVE, "state": "'scheduled'"}, id_column="job_id")} FROM m
     WHERE COALESCE(%(run_at)s::timestamptz, now()) > now()
    RETURNING *
)
SELECT * FROM hot UNION ALL SELECT * FROM later"""
RETRY_FROM_DLQ = _REDRIVE_FROM.format(filter="job_id = %(id)s")
BULK_RETRY_FROM_DLQ = _REDRIVE_FROM  # .format(filter=<constant fragments>)

_TO_DLQ = f"""
WITH m AS (DELETE FROM awa.jobs_hot WHERE state = 'failed' AND {{filter}} RETURNING *)
INSERT INTO awa.dlq_entries (job_id, {", ".join(c for c in JOB_COLUMNS if c != "id")},
                             dlq_reason, dlq_at, original_run_lease)
SELECT id, {", ".join(c for c in JOB_COLUMNS if c != "id")}, %(reason)s, now(), run_lease FROM m
RETURNING *"""
MOVE_FAILED_TO_DLQ = _TO_DLQ.format(filter="id = %(id)s")
BULK_MOVE_FAILED_TO_DLQ = _TO_DLQ  # .format(filter=<constant fragments>)

UNIQUE_CLAIM_HOLDER = "SELECT job_id FROM awa.job_unique_claims WHERE unique_key = %(key)s"


# --- results -----------------------------------------------------------------
@dataclass(frozen=True)
class QueueStat:
    queue: str
    available: int = 0
    running: int = 0
    failed: int = 0
    completed_last_hour: int = 0
    lag_seconds: float | None = None
    paused: bool = False
    scheduled: int = 0
    retryable: int = 0
    waiting_external: int = 0

    @property
    def total_queued(self) -> int:
        """Work not yet finished or started: available + scheduled + retryable."""
        return self.available + self.scheduled + self.retryable

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "total_queued": self.total_queued}


@dataclass(frozen=True)
class DlqEntry:
    job: Job[dict[str, Any]]
    reason: str
    dlq_at: datetime
    original_run_lease: int

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "DlqEntry":
        return cls(job=Job.from_row({**row, "id": row["job_id"]}), reason=row["dlq_reason"],
                   dlq_at=row["dlq_at"], original_run_lease=row["original_run_lease"])

    def __repr__(self) -> str:
        return (f"DlqEntry(job_id={self.job.id}, kind={self.job.kind!r}, "
                f"queue={self.job.queue!r}, reason={self.reason!r})")


@dataclass(frozen=True)
class RetryFailedResult:
    jobs: list[Job[dict[str, Any]]] = field(default_factory=list)
    matched: int = 0
    pruned_failed_count: int | None = None
    skipped: int = 0  # matched, but a live duplicate holds their unique key

    def __repr__(self) -> str:
        return f"RetryFailedResult(matched={self.matched}, retried={len(self.jobs)})"


def _filters(**values: Any) -> tuple[list[str], dict[str, Any]]:
    """Constant SQL fragments for the filters given, and their parameters."""
    fragments = {"state": STATE_FILTER, "kind": KIND_FILTER, "queue": QUEUE_FILTER,
                 "tag": TAG_FILTER}
    chosen = [fragments[name] for name, value in values.items() if value is not None]
    return chosen, {k: v for k, v in values.items() if v is not None}


def _dlq_filters(kind: str | None, queue: str | None, tag: str | None, before_id: int | None,
                 before_dlq_at: datetime | None) -> tuple[list[str], dict[str, Any]]:
    chosen, params = _filters(kind=kind, queue=queue, tag=tag)
    if before_id is not None and before_dlq_at is not None:
        chosen.append(BEFORE_CURSOR_FILTER)
    elif before_id is not None:
        chosen.append(BEFORE_ID_FILTER)
    elif before_dlq_at is not None:
        chosen.append(BEFORE_DLQ_AT_FILTER)
    params.update({k: v for k, v in (("before_id", before_id), ("before_dlq_at", before_dlq_at))
                   if v is not None})
    return chosen, params


def _record_jobs(instrument: Any, rows: list[dict], extra: dict[str, str] | None = None) -> None:
    """Count committed operator transitions per (kind, queue) -- after the write, never before."""
    for (kind, queue), n in Counter((r["kind"], r["queue"]) for r in rows).items():
        attrs = metrics.job_attributes(kind, queue)
        instrument.add(n, {**attrs, **extra} if extra else attrs)


def _record_queues(instrument: Any, per_queue: Counter[str]) -> None:
    for queue, n in per_queue.items():
        if n:
            instrument.add(n, metrics.queue_attributes(queue))


def _where(chosen: list[str]) -> str:
    return " WHERE " + " AND ".join(chosen) if chosen else ""


def _validate_state(state: str | None) -> str | None:
    if state is None:
        return None
    value = state.value if isinstance(state, JobState) else str(state)
    if value not in config.JOB_STATES:
        raise ValidationError(f"unknown state {value!r}; expected one of "
                              f"{', '.join(config.JOB_STATES)}")
    return value


def _validate_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError(f"limit must be a positive integer, got {limit!r}")
    return limit


def _unique_error(exc: BaseException, what: str) -> UniqueConflict | None:
    diag = getattr(exc, "diag", None)
    if getattr(diag, "constraint_name", None) == UNIQUE_INDEX:
        return UniqueConflict(f"cannot {what}: another live job holds its unique key "
                              f"(cancel or finish that job first)")
    return None


def _queue_channel(queue: str) -> str:
    return config.NOTIFY_CHANNEL_PREFIX + queue


class AdminMixin:
    """Operator functions of the client; ``self._get_pool()`` comes from AsyncClient."""

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        raise NotImplementedError  # provided by AsyncClient

    async def _fetch(self, sql: str, params: dict[str, Any] | None = None) -> list[dict]:
        pool = await self._get_pool()
        async with pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

    # -- jobs --------------------------------------------------------------
    async def get_job(self, job_id: int) -> Job[Any]:
        rows = await self._fetch(GET_JOB, {"id": int(job_id)})
        if not rows:
            raise JobNotFound(f"job {job_id} not found (it may never have existed or was "
                              f"removed by retention)")
        return Job.from_row(rows[0])

    async def list_jobs(self, *, state: str | None = None, kind: str | None = None,
                        queue: str | None = None, limit: int = 100) -> list[Job[Any]]:
        chosen, params = _filters(state=_validate_state(state), kind=kind, queue=queue)
        params["limit"] = _validate_limit(limit)
        rows = await self._fetch(LIST_JOBS + _where(chosen) + LIST_JOBS_ORDER, params)
        return [Job.from_row(r) for r in rows]

    async def dump_job(self, job_id: int) -> str:
        """Everything an operator asks about one job, as text: attempts, errors, progress."""
        rows = await self._fetch(GET_JOB, {"id": int(job_id)})
        if not rows:
            raise JobNotFound(f"job {job_id} not found (it may never have existed or was "
                              f"removed by retention)")
        return render_dump(rows[0])

    async def dump_run(self, job_id: int, attempt: int | None = None) -> str:
        """One attempt's record (the latest by default)."""
        job = await self.get_job(job_id)
        wanted = job.attempt if attempt is None else attempt
        errors = [e for e in job.errors if e.get("attempt") == wanted]
        lines = [f"job {job.id} ({job.kind}) attempt {wanted} of {job.max_attempts}",
                 f"state: {job.state.value}"]
        lines += [f"error: {e.get('error')} at {e.get('at')}" for e in errors] or [
            "no error recorded for this attempt"]
        if job.progress and wanted == job.attempt:
            lines.append(f"progress: {json.dumps(job.progress, default=str)}")
        return "\n".join(lines)

    async def cancel(self, job_id: int) -> Job[Any] | None:
        """Cancel a job that has not finished; a running attempt is told at once.

        Returns ``None`` when there is no such job or it already finished.
        """
        pool = await self._get_pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                row = await (await conn.execute(CANCEL_LIVE, {"id": int(job_id)})).fetchone()
                if row is None:
                    row = await (await conn.execute(CANCEL_DEFERRED,
                                                    {"id": int(job_id)})).fetchone()
                elif row["previous_state"] in ("running", "waiting_external"):
                    payload = json.dumps({"job_id": row["id"], "run_lease": row["run_lease"]})
                    await conn.execute(NOTIFY, {"channel": config.CANCEL_CHANNEL,
                                                "payload": payload})
        if row:
            _record_jobs(metrics.METRICS.job_cancelled, [row])
        return Job.from_row(row) if row else None

    async def cancel_by_unique_key(self, kind: str, *, queue: str | None = None,
                                   args: Any | None = None,
                                   period_bucket: int | None = None) -> Job[Any] | None:
        """Cancel whichever job holds the unique key these parts hash to."""
        plain = None if args is None else encode_args(args)
        key = unique_key(kind, queue=queue, args=plain, period_bucket=period_bucket)
        rows = await self._fetch(UNIQUE_CLAIM_HOLDER, {"key": key})
        return await self.cancel(rows[0]["job_id"]) if rows else None

    async def retry(self, job_id: int) -> Job[Any] | None:
        """Run a failed or cancelled job again from scratch (fresh attempt budget)."""
        pool = await self._get_pool()
        async with pool.connection() as conn:
            try:
                async with conn.transaction():
                    row = await (await conn.execute(RETRY_JOB, {"id": int(job_id)})).fetchone()
                    if row is not None:
                        await conn.execute(NOTIFY, {"channel": _queue_channel(row["queue"]),
                                                    "payload": ""})
            except pg_errors.UniqueViolation as exc:
                raise (_unique_error(exc, f"retry job {job_id}") or exc) from None
        return Job.from_row(row) if row else None

    async def retry_failed(self, *, kind: str | None = None,
                           queue: str | None = None) -> RetryFailedResult:
        """Retry every failed job of a kind and/or queue; unique duplicates stay failed."""
        if kind is None and queue is None:
            raise ValidationError("retry_failed needs kind= or queue= (CLI: --kind or --queue)")
        chosen, params = _filters(kind=kind, queue=queue)
        where = " AND ".join(chosen)
        pool = await self._get_pool()
        async with pool.connection() as conn:
            try:
                async with conn.transaction():
                    rows = await (await conn.execute(RETRY_FAILED.format(filter=where),
                                                     params)).fetchall()
                    await self._notify_queues(conn, rows)
                return RetryFailedResult([Job.from_row(r) for r in rows], len(rows))
            except pg_errors.UniqueViolation:
                pass
            # Some of them collide on a unique key: retry one at a time and
            # leave the colliding ones failed.
            ids = [r["id"] for r in await (await conn.execute(
                FAILED_IDS.format(filter=where), params)).fetchall()]
            retried = []
            async with conn.transaction():
                for job_id in ids:
                    try:
                        async with conn.transaction():
                            row = await (await conn.execute(RETRY_JOB, {"id": job_id})).fetchone()
                        if row:
                            retried.append(row)
                    except pg_errors.UniqueViolation:
                        continue
                await self._notify_queues(conn, retried)
        return RetryFailedResult([Job.from_row(r) for r in retried], len(ids),
                                 skipped=len(ids) - len(retried))

    @staticmethod
    async def _notify_queues(conn: psycopg.AsyncConnection[Any], rows: list[dict]) -> None:
        for queue in sorted({r["queue"] for r in rows if r["state"] == "available"}):
            await conn.execute(NOTIFY, {"channel": _queue_channel(queue), "payload": ""})

    async def discard_failed(self, kind: str) -> int:
        """Delete the failed jobs of one kind; returns how many."""
        if not kind:
            raise ValidationError("discard_failed needs a kind (CLI: --kind)")
        pool = await self._get_pool()
        async with pool.connection() as conn:
            cur = await conn.execute(DISCARD_FAILED, {"kind": kind})
            return cur.rowcount

    # -- queues ------------------------------------------------------------
    async def pause_queue(self, queue: str, paused_by: str | None = None) -> None:
        pool = await self._get_pool()
        async with pool.connection() as conn:
            await conn.execute(PAUSE_QUEUE, {"queue": queue, "paused_by": paused_by})

    async def resume_queue(self, queue: str) -> None:
        pool = await self._get_pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(RESUME_QUEUE, {"queue": queue})
                await conn.execute(NOTIFY, {"channel": _queue_channel(queue), "payload": ""})

    async def drain_queue(self, queue: str) -> int:
        """Cancel every job of the queue still waiting to run; running ones finish."""
        rows = await self._fetch(DRAIN_QUEUE, {"queue": queue})
        for row in rows:
            metrics.METRICS.job_cancelled.add(row["drained"],
                                              metrics.job_attributes(row["kind"], row["queue"]))
        return sum(int(row["drained"]) for row in rows)

    async def queue_stats(self) -> list[QueueStat]:
        return [QueueStat(**row) for row in await self._fetch(QUEUE_STATS)]

    # -- dead-letter queue ---------------------------------------------------
    async def dlq_depth(self, *, queue: str | None = None) -> int:
        chosen, params = _filters(queue=queue)
        return int((await self._fetch(DLQ_DEPTH + _where(chosen), params))[0]["n"])

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        return [(r["queue"], int(r["n"])) for r in await self._fetch(DLQ_DEPTH_BY_QUEUE)]

    async def list_dlq(self, *, kind: str | None = None, queue: str | None = None,
                       tag: str | None = None, before_id: int | None = None,
                       before_dlq_at: datetime | None = None,
                       limit: int = 100) -> list[DlqEntry]:
        """Newest first; pass the last entry's job id and dlq_at to page on."""
        chosen, params = _dlq_filters(kind, queue, tag, before_id, before_dlq_at)
        params["limit"] = _validate_limit(limit)
        rows = await self._fetch(LIST_DLQ + _where(chosen) + LIST_DLQ_ORDER, params)
        return [DlqEntry.from_row(r) for r in rows]

    async def get_dlq_job(self, job_id: int) -> DlqEntry | None:
        rows = await self._fetch(GET_DLQ, {"id": int(job_id)})
        return DlqEntry.from_row(rows[0]) if rows else None

    async def retry_from_dlq(self, job_id: int, *, run_at: datetime | None = None,
                             priority: int | None = None,
                             queue: str | None = None) -> Job[Any] | None:
        """Back to available (or scheduled at ``run_at``) with a fresh attempt budget."""
        params = {"id": int(job_id), "run_at": normalize_run_at(run_at),
                  "priority": None if priority is None else validate_priority(priority),
                  "queue": None if queue is None else validate_queue(queue)}
        try:
            rows = await self._fetch(RETRY_FROM_DLQ, params)
        except pg_errors.UniqueViolation as exc:
            raise (_unique_error(exc, f"retry DLQ job {job_id}") or exc) from None
        _record_queues(metrics.METRICS.job_dlq_retried, Counter(r["queue"] for r in rows))
        return Job.from_row(rows[0]) if rows else None

    async def bulk_retry_from_dlq(self, *, kind: str | None = None, queue: str | None = None,
                                  tag: str | None = None, allow_all: bool = False) -> int:
        chosen, params = _filters(kind=kind, queue=queue, tag=tag)
        if not chosen:
            if not allow_all:
                raise ValidationError("refusing to retry the whole DLQ without a filter: give "
                                      "kind/queue/tag, or allow_all=True (CLI: --all)")
            chosen = ["true"]
        params.update({"run_at": None, "priority": None, "queue": queue})
        where = " AND ".join(chosen)
        pool = await self._get_pool()
        async with pool.connection() as conn:
            try:
                rows = await (await conn.execute(BULK_RETRY_FROM_DLQ.format(filter=where),
                                                 params)).fetchall()
                _record_queues(metrics.METRICS.job_dlq_retried, Counter(r["queue"] for r in rows))
                return len(rows)
            except pg_errors.UniqueViolation:
                pass
            # A unique collision: redrive one by one, leaving the colliding ones in the DLQ.
            ids = [r["job_id"] for r in await (await conn.execute(
                DLQ_IDS.format(filter=where), params)).fetchall()]
            moved: Counter[str] = Counter()
            async with conn.transaction():
                for job_id in ids:
                    try:
                        async with conn.transaction():
                            rows = await (await conn.execute(RETRY_FROM_DLQ, {
                                "id": job_id, "run_at": None, "priority": None,
                                "queue": None})).fetchall()
                        moved.update(r["queue"] for r in rows)
                    except pg_errors.UniqueViolation:
                        continue
            _record_queues(metrics.METRICS.job_dlq_retried, moved)
            return sum(moved.values())

    async def purge_dlq(self, *, kind: str | None = None, queue: str | None = None,
                        tag: str | None = None, before_id: int | None = None,
                        before_dlq_at: datetime | None = None, allow_all: bool = False) -> int:
        chosen, params = _dlq_filters(kind, queue, tag, before_id, before_dlq_at)
        if not chosen and not allow_all:
            raise ValidationError("refusing to purge the whole DLQ without a filter: give "
                                  "kind/queue/tag/before, or allow_all=True (CLI: --all)")
        rows = await self._fetch(PURGE_COUNTED.format(purge=PURGE_DLQ + _where(chosen)), params)
        purged = Counter({r["queue"]: r["n"] for r in rows})
        _record_queues(metrics.METRICS.job_dlq_purged, purged)
        return sum(purged.values())

    async def purge_dlq_job(self, job_id: int) -> bool:
        rows = await self._fetch(PURGE_COUNTED.format(purge=PURGE_DLQ_JOB), {"id": int(job_id)})
        _record_queues(metrics.METRICS.job_dlq_purged, Counter({r["queue"]: r["n"] for r in rows}))
        return bool(rows)

    async def move_failed_to_dlq(self, job_id: int,
                                 reason: str = lifecycle.DLQ_MANUAL) -> DlqEntry | None:
        """Move one failed job into the DLQ; ``None`` if it is not a failed job."""
        rows = await self._fetch(MOVE_FAILED_TO_DLQ, {"id": int(job_id), "reason": reason})
        _record_jobs(metrics.METRICS.job_dlq_moved, rows, {metrics.ATTR_DLQ_REASON: reason})
        return DlqEntry.from_row(rows[0]) if rows else None

    async def bulk_move_failed_to_dlq(self, *, kind: str | None = None, queue: str | None = None,
                                      reason: str = lifecycle.DLQ_MANUAL,
                                      allow_all: bool = False) -> int:
        chosen, params = _filters(kind=kind, queue=queue)
        if not chosen:
            if not allow_all:
                raise ValidationError("refusing to move every failed job without a filter: "
                                      "give kind/queue, or allow_all=True (CLI: --all)")
            chosen = ["true"]
        params["reason"] = reason
        rows = await self._fetch(BULK_MOVE_FAILED_TO_DLQ.format(filter=" AND ".join(chosen)),
                                 params)
        _record_jobs(metrics.METRICS.job_dlq_moved, rows, {metrics.ATTR_DLQ_REASON: reason})
        return len(rows)


# --- the text dump -----------------------------------------------------------
_TIMESTAMPS = ("created_at", "run_at", "attempted_at", "heartbeat_at", "deadline_at",
               "finalized_at", "callback_timeout_at")


def _fmt(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def render_dump(row: dict[str, Any]) -> str:
    """The job as an operator reads it: identity, timestamps, attempts and errors."""
    lines = [f"job {row['id']}  kind={row['kind']}  queue={row['queue']}  "
             f"state={row['state']}",
             f"attempt {row['attempt']} of {row['max_attempts']}  priority={row['priority']}  "
             f"run_lease={row['run_lease']}"]
    if row.get("dlq_reason"):
        lines.append(f"in the DLQ since {_fmt(row['dlq_at'])}: {row['dlq_reason']}")
    lines.append("timestamps:")
    lines += [f"  {name:<20} {_fmt(row[name])}" for name in _TIMESTAMPS if row.get(name)]
    lines.append(f"args: {_fmt(row['args'])}")
    if row.get("tags"):
        lines.append(f"tags: {', '.join(row['tags'])}")
    if row.get("metadata"):
        lines.append(f"metadata: {_fmt(row['metadata'])}")
    if row.get("unique_key") is not None:
        lines.append(f"unique_key: {bytes(row['unique_key']).hex()}  "
                     f"unique_states: {row['unique_states']}")
    if row.get("callback_id"):
        lines.append(f"callback: {row['callback_id']} (timeout {_fmt(row['callback_timeout_at'])})")
    progress = row.get("progress")
    lines.append(f"progress: {_fmt(progress)}" if progress else "progress: none")
    errors = row.get("errors") or []
    if errors:
        lines.append(f"errors ({len(errors)}):")
        for entry in errors:
            flag = " [terminal]" if entry.get("terminal") else ""
            lines.append(f"  attempt {entry.get('attempt')} at {entry.get('at')}{flag}: "
                         f"{entry.get('error')}")
    else:
        lines.append("errors: none")
    return "\n".join(lines)
