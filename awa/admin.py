"""Operator functions: inspect, cancel, retry, pause, drain, and the DLQ.

The ``awa`` CLI, the TUI and awa-ops' operator actions all call these, so
each action has exactly one implementation.  This module validates the
operator's input, calls the storage engine (``awa.storage.engine.AdminOps``;
the SQL lives in each engine's admin module and the shared part in
``awa.storage.common.admin``) and records the metrics
once the engine's write has committed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from awa import config, lifecycle, recording
from awa.bulk_selection import BulkFilter, Target, select_targets
from awa.job import JOB_COLUMNS, Job, JobNotFound, JobState, UniqueConflict, ValidationError
from awa.known_queues import read_known_queues
from awa.serialization import encode_args
from awa.storage.common.enqueue import (
    normalize_run_at,
    unique_error,
    validate_priority,
    validate_queue,
)
from awa.storage.engine import (
    DlqEntry,
    DlqFilter,
    Engine,
    JobDump,
    JobListQuery,
    JobSummary,
    QueueCount,
    QueueStat,
    RetryFailedResult,
)
from awa.unique import unique_key

__all__ = ["AdminMixin", "ConnectionLender", "DlqEntry", "QueueStat", "RetryFailedResult",
           "render_dump"]

# awa.callbacks' name for the unique-collision error (the canonical engine owns it now).
_unique_error = unique_error


def _validate_state(state: str | JobState | None) -> JobState | None:
    if state is None:
        return None
    value = state.value if isinstance(state, JobState) else str(state)
    if value not in config.JOB_STATES:
        raise ValidationError(f"unknown state {value!r}; expected one of "
                              f"{', '.join(config.JOB_STATES)}")
    return JobState(value)


def _validate_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError(f"limit must be a positive integer, got {limit!r}")
    return limit


def wrong_state(job_id: int, state: str, allowed: str, action: str) -> str:
    """Why a cancel or retry applied to nothing (the CLI, the API and the Python API)."""
    return f"job {job_id} is {state}; only {allowed} jobs can be {action}"


def _not_found(job_id: int) -> JobNotFound:
    return JobNotFound(f"job {job_id} not found (it may never have existed or was "
                       f"removed by retention)")


class ConnectionLender:
    """What the operator functions (``AdminMixin``, ``BatchOperationsMixin``) run on: an
    engine, and a connection for each call.

    The client and the API lend their pool's connections (the default ``_connection``);
    what holds one connection in a transaction of its own (the console's session, the CLI's
    read-only connection to a Rust-core database) lends that one by overriding it.
    """

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        raise NotImplementedError  # provided by AsyncClient

    async def _get_engine(self) -> Engine:
        raise NotImplementedError  # provided by AsyncClient

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with (await self._get_pool()).connection() as conn:
            yield conn


class AdminMixin(ConnectionLender):
    """Operator functions of the client, on what ``ConnectionLender`` lends."""

    # -- jobs --------------------------------------------------------------
    async def get_job(self, job_id: int) -> Job[Any]:
        engine = await self._get_engine()
        async with self._connection() as conn:
            job = await engine.get_job(conn, int(job_id))
        if job is None:
            raise _not_found(job_id)
        return job

    async def list_jobs(self, *, state: str | None = None, kind: str | None = None,
                        queue: str | None = None, limit: int = 100, tag: str | None = None,
                        before_id: int | None = None) -> list[Job[Any]]:
        """Newest first; ``before_id``: the next page, below the last id seen."""
        wanted = _validate_state(state)
        limit = _validate_limit(limit)
        queue = None if queue is None else validate_queue(queue)
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.list_jobs(conn, state=wanted, kind=kind, queue=queue,
                                          limit=limit, tag=tag, before_id=before_id)

    async def list_job_rows(self, *, state: str | None = None, kind: str | None = None,
                            queue: str | None = None, limit: int = 100) -> list[JobSummary]:
        """``list_jobs`` for operators: the list columns only, never the args or any other
        big value (a 10 MB argument costs nothing here)."""
        wanted = _validate_state(state)
        limit = _validate_limit(limit)
        queue = None if queue is None else validate_queue(queue)
        query = JobListQuery(state=wanted.value if wanted else None, queue=queue, kind=kind,
                             page=limit, window=max(limit, config.TUI_SCAN_WINDOW))
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.job_page(conn, query)

    async def dump_job(self, job_id: int) -> str:
        """Everything an operator asks about one job, as text: attempts, errors, progress."""
        engine = await self._get_engine()
        async with self._connection() as conn:
            dump = await engine.dump_job(conn, int(job_id))
        if dump is None:
            raise _not_found(job_id)
        return render_dump(dump)

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

        Raises ``JobNotFound`` (an ``AwaError``, as awa-pg 0.6.9) when there is no such
        job or it already finished.
        """
        job = await self._cancel_job(job_id)
        if job is None:
            raise await self._nothing_to_do(job_id, "unfinished", "cancelled")
        return job

    async def _cancel_job(self, job_id: int) -> Job[Any] | None:
        """``cancel``, with ``None`` instead of the error (the console's bulk actions)."""
        engine = await self._get_engine()
        async with self._connection() as conn:
            job = await engine.cancel(conn, int(job_id))
        if job is not None:
            recording.record_job_cancelled(job)
        return job

    async def _nothing_to_do(self, job_id: int, allowed: str, action: str) -> JobNotFound:
        """The error of a cancel/retry that applied to nothing: which job, in what state."""
        engine = await self._get_engine()
        async with self._connection() as conn:
            found = await engine.get_job(conn, int(job_id))
        if found is None:
            return _not_found(job_id)
        return JobNotFound(wrong_state(job_id, found.state.value, allowed, action))

    async def cancel_by_unique_key(self, kind: str, *, queue: str | None = None,
                                   args: Any | None = None,
                                   period_bucket: int | None = None) -> Job[Any] | None:
        """Cancel whichever job holds the unique key these parts hash to."""
        plain = None if args is None else encode_args(args)
        key = unique_key(kind, queue=queue, args=plain, period_bucket=period_bucket)
        engine = await self._get_engine()
        async with self._connection() as conn:
            holder = await engine.unique_holder(conn, key)
        return await self._cancel_job(holder.job_id) if holder else None

    async def retry(self, job_id: int) -> Job[Any] | None:
        """Run a failed, cancelled or callback-waiting job again from scratch (fresh
        attempt budget).  Raises ``JobNotFound`` (an ``AwaError``, as awa-pg 0.6.9) when
        there is no such job or it is in another state."""
        job = await self._retry_job(job_id)
        if job is None:
            raise await self._nothing_to_do(job_id, "failed, cancelled or waiting_external",
                                            "retried")
        return job

    async def _retry_job(self, job_id: int) -> Job[Any] | None:
        """``retry``, with ``None`` instead of the error (the console's bulk actions)."""
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.retry(conn, int(job_id))

    async def retry_failed(self, *, kind: str | None = None,
                           queue: str | None = None) -> RetryFailedResult:
        """Retry every failed job of a kind and/or queue; unique duplicates stay failed."""
        if kind is None and queue is None:
            raise ValidationError("retry_failed needs kind= or queue= (CLI: --kind or --queue)")
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.retry_failed(conn, kind=kind, queue=queue)

    async def discard_failed(self, kind: str) -> int:
        """Delete the failed jobs of one kind; returns how many."""
        if not kind:
            raise ValidationError("discard_failed needs a kind (CLI: --kind)")
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.discard_failed(conn, kind)

    # -- queues ------------------------------------------------------------
    async def pause_queue(self, queue: str, paused_by: str | None = None) -> None:
        queue = validate_queue(queue)
        engine = await self._get_engine()
        async with self._connection() as conn:
            await engine.pause_queue(conn, queue, paused_by)

    async def resume_queue(self, queue: str) -> None:
        queue = validate_queue(queue)
        engine = await self._get_engine()
        async with self._connection() as conn:
            await engine.resume_queue(conn, queue)

    async def drain_queue(self, queue: str) -> int:
        """Cancel every job of the queue still waiting to run; running ones finish."""
        queue = validate_queue(queue)
        engine = await self._get_engine()
        async with self._connection() as conn:
            drained = await engine.drain_queue(conn, queue)
        recording.record_jobs_cancelled(drained)
        return sum(c.count for c in drained)

    async def queue_stats(self) -> list[QueueStat]:
        """One row per known queue (``awa.known_queues``), zeros included."""
        engine = await self._get_engine()
        async with self._connection() as conn:
            stats = await engine.queue_stats(conn)
            names = await read_known_queues(
                engine, conn, holding=[s.queue for s in stats if s.total_queued or s.running
                                       or s.failed or s.waiting_external],
                recent=[s.queue for s in stats if s.completed_last_hour or s.paused])
        by_queue = {s.queue: s for s in stats}
        return [by_queue.get(name) or QueueStat(name) for name in names]

    # -- dead-letter queue ---------------------------------------------------
    async def dlq_depth(self, *, queue: str | None = None) -> int:
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.dlq_depth(conn, queue=queue)

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        engine = await self._get_engine()
        async with self._connection() as conn:
            return [(c.queue, c.count) for c in await engine.dlq_depth_by_queue(conn)]

    async def list_dlq(self, *, kind: str | None = None, queue: str | None = None,
                       tag: str | None = None, before_id: int | None = None,
                       before_dlq_at: datetime | None = None,
                       limit: int = 100) -> list[DlqEntry]:
        """Newest first; pass the last entry's job id and dlq_at to page on."""
        limit = _validate_limit(limit)
        where = DlqFilter(kind, queue, tag, before_id, before_dlq_at)
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.list_dlq(conn, where, limit)

    async def get_dlq_job(self, job_id: int) -> DlqEntry | None:
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await engine.get_dlq_job(conn, int(job_id))

    async def retry_from_dlq(self, job_id: int, *, run_at: datetime | None = None,
                             priority: int | None = None,
                             queue: str | None = None) -> Job[Any] | None:
        """Back to available (or scheduled at ``run_at``) with a fresh attempt budget."""
        when = normalize_run_at(run_at)
        priority = None if priority is None else validate_priority(priority)
        queue = None if queue is None else validate_queue(queue)
        engine = await self._get_engine()
        async with self._connection() as conn:
            job = await engine.retry_from_dlq(conn, int(job_id), run_at=when, priority=priority,
                                              queue=queue)
        if job is not None:
            recording.record_dlq_retried([QueueCount(job.queue, 1)])
        return job

    async def bulk_retry_from_dlq(self, *, kind: str | None = None, queue: str | None = None,
                                  tag: str | None = None, allow_all: bool = False) -> int:
        where = DlqFilter(kind=kind, queue=queue, tag=tag)
        if where.is_empty and not allow_all:
            raise ValidationError("refusing to retry the whole DLQ without a filter: give "
                                  "kind/queue/tag, or allow_all=True (CLI: --all)")
        engine = await self._get_engine()
        async with self._connection() as conn:
            moved = await engine.bulk_retry_from_dlq(conn, where)
        recording.record_dlq_retried(moved)
        return sum(c.count for c in moved)

    async def purge_dlq(self, *, kind: str | None = None, queue: str | None = None,
                        tag: str | None = None, before_id: int | None = None,
                        before_dlq_at: datetime | None = None, allow_all: bool = False) -> int:
        where = DlqFilter(kind, queue, tag, before_id, before_dlq_at)
        if where.is_empty and not allow_all:
            raise ValidationError("refusing to purge the whole DLQ without a filter: give "
                                  "kind/queue/tag/before, or allow_all=True (CLI: --all)")
        engine = await self._get_engine()
        async with self._connection() as conn:
            purged = await engine.purge_dlq(conn, where)
        recording.record_dlq_entries_purged(purged)
        return sum(c.count for c in purged)

    async def purge_dlq_job(self, job_id: int) -> bool:
        engine = await self._get_engine()
        async with self._connection() as conn:
            purged = await engine.purge_dlq_job(conn, int(job_id))
        recording.record_dlq_entries_purged(purged)
        return bool(purged)

    async def move_failed_to_dlq(self, job_id: int,
                                 reason: str = lifecycle.DLQ_MANUAL) -> DlqEntry | None:
        """Move one failed job into the DLQ; ``None`` if it is not a failed job."""
        engine = await self._get_engine()
        async with self._connection() as conn:
            entry = await engine.move_failed_to_dlq(conn, int(job_id), reason)
        if entry is not None:
            recording.record_job_dlq_moved(entry.job, reason)
        return entry

    async def bulk_move_failed_to_dlq(self, *, kind: str | None = None, queue: str | None = None,
                                      reason: str = lifecycle.DLQ_MANUAL,
                                      allow_all: bool = False) -> int:
        if kind is None and queue is None and not allow_all:
            raise ValidationError("refusing to move every failed job without a filter: "
                                  "give kind/queue, or allow_all=True (CLI: --all)")
        engine = await self._get_engine()
        async with self._connection() as conn:
            moved = await engine.bulk_move_failed_to_dlq(conn, kind=kind, queue=queue,
                                                         reason=reason)
        recording.record_jobs_dlq_moved(moved, reason)
        return sum(c.count for c in moved)

    # -- bulk commands: exactly what they touch (awa.bulk_selection) ------------------
    async def select_bulk(self, flt: BulkFilter, *,
                          limit: int = config.BULK_SELECT_LIMIT) -> list[Target]:
        """The DLQ entries or failed jobs ``flt`` selects (what a ``--dry-run`` lists)."""
        if flt.queue is not None:
            validate_queue(flt.queue)
        engine = await self._get_engine()
        async with self._connection() as conn:
            return await select_targets(engine, conn, flt, limit=limit)

    async def apply_bulk(self, action: str, targets: list[Target], *,
                         reason: str = lifecycle.DLQ_MANUAL) -> tuple[int, int]:
        """``retry`` / ``purge`` DLQ entries, ``retry`` / ``move`` failed jobs, one by id;
        returns (done, skipped: no longer there, or a unique key held)."""
        done = 0
        for t in targets:
            try:
                if action == "retry-dlq":
                    ok: Any = await self.retry_from_dlq(t.job_id)
                elif action == "purge-dlq":
                    ok = await self.purge_dlq_job(t.job_id)
                elif action == "retry-failed":
                    ok = await self._retry_job(t.job_id)
                elif action == "move-failed":
                    ok = await self.move_failed_to_dlq(t.job_id, reason)
                else:
                    raise ValidationError(f"unknown bulk action {action!r}")
            except UniqueConflict:
                ok = None
            done += 1 if ok else 0
        return done, len(targets) - done


