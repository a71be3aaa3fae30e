"""A read-only engine for databases run by the Rust-core awa 0.6 (``awa-pg`` / the ``awa`` crate).

Its default queue-storage layout keeps no row per job: a job is an entry of
``<schema>.ready_entries`` (claimed when its lane sequence falls behind the
queue's claim head), a row of ``deferred_jobs`` while scheduled/retryable,
of ``done_entries`` once terminal, of ``dlq_entries`` when dead-lettered; a
running attempt is an open ``lease_claims`` row (the guide's anti-join with
``lease_claim_closures`` / ``lease_claim_closure_batches``) or a
materialized ``leases`` row, its heartbeat in ``attempt_state``.  Errors,
tags, metadata and progress live in each row's ``payload``.

This engine reads that layout for awa-ops, awa-tui and the read commands of
our ``awa`` CLI.  It never writes: every write method raises ``ForeignSchema``
naming the Rust-core CLI command that does it (``awa job cancel <id>``), so
nothing of ours writes into another engine's internals.  On a Rust-core
database still on its canonical engine (``schema`` None) the canonical reads
serve, read-only all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg import sql

from awa.job import ForeignSchema, Job, JobState, ValidationError
from awa.schema.layout import QUEUE_STORAGE, StorageLayout
from awa.statements import named_statements
from awa.storage.canonical.reads import CanonicalReads
from awa.storage.common.cron import SELECT_ACTIVE_CRON_JOBS
from awa.storage.common.fetch import fetch_all
from awa.storage.common.reads import cap_record, running_attempt, running_counts
from awa.storage.engine import (
    ActiveCronSchedule,
    CancelledAttempt,
    DlqCursor,
    DlqDepth,
    DlqEntriesPage,
    DlqEntry,
    DlqFilter,
    DlqPageQuery,
    DlqSummary,
    JobDump,
    JobListQuery,
    JobRecord,
    JobSummary,
    KindCount,
    QueueCount,
    QueueDepth,
    QueueDetail,
    QueueStat,
    RepeatedError,
    RunningAttemptRead,
    RunningCounts,
    RuntimeDescriptorHashes,
    StateBucket,
    SupersededAttempt,
    UniqueClaimHolder,
    WedgedClaims,
)

NAME = "rust_core"
F = TypeVar("F", bound=Callable[..., Any])


# Every statement of this engine, written out in ``sql/reads.sql`` (which says what each
# reads).  Those naming ``{s}`` (the Rust core's queue-storage schema, known at run time) are
# composed with that schema as an identifier by ``RustCoreEngine._q``; the rest are sent as
# they are.
_SQL = named_statements("awa.storage.rust_core", "sql/reads.sql")

# Running attempts: open receipt claims, compact claims and materialized leases.
OPEN_ATTEMPTS = _SQL["open_attempts"]

# Queue depth, lag, completions.
QUEUE_BACKLOG = _SQL["queue_backlog"]
COMPLETED_SINCE = _SQL["completed_since"]
COMPLETED_TOTALS = _SQL["completed_totals"]
RECENTLY_COMPLETED = _SQL["recently_completed"]
NOW = _SQL["now"]

# The REST API's summaries, and the jobs of other states: the Rust core's awa.jobs view.
CREATED_TIMESERIES = _SQL["created_timeseries"]
KIND_COUNTS = _SQL["kind_counts"]
QUEUE_META = _SQL["queue_meta"]
JOB_BY_ID = _SQL["job_by_id"]
JOBS = _SQL["jobs"]

# The DLQ (errors, metadata, tags and progress in payload).
DLQ_LIST = _SQL["dlq_list"]
DLQ_BY_ID = _SQL["dlq_by_id"]
DLQ_DEPTHS = _SQL["dlq_depths"]
DLQ_DEPTHS_BY_QUEUE = _SQL["dlq_depths_by_queue"]
REPEATED_ERRORS = _SQL["repeated_errors"]

# Uniqueness: claims in awa.job_unique_claims; a running holder is an open attempt.
UNIQUE_HOLDERS = _SQL["unique_holders"]
RUNTIME_DESCRIPTOR_HASHES = _SQL["runtime_descriptor_hashes"]

# What the Rust-core CLI calls each write (same spelling as its --help).
WRITE_COMMANDS: dict[str, str] = {
    "cancel": "awa job cancel <id>", "retry": "awa job retry <id>",
    "retry_failed": "awa job retry-failed --kind <kind> | --queue <queue>",
    "discard_failed": "awa job discard --kind <kind>",
    "pause_queue": "awa queue pause <queue>", "resume_queue": "awa queue resume <queue>",
    "drain_queue": "awa queue drain <queue>",
    "purge_dlq": "awa dlq purge --kind <kind> | --queue <queue> | --tag <tag> | --all",
    # (its CLI has no single-entry purge: the narrowest filter it offers)
    "purge_dlq_job": "awa dlq purge --kind <kind> | --queue <queue> | --tag <tag>",
    "retry_from_dlq": "awa dlq retry <id>", "bulk_retry_from_dlq": "awa dlq retry-bulk",
    "move_failed_to_dlq": "awa dlq move", "bulk_move_failed_to_dlq": "awa dlq move",
    "delete_cron_job": "awa cron remove <name>",
    # Reads of this layout that nothing of ours needs: its own CLI answers them.
    "list_cron_jobs": "awa cron list", "get_cron_job": "awa cron list",
}
# Everything else that writes belongs to the Rust core's own runtime.
RUNTIME_WRITES = (
    "insert_batch", "insert_batch_sync", "copy_batch", "warm_up", "claim_batch", "complete_batch",
    "retry_batch", "snooze_batch", "cancel_batch", "fail_batch", "dead_letter_batch",
    "park_batch", "cancel_superseded", "heartbeat_batch", "flush_progress_batch",
    "upsert_runtime_snapshot", "rescue_stale_heartbeats", "rescue_expired_deadlines",
    "rescue_callback_timeouts", "promote_due", "purge_finalized", "purge_aged_dlq",
    "rotate_and_prune",
    "purge_unseen_runtimes", "purge_unseen_descriptors", "age_priorities", "fire_cron",
    "upsert_descriptors", "set_runtime_descriptor_hashes", "register_callback",
    "park_for_callback", "complete_external", "fail_external", "retry_external",
    "resume_external", "heartbeat_callback", "upsert_cron_jobs", "pause_cron_job",
    "resume_cron_job", "trigger_cron_job", "clean_for_tests",
    # Reads only our runtime, producer and callback receiver make (never on this layout).
    "available_counts", "unique_holder", "unique_holder_sync",
    "poll_callback_wait", "lock_open_callback", "find_callback",
    # Batch operations: the Rust core keeps and runs its own (its migration v029).
    "batch_insert", "batch_list", "batch_get", "batch_request_cancel", "batch_preview",
    "batch_next_active", "batch_start_scan", "batch_scan_page", "batch_scanned",
    "batch_apply_chunk", "batch_finish",
)


def refusal(method: str) -> ForeignSchema:
    """The one-line error for a write (or a runtime-only read) on a Rust-core database."""
    command = WRITE_COMMANDS.get(method)
    if command:
        return ForeignSchema(f"this database is run by the Rust-core awa 0.6; awa-py only reads "
                             f"its jobs, queues and DLQ: use its CLI: `{command}`")
    return ForeignSchema(f"this database is run by the Rust-core awa 0.6; awa-py only reads it "
                         f"({method} is done by its own runtime)")


def _refused(method: str) -> Callable[..., Coroutine[Any, Any, NoReturn]]:
    """An ``Engine`` method of ``RustCoreEngine`` that raises ``refusal(method)``."""
    async def refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        raise refusal(method)
    return _named(refuse, method)


def _refused_sync(method: str) -> Callable[..., NoReturn]:
    """``_refused`` for the blocking methods (``..._sync``)."""
    def refuse_sync(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        raise refusal(method)
    return _named(refuse_sync, method)


def _named(fn: F, method: str) -> F:
    fn.__name__ = fn.__qualname__ = method
    fn.__doc__ = f"Refused: {WRITE_COMMANDS.get(method, 'the Rust-core runtime does this')}."
    return fn


class RustCoreEngine(CanonicalReads):
    """Reads of the Rust-core awa 0.6 layout; never a write.

    ``schema``: its active queue-storage schema, or None while that database
    still runs the Rust core's canonical engine (then the canonical reads,
    which share its ``awa.jobs_hot`` shape, serve).
    """

    name = NAME
    read_only = True
    # A running attempt's depth scan stops here; deeper backlogs report the cap.
    SCAN_CAP = 1_000_000

    def __init__(self, schema: str | None) -> None:
        self.schema = schema
        self._sql: dict[str, sql.Composed] = {}

    def _q(self, template: str) -> sql.Composed:
        """``template`` (a statement of ``sql/reads.sql`` naming ``{s}``) on this database's
        queue-storage schema: a schema named at run time is an identifier, which cannot be
        a parameter, so it is composed in (``sql.Identifier``), once per statement."""
        composed = self._sql.get(template)
        if composed is None:
            assert self.schema is not None
            composed = sql.SQL(template).format(s=sql.Identifier(self.schema))
            self._sql[template] = composed
        return composed

    @property
    def queue_storage(self) -> bool:
        return self.schema is not None

    # -- running attempts ----------------------------------------------------------
    async def running_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                               started_before: datetime | None = None,
                               job_ids: Sequence[int] | None = None,
                               limit: int) -> list[RunningAttemptRead]:
        if not self.queue_storage:
            return await super().running_attempts(conn, started_before=started_before,
                                                  job_ids=job_ids, limit=limit)
        rows = await self._open_attempts(conn, started_before=started_before, job_ids=job_ids,
                                         limit=limit)
        return [self._attempt(r) for r in rows]

    async def _open_attempts(self, conn: psycopg.AsyncConnection[Any], *, detail: bool = False,
                             started_before: datetime | None = None,
                             job_ids: Sequence[int] | None = None, queue: str | None = None,
                             staleness_s: float | None = None, superseded: bool = False,
                             limit: int | None) -> list[dict[str, Any]]:
        """Rows of ``OPEN_ATTEMPTS``, the one statement that reads running attempts on this
        layout (its open-receipt rule written once): ``detail`` adds args and payload,
        ``superseded`` keeps the attempts whose unique key another job holds; ``limit``
        None reads them all."""
        return await fetch_all(conn, self._q(OPEN_ATTEMPTS), {
            "detail": detail, "ids": None if job_ids is None else list(job_ids),
            "started_before": started_before, "queue": queue, "staleness": staleness_s,
            "superseded": superseded, "limit": limit})

    async def _running_rows(self, conn: psycopg.AsyncConnection[Any], *,
                            job_ids: Sequence[int] | None = None,
                            limit: int) -> list[dict[str, Any]]:
        """Running attempts with what a job needs (args, payload)."""
        return await self._open_attempts(conn, detail=True, job_ids=job_ids, limit=limit)

    @staticmethod
    def _attempt(r: dict[str, Any]) -> RunningAttemptRead:
        return running_attempt(r)

    async def running_counts(self, conn: psycopg.AsyncConnection[Any], *, stale_after_s: float,
                             queue: str | None = None) -> list[RunningCounts]:
        if not self.queue_storage:
            return await super().running_counts(conn, stale_after_s=stale_after_s, queue=queue)
        # Counted here from every open attempt of the queue(s): the same counts as
        # common.reads.running_counts reads them (max ignores a missing heartbeat, a NULL
        # stale / overdue counts for neither), per queue, by name.
        counts: dict[str, dict[str, Any]] = {}
        for r in await self._open_attempts(conn, queue=queue, staleness_s=stale_after_s,
                                           limit=None):
            c = counts.setdefault(r["queue"], {"queue": r["queue"], "running": 0,
                                               "oldest_heartbeat_s": None, "stale": 0,
                                               "overdue": 0})
            c["running"] += 1
            age = r["heartbeat_age_s"]
            if age is not None and (c["oldest_heartbeat_s"] is None
                                    or age > c["oldest_heartbeat_s"]):
                c["oldest_heartbeat_s"] = age
            c["stale"] += bool(r["stale"])
            c["overdue"] += bool(r["overdue"])
        return running_counts(counts[q] for q in sorted(counts))

    async def cancelled_while_running(self, conn: psycopg.AsyncConnection[Any], *,
                                      window_s: float, stale_after_s: float,
                                      queue: str | None = None,
                                      limit: int) -> list[CancelledAttempt]:
        """Not readable on queue storage (a cancel closes the claim at once): none."""
        if not self.queue_storage:
            return await super().cancelled_while_running(
                conn, window_s=window_s, stale_after_s=stale_after_s, queue=queue, limit=limit)
        return []

    # -- queue depth, lag, completions -------------------------------------------------
    async def queue_depths(self, conn: psycopg.AsyncConnection[Any], *,
                           cap: int | None = None) -> list[QueueDepth]:
        if not self.queue_storage:
            from awa.storage.canonical import ENGINE
            return await ENGINE.queue_depths(conn, cap=cap)
        limit = cap or self.SCAN_CAP
        rows = await fetch_all(conn, self._q(QUEUE_BACKLOG), {"cap": limit, "scan": self.SCAN_CAP})
        running = await self.running_counts(conn, stale_after_s=1e9)
        depth: dict[str, dict[str, int]] = {}
        oldest: dict[str, datetime | None] = {}
        dlq: dict[str, int] = {}
        for r in rows:
            if r["state"] == "dlq":
                dlq[r["queue"]] = int(r["n"])
                continue
            if r["n"]:
                depth.setdefault(r["queue"], {})[r["state"]] = min(int(r["n"]), limit)
            if r["state"] == "available":
                oldest[r["queue"]] = r["oldest_available"]
        for c in running:
            depth.setdefault(c.queue, {})["running"] = c.running
        now = (await fetch_all(conn, NOW))[0]["now"]
        out = []
        for queue in sorted(set(depth) | set(dlq)):
            counts = depth.get(queue, {})
            at = oldest.get(queue) if counts.get("available") else None
            capped = frozenset(s for s, n in counts.items() if cap and n >= cap)
            if cap and dlq.get(queue, 0) >= cap:
                capped |= {"dlq"}
            out.append(QueueDepth(queue, counts, at,
                                  None if at is None else max((now - at).total_seconds(), 0.0),
                                  min(dlq.get(queue, 0), limit), capped))
        return out

    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Sequence[str], *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        if not self.queue_storage:
            return await super().queue_details(conn, queues, since=since, until=until, cap=cap)
        depths = {d.queue: d for d in await self.queue_depths(conn, cap=cap)}
        completed: dict[str, int] = {}
        if since is not None:
            completed = {r["queue"]: int(r["n"]) for r in await fetch_all(
                conn, self._q(COMPLETED_SINCE), {"since": since, "until": until})}
        meta = {r["queue"]: r for r in await fetch_all(conn, QUEUE_META, {"queues": list(queues)})}
        out = []
        # A queue whose jobs all completed has no depth and maybe no queue_meta row; its
        # completions still make it a queue with details (``queue_stats`` asks for the queues
        # with depth: without this, a drained zero-deadline queue's compact completions were
        # counted and then dropped, and ``queue stats`` read 0 where 0.6.9 reads them).
        for queue in sorted(set(queues) | set(meta) | set(completed)):
            d, m = depths.get(queue), meta.get(queue) or {}
            out.append(QueueDetail(queue, d.oldest_available_at if d else None,
                                   d.lag_s if d else None, min(completed.get(queue, 0), cap),
                                   bool(m.get("paused")), m.get("paused_at"), m.get("paused_by")))
        return out

    async def created_timeseries(self, conn: psycopg.AsyncConnection[Any], *, minutes: int,
                                 cap: int) -> list[StateBucket]:
        """On queue storage, every job of the window (``CREATED_TIMESERIES``; no cap)."""
        if not self.queue_storage:
            return await super().created_timeseries(conn, minutes=minutes, cap=cap)
        return [StateBucket(r["bucket"], r["state"], int(r["n"]))
                for r in await fetch_all(conn, CREATED_TIMESERIES, {"minutes": minutes})]

    async def kind_counts(self, conn: psycopg.AsyncConnection[Any], *,
                          cap: int) -> list[KindCount]:
        """On queue storage, a full count (``KIND_COUNTS``; no cap)."""
        if not self.queue_storage:
            return await super().kind_counts(conn, cap=cap)
        return [KindCount(r["kind"], int(r["job_count"]), int(r["queue_count"]),
                          int(r["completed_last_hour"]))
                for r in await fetch_all(conn, KIND_COUNTS)]

    async def recently_completed_queues(self, conn: psycopg.AsyncConnection[Any], *,
                                        within_s: float, limit: int) -> list[str]:
        """The queues of the terminal rows the ring keeps, and of recent compact completions
        (``RECENTLY_COMPLETED``: 0.6.9 has no index on finalization time)."""
        if not self.queue_storage:
            return await super().recently_completed_queues(conn, within_s=within_s, limit=limit)
        return [r["queue"] for r in await fetch_all(conn, self._q(RECENTLY_COMPLETED),
                                                    {"within": within_s, "limit": limit})]

    async def completed_totals(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int] | None:
        """Kept completed rows plus 0.6.9's folded count (``COMPLETED_TOTALS``)."""
        if not self.queue_storage:
            return None
        return {r["queue"]: int(r["n"]) for r in await fetch_all(conn, self._q(COMPLETED_TOTALS))}

    async def queue_stats(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueStat]:
        if not self.queue_storage:
            from awa.storage.canonical import ENGINE
            return await ENGINE.queue_stats(conn)
        now = (await fetch_all(conn, NOW))[0]["now"]
        from datetime import timedelta
        depths = {d.queue: d for d in await self.queue_depths(conn)}
        details = {d.queue: d for d in await self.queue_details(
            conn, sorted(depths), since=now - timedelta(hours=1), until=now, cap=self.SCAN_CAP)}
        out = []
        for queue in sorted(set(depths) | set(details)):
            d, q = depths.get(queue), details.get(queue)
            c = d.count if d else (lambda s: 0)
            out.append(QueueStat(queue, available=c("available"), running=c("running"),
                                 failed=c("failed"),
                                 completed_last_hour=q.completed if q else 0,
                                 lag_seconds=d.lag_s if d else None,
                                 paused=bool(q and q.paused), scheduled=c("scheduled"),
                                 retryable=c("retryable"), waiting_external=c("waiting_external")))
        return out

    # -- DLQ ---------------------------------------------------------------------------
    async def dlq_depths_by_queue(self, conn: psycopg.AsyncConnection[Any], *, cap: int,
                                  max_queues: int) -> list[DlqDepth]:
        if not self.queue_storage:
            return await super().dlq_depths_by_queue(conn, cap=cap, max_queues=max_queues)
        rows = await fetch_all(conn, self._q(DLQ_DEPTHS_BY_QUEUE),
                           {"cap": cap, "max_queues": max_queues})
        return [DlqDepth(r["queue"], None, int(r["n"]), r["n"] >= cap) for r in rows]

    async def dlq_depths(self, conn: psycopg.AsyncConnection[Any], *, queue: str | None = None,
                         recent_s: float = 0.0) -> list[DlqDepth]:
        if not self.queue_storage:
            return await super().dlq_depths(conn, queue=queue, recent_s=recent_s)
        rows = await fetch_all(conn, self._q(DLQ_DEPTHS), {"queue": queue, "recent": recent_s})
        return [DlqDepth(r["queue"], r["dlq_reason"], int(r["depth"]), False, r["newest"],
                         int(r["recent"])) for r in rows]

    async def dlq_depth(self, conn: psycopg.AsyncConnection[Any], *,
                        queue: str | None = None) -> int:
        return sum(d.count for d in await self.dlq_depths(conn, queue=queue))

    async def dlq_depth_by_queue(self, conn: psycopg.AsyncConnection[Any]) -> list[QueueCount]:
        by: dict[str, int] = {}
        for d in await self.dlq_depths(conn):
            by[d.queue] = by.get(d.queue, 0) + d.count
        return [QueueCount(q, n) for q, n in sorted(by.items())]

    async def _dlq_rows(self, conn: psycopg.AsyncConnection[Any], *, queue: str | None = None,
                        kind: str | None = None, reason: str | None = None,
                        tag: str | None = None, before_at: datetime | None = None,
                        before_id: int | None = None, limit: int) -> list[dict[str, Any]]:
        if not self.queue_storage:
            raise refusal("list_dlq")  # pragma: no cover - canonical Rust layouts: see list_dlq
        return await fetch_all(conn, self._q(DLQ_LIST), {
            "queue": queue, "kind": kind, "reason": reason, "tag": tag,
            "before_at": before_at, "before_id": before_id, "limit": limit})

    @staticmethod
    def _dlq_entry(r: dict[str, Any]) -> DlqEntry:
        return DlqEntry(Job.from_row({**r, "state": JobState.Failed.value}), r["dlq_reason"],
                        r["dlq_at"], int(r["original_run_lease"]))

    async def get_dlq_job(self, conn: psycopg.AsyncConnection[Any],
                          job_id: int) -> DlqEntry | None:
        if not self.queue_storage:
            from awa.storage.canonical import ENGINE
            return await ENGINE.get_dlq_job(conn, job_id)
        rows = await fetch_all(conn, self._q(DLQ_BY_ID), {"id": job_id})
        return self._dlq_entry(rows[0]) if rows else None

    async def list_dlq(self, conn: psycopg.AsyncConnection[Any], where: DlqFilter,
                       limit: int = 100) -> list[DlqEntry]:
        if not self.queue_storage:
            from awa.storage.canonical import ENGINE
            return await ENGINE.list_dlq(conn, where, limit)
        rows = await self._dlq_rows(conn, queue=where.queue, kind=where.kind, tag=where.tag,
                                    before_at=where.before_dlq_at, before_id=where.before_id,
                                    limit=limit)
        return [self._dlq_entry(r) for r in rows]

    async def dlq_page(self, conn: psycopg.AsyncConnection[Any],
                       query: DlqPageQuery) -> DlqEntriesPage:
        if not self.queue_storage:
            return await super().dlq_page(conn, query)
        before = query.before
        rows = await self._dlq_rows(conn, queue=query.queue, kind=query.kind,
                                    reason=query.reason,
                                    before_at=before.dlq_at if before else None,
                                    before_id=before.job_id if before else None,
                                    limit=query.page)
        entries = [DlqSummary(r["id"], r["kind"], r["queue"], r["dlq_reason"], r["dlq_at"],
                              r["attempt"], r["max_attempts"], r["last_error"]) for r in rows]
        last = entries[-1] if entries and len(entries) >= query.page else None
        return DlqEntriesPage(entries, DlqCursor(last.dlq_at, last.job_id) if last else None)

    async def repeated_errors(self, conn: psycopg.AsyncConnection[Any], *,
                              queue: str | None = None, sample: int,
                              limit: int = 10) -> list[RepeatedError]:
        if not self.queue_storage:
            return await super().repeated_errors(conn, queue=queue, sample=sample, limit=limit)
        rows = await fetch_all(conn, self._q(REPEATED_ERRORS),
                           {"queue": queue, "sample": sample, "limit": limit})
        return [RepeatedError(r["kind"], r["queue"], r["message"], int(r["jobs"]),
                              int(r["max_repeats_in_one_job"]), list(r["sample_job_ids"]),
                              list(r["places"])) for r in rows]

    # -- jobs --------------------------------------------------------------------------
    @staticmethod
    def _running_job(r: dict[str, Any]) -> Job[Any]:
        payload = r["payload"] or {}
        return Job.from_row({
            **{k: r[k] for k in ("id", "kind", "queue", "priority", "attempt", "max_attempts",
                                 "heartbeat_at", "deadline_at", "attempted_at", "run_lease",
                                 "run_at", "created_at", "unique_key", "tags")},
            "args": r["args"] if r["args"] is not None else {},
            "state": JobState.Running.value, "errors": payload.get("errors") or [],
            "metadata": payload.get("metadata") or {}, "progress": payload.get("progress")})

    async def get_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Job[Any] | None:
        record = await self.job_record(conn, job_id)
        return record.job if record else None

    async def job_record(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                         cap_bytes: int | None = None) -> JobRecord | None:
        if not self.queue_storage:
            return await super().job_record(conn, job_id, cap_bytes=cap_bytes)
        record = await self._qs_job_record(conn, job_id)
        return record if record is None or cap_bytes is None else cap_record(record, cap_bytes)

    async def _qs_job_record(self, conn: psycopg.AsyncConnection[Any],
                             job_id: int) -> JobRecord | None:
        running = await self._running_rows(conn, job_ids=[job_id], limit=1)
        if running:
            return JobRecord(self._running_job(running[0]))
        rows = await fetch_all(conn, JOB_BY_ID, {"id": job_id})
        if rows:
            return JobRecord(Job.from_row(rows[0]))
        dlq = await self.get_dlq_job(conn, job_id)
        return JobRecord(dlq.job, dlq.reason, dlq.dlq_at) if dlq else None

    async def dump_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> JobDump | None:
        record = await self.job_record(conn, job_id)
        return JobDump(record.job, record.dlq_reason, record.dlq_at) if record else None

    async def list_jobs(self, conn: psycopg.AsyncConnection[Any], *,
                        state: JobState | None = None, kind: str | None = None,
                        queue: str | None = None, tag: str | None = None,
                        limit: int = 100, before_id: int | None = None) -> list[Job[Any]]:
        if not self.queue_storage:
            from awa.storage.canonical import ENGINE
            return await ENGINE.list_jobs(conn, state=state, kind=kind, queue=queue, tag=tag,
                                          limit=limit, before_id=before_id)
        if before_id is not None:
            raise ValidationError("paging by before_id is not available on the Rust-core "
                                  "queue-storage layout (read-only view); narrow the filter")
        wanted = None if state is None else JobState(state).value
        jobs: list[Job[Any]] = []
        if wanted in (None, JobState.Running.value):
            jobs += [self._running_job(r) for r in await self._running_rows(
                conn, limit=limit * 4 if (kind or queue or tag) else limit)
                if (kind is None or r["kind"] == kind) and (queue is None or r["queue"] == queue)
                and (tag is None or tag in (r["tags"] or []))]
        if wanted != JobState.Running.value:
            rows = await fetch_all(conn, JOBS, {"state": wanted, "kind": kind, "queue": queue,
                                            "tag": tag, "limit": limit})
            jobs += [Job.from_row(r) for r in rows if r["state"] != JobState.Running.value]
        jobs.sort(key=lambda j: j.id, reverse=True)
        return jobs[:limit]

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        if not self.queue_storage:
            return await super().job_page(conn, query)
        jobs = await self.list_jobs(conn, state=JobState(query.state) if query.state else None,
                                    kind=query.kind, queue=query.queue, tag=query.tag,
                                    limit=query.page)
        return [JobSummary(j.id, j.kind, j.queue, j.state.value, j.priority, j.attempt,
                           j.max_attempts, j.run_at, j.created_at, j.attempted_at,
                           j.finalized_at, list(j.tags),
                           str(j.errors[-1].get("error", ""))[:500] if j.errors else None)
                for j in jobs]

    # -- uniqueness ----------------------------------------------------------------------
    async def unique_claim_holders(self, conn: psycopg.AsyncConnection[Any],
                                   keys: Sequence[bytes]) -> list[UniqueClaimHolder]:
        if not self.queue_storage:
            return await super().unique_claim_holders(conn, keys)
        if not keys:
            return []
        rows = await fetch_all(conn, self._q(UNIQUE_HOLDERS), {"keys": [bytes(k) for k in keys]})
        running = {a.id for a in await self.running_attempts(
            conn, job_ids=[r["job_id"] for r in rows], limit=len(rows))}
        return [UniqueClaimHolder(bytes(r["unique_key"]), r["job_id"],
                                  "running" if r["job_id"] in running else r["state"],
                                  bool(r["in_dlq"])) for r in rows]

    async def wedged_claims(self, conn: psycopg.AsyncConnection[Any]) -> list[WedgedClaims]:
        if not self.queue_storage:
            return await super().wedged_claims(conn)
        wedged: dict[str, int] = {}
        for r in await self._open_attempts(conn, superseded=True, limit=None):
            wedged[r["queue"]] = wedged.get(r["queue"], 0) + 1
        return [WedgedClaims(q, n) for q, n in sorted(wedged.items())]

    async def superseded_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                                  queue: str | None = None,
                                  limit: int) -> list[SupersededAttempt]:
        """Running attempts whose unique key another job holds, with the holder's state."""
        if not self.queue_storage:
            return await super().superseded_attempts(conn, queue=queue, limit=limit)
        rows = await self._open_attempts(conn, superseded=True, queue=queue, limit=limit)
        holders = {(h.unique_key, h.job_id): h for h in await self.unique_claim_holders(
            conn, list({bytes(r["unique_key"]) for r in rows}))}
        out = []
        for r in rows:
            h = holders.get((bytes(r["unique_key"]), r["claim_holder"]))
            out.append(SupersededAttempt(r["id"], r["kind"], r["queue"],
                                         bytes(r["unique_key"]), r["claim_holder"],
                                         h.state if h else None))
        return out

    async def list_active_cron_jobs(
            self, conn: psycopg.AsyncConnection[Any]) -> list[ActiveCronSchedule]:
        """Its ``awa.cron_jobs`` has this distribution's columns (0.6.9's migrations 1, 15
        and 26), so the schedules read alike: the ops tools judge their lateness."""
        return [ActiveCronSchedule(**r) for r in await fetch_all(conn, SELECT_ACTIVE_CRON_JOBS)]

    async def runtime_descriptor_hashes(
            self, conn: psycopg.AsyncConnection[Any]) -> list[RuntimeDescriptorHashes]:
        return [RuntimeDescriptorHashes(str(r["instance_id"]), r["descriptor_hashes"])
                for r in await fetch_all(conn, RUNTIME_DESCRIPTOR_HASHES)]

    # -- refused: every other Engine method (``refusal``), so that this reader is an Engine
    # for the CLI's admin commands (``awa.cli.db.ForeignAdmin``) and writes nothing.  What
    # the Rust-core CLI does (``WRITE_COMMANDS``):
    cancel = _refused("cancel")
    retry = _refused("retry")
    retry_failed = _refused("retry_failed")
    discard_failed = _refused("discard_failed")
    pause_queue = _refused("pause_queue")
    resume_queue = _refused("resume_queue")
    drain_queue = _refused("drain_queue")
    purge_dlq = _refused("purge_dlq")
    purge_dlq_job = _refused("purge_dlq_job")
    retry_from_dlq = _refused("retry_from_dlq")
    bulk_retry_from_dlq = _refused("bulk_retry_from_dlq")
    move_failed_to_dlq = _refused("move_failed_to_dlq")
    bulk_move_failed_to_dlq = _refused("bulk_move_failed_to_dlq")
    delete_cron_job = _refused("delete_cron_job")
    list_cron_jobs = _refused("list_cron_jobs")
    get_cron_job = _refused("get_cron_job")
    # What its own runtime does (``RUNTIME_WRITES``): enqueue,
    insert_batch = _refused("insert_batch")
    insert_batch_sync = _refused_sync("insert_batch_sync")
    copy_batch = _refused("copy_batch")
    unique_holder = _refused("unique_holder")
    unique_holder_sync = _refused_sync("unique_holder_sync")
    # execution,
    warm_up = _refused("warm_up")
    claim_batch = _refused("claim_batch")
    complete_batch = _refused("complete_batch")
    retry_batch = _refused("retry_batch")
    snooze_batch = _refused("snooze_batch")
    cancel_batch = _refused("cancel_batch")
    fail_batch = _refused("fail_batch")
    dead_letter_batch = _refused("dead_letter_batch")
    park_batch = _refused("park_batch")
    cancel_superseded = _refused("cancel_superseded")
    heartbeat_batch = _refused("heartbeat_batch")
    flush_progress_batch = _refused("flush_progress_batch")
    upsert_runtime_snapshot = _refused("upsert_runtime_snapshot")
    available_counts = _refused("available_counts")
    # maintenance,
    rescue_stale_heartbeats = _refused("rescue_stale_heartbeats")
    rescue_expired_deadlines = _refused("rescue_expired_deadlines")
    rescue_callback_timeouts = _refused("rescue_callback_timeouts")
    promote_due = _refused("promote_due")
    purge_finalized = _refused("purge_finalized")
    purge_aged_dlq = _refused("purge_aged_dlq")
    rotate_and_prune = _refused("rotate_and_prune")
    purge_unseen_runtimes = _refused("purge_unseen_runtimes")
    purge_unseen_descriptors = _refused("purge_unseen_descriptors")
    age_priorities = _refused("age_priorities")
    fire_cron = _refused("fire_cron")
    upsert_descriptors = _refused("upsert_descriptors")
    set_runtime_descriptor_hashes = _refused("set_runtime_descriptor_hashes")
    clean_for_tests = _refused("clean_for_tests")
    # callbacks,
    register_callback = _refused("register_callback")
    park_for_callback = _refused("park_for_callback")
    poll_callback_wait = _refused("poll_callback_wait")
    complete_external = _refused("complete_external")
    fail_external = _refused("fail_external")
    retry_external = _refused("retry_external")
    resume_external = _refused("resume_external")
    heartbeat_callback = _refused("heartbeat_callback")
    lock_open_callback = _refused("lock_open_callback")
    find_callback = _refused("find_callback")
    # cron administration,
    upsert_cron_jobs = _refused("upsert_cron_jobs")
    pause_cron_job = _refused("pause_cron_job")
    resume_cron_job = _refused("resume_cron_job")
    trigger_cron_job = _refused("trigger_cron_job")
    # and batch operations (the Rust core keeps and runs its own: its migration v029).
    batch_insert = _refused("batch_insert")
    batch_list = _refused("batch_list")
    batch_get = _refused("batch_get")
    batch_request_cancel = _refused("batch_request_cancel")
    batch_preview = _refused("batch_preview")
    batch_next_active = _refused("batch_next_active")
    batch_start_scan = _refused("batch_start_scan")
    batch_scan_page = _refused("batch_scan_page")
    batch_scanned = _refused("batch_scanned")
    batch_apply_chunk = _refused("batch_apply_chunk")
    batch_finish = _refused("batch_finish")


def rust_core_engine(layout: StorageLayout) -> RustCoreEngine:
    """The read-only engine of a Rust-core database (``layout.distribution`` is
    ``rust_core``): an ``Engine`` whose every write is refused in one line.  Callers outside
    ``awa/storage`` reach it through ``awa.storage.read_engine_for`` / ``rust_core_engine``."""
    return RustCoreEngine(layout.schema if layout.engine == QUEUE_STORAGE else None)
