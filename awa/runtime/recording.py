"""Where the runtime records its metrics: one function per recording point.

Instruments and attribute keys come from the catalogue in ``awa.metrics``;
this module only maps runtime events onto them, once per batch on the hot
path (``add(n)``), right after the guarded write returned its rows.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter
from typing import TYPE_CHECKING

from awa import metrics
from awa.metrics import METRICS, job_attributes, queue_attributes

if TYPE_CHECKING:  # pragma: no cover
    from awa.job import Job
    from awa.runtime.completion import Finished, Outcome

def runtime_started(version: str, instance_id: str, hostname: str) -> None:
    METRICS.runtime_info.set(1, {metrics.ATTR_RUNTIME_VERSION: version,
                                 metrics.ATTR_RUNTIME_INSTANCE: instance_id,
                                 metrics.ATTR_RUNTIME_HOST: hostname})


def wakeup(queue: str, reason: str) -> None:
    METRICS.dispatch_wakeups.add(1, {**queue_attributes(queue),
                                     metrics.ATTR_DISPATCH_REASON: reason})


def rate_limited(queue: str) -> None:
    METRICS.dispatch_rate_limited.add(1, queue_attributes(queue))


def claimed(queue: str, jobs: "list[Job]", seconds: float) -> None:
    """One claim statement returned ``jobs`` after ``seconds``."""
    qattrs = queue_attributes(queue)
    METRICS.dispatch_claim_duration.record(seconds, qattrs)
    if not jobs:
        METRICS.dispatch_empty_claims.add(1, qattrs)
        return
    METRICS.dispatch_claim_batches.add(1, qattrs)
    METRICS.dispatch_claim_batch_size.record(len(jobs), qattrs)
    METRICS.job_in_flight.add(len(jobs), qattrs)
    by_kind = Counter(job.kind for job in jobs)
    for kind, n in by_kind.items():
        METRICS.job_claimed.add(n, job_attributes(kind, queue))
    wait = METRICS.job_wait_duration
    for job in jobs:
        runnable = job.run_at if job.run_at and job.run_at > job.created_at else job.created_at
        if job.attempted_at is not None and runnable is not None:
            wait.record(max((job.attempted_at - runnable).total_seconds(), 0.0),
                        job_attributes(job.kind, queue))


def handler_finished(kind: str, queue: str, seconds: float) -> None:
    METRICS.job_duration.record(seconds, job_attributes(kind, queue))
    # A claimed batch finishes in the same loop turn: one in-flight add per
    # queue per turn instead of one per job (each SDK call costs ~10 us).
    loop = asyncio.get_running_loop()
    finished = _finished_this_turn.get(loop)
    if finished is None:
        finished = _finished_this_turn[loop] = Counter()
        loop.call_soon(_record_finished, loop)
    finished[queue] += 1


_finished_this_turn: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Counter[str]]" = \
    weakref.WeakKeyDictionary()


def _record_finished(loop: asyncio.AbstractEventLoop) -> None:
    for queue, n in _finished_this_turn.pop(loop).items():
        METRICS.job_in_flight.add(-n, queue_attributes(queue))


def outcomes(outcome: "Outcome", applied: "list[Finished]") -> None:
    """Transitions the completion batcher just committed (one outcome kind)."""
    from awa.runtime.completion import Outcome

    by_key = Counter((f.ctx.job.kind, f.ctx.job.queue) for f in applied)
    for (kind, queue), n in by_key.items():
        attrs = job_attributes(kind, queue)
        if outcome is Outcome.COMPLETED:
            METRICS.job_completed.add(n, attrs)
        elif outcome is Outcome.SNOOZE:
            METRICS.job_snoozed.add(n, attrs)
        elif outcome is Outcome.WAIT:
            METRICS.job_waiting_external.add(n, attrs)
        elif outcome is Outcome.CANCEL:
            METRICS.job_cancelled.add(n, attrs)
        elif outcome is Outcome.RETRY:
            METRICS.job_retried.add(n, attrs)
            errors = sum(1 for f in applied if f.error is not None
                         and f.ctx.job.kind == kind and f.ctx.job.queue == queue)
            if errors:
                METRICS.job_failed.add(errors, {**attrs, metrics.ATTR_TERMINAL: False})
        else:  # FAIL, DLQ: the job ended
            METRICS.job_failed.add(n, {**attrs, metrics.ATTR_TERMINAL: True})
            if outcome is Outcome.DLQ:
                reasons = Counter(f.reason for f in applied
                                  if f.ctx.job.kind == kind and f.ctx.job.queue == queue)
                for reason, m in reasons.items():
                    METRICS.job_dlq_moved.add(m, {**attrs, metrics.ATTR_DLQ_REASON: reason})


def flushed(rows: int, seconds: float) -> None:
    METRICS.completion_flushes.add(1)
    METRICS.completion_flush_batch_size.record(rows)
    METRICS.completion_flush_duration.record(seconds)


def stale_ignored(items: "list[Finished]") -> None:
    for queue, n in Counter(f.ctx.job.queue for f in items).items():
        METRICS.completion_stale_ignored.add(n, queue_attributes(queue))


def stale_heartbeats(queue: str, n: int) -> None:
    METRICS.completion_stale_ignored.add(n, queue_attributes(queue))


def heartbeat_batch() -> None:
    METRICS.heartbeat_batches.add(1)