# --- the text dump -----------------------------------------------------------
_TIMESTAMPS = ("created_at", "run_at", "attempted_at", "heartbeat_at", "deadline_at",
               "finalized_at", "callback_timeout_at")


def _fmt(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def render_dump(dump: JobDump | dict[str, Any]) -> str:
    """The job as an operator reads it: identity, timestamps, attempts and errors."""
    row = dump if isinstance(dump, dict) else {
        **{name: getattr(dump.job, name) for name in JOB_COLUMNS},
        "dlq_reason": dump.dlq_reason, "dlq_at": dump.dlq_at}
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
        lines += [f"  {label:<12} {row[name]}" for name, label in _CALLBACK_FIELDS
                  if row.get(name) is not None]
    progress = row.get("progress")
    lines.append(f"progress: {_fmt(progress)}" if progress else "progress: none")
    errors = row.get("errors") or []
    if errors:
        lines.append(f"errors ({len(errors)}):")
        for entry in errors:
            lines += _error_lines(entry)
    else:
        lines.append("errors: none")
    return "\n".join(lines)


_CALLBACK_FIELDS = (("callback_filter", "filter:"), ("callback_on_complete", "on_complete:"),
                    ("callback_on_fail", "on_fail:"), ("callback_transform", "transform:"))


def _error_lines(entry: Any) -> list[str]:
    """One attempt's error, then the handler's traceback when the runtime stored one."""
    if not isinstance(entry, dict):
        return [f"  {entry}"]
    flag = " [terminal]" if entry.get("terminal") else ""
    lines = [f"  attempt {entry.get('attempt')} at {entry.get('at')}{flag}: {entry.get('error')}"]
    traceback = entry.get("traceback")
    if traceback:
        lines.append("    traceback:")
        lines += [f"      {line}" for line in str(traceback).splitlines()]
    return lines
