"""Where the runtime records its metrics: one function per recording point.

Instruments and attribute keys come from the catalogue in ``awa.metrics``;
this module only maps runtime events onto them, right after the guarded write
returned its rows.  The instruments are pre-aggregated in the process
(``awa.metrics.PreCounter`` ...), keyed by the attribute-value tuple the
runtime already has (``(kind, queue)``, ``(queue,)``): a recording is a dict
update, no attribute dict and no OTel call per job.  A claimed batch is recorded
once per kind in it (counts and waits together); ``awa.job.in_flight`` is not
recorded at all but counted from the runtime's running handlers at collection.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from awa import metrics
from awa.job import job_datetime
from awa.metrics import METRICS
from awa.runtime.outcome import Outcome

if TYPE_CHECKING:  # pragma: no cover
    from awa.job import Job
    from awa.runtime.outcome import Finished

_NOTIFY = metrics.DISPATCH_REASON_NOTIFY
# Bound once: the per-batch and per-job calls skip two attribute lookups each.
_claim_duration = METRICS.dispatch_claim_duration.observe
_empty_claims = METRICS.dispatch_empty_claims.inc
_claim_batches = METRICS.dispatch_claim_batches.inc
_claim_batch_size = METRICS.dispatch_claim_batch_size.observe
_claimed = METRICS.job_claimed.inc
_wait_many = METRICS.job_wait_duration.observe_many
_duration = METRICS.job_duration.observe


def runtime_started(version: str, instance_id: str, hostname: str, layout: str) -> None:
    METRICS.runtime_info.put((version, instance_id, hostname, layout), 1)


def wakeup(queue: str, reason: str) -> None:
    METRICS.dispatch_wakeups.inc((queue, reason))


def rate_limited(queue: str) -> None:
    METRICS.dispatch_rate_limited.inc((queue,))


def claimed(queue: str, jobs: list[Job[Any]], seconds: float) -> None:
    """One claim statement returned ``jobs`` after ``seconds``.

    Per batch, not per job: the jobs are grouped by kind (a batch is usually
    one kind) and each group is one counter update and one histogram update.
    """
    key = (queue,)
    _claim_duration(key, seconds)
    if not jobs:
        _empty_claims(key)
        return
    _claim_batches(key)
    _claim_batch_size(key, len(jobs))
    counts: dict[str, int] = {}
    waits: dict[str, list[float]] = {}
    for job in jobs:
        kind = job.kind
        counts[kind] = counts.get(kind, 0) + 1
        # The plain datetimes: reading job.attempted_at would build a Timestamp string.
        attempted, run_at, created = (job_datetime(job, "attempted_at"),
                                      job_datetime(job, "run_at"), job_datetime(job, "created_at"))
        runnable = run_at if run_at and (created is None or run_at > created) else created
        if attempted is not None and runnable is not None:
            waited = (attempted - runnable).total_seconds()
            bucket = waits.get(kind)
            if bucket is None:
                bucket = waits[kind] = []
            bucket.append(waited if waited > 0.0 else 0.0)
    for kind, n in counts.items():
        _claimed((kind, queue), n)
    for kind, values in waits.items():
        _wait_many((kind, queue), values)


def handler_finished(kind: str, queue: str, seconds: float) -> None:
    _duration((kind, queue), seconds)


def track_in_flight(running: Mapping[Any, Any]) -> Callable[[], dict[tuple[str], int]]:
    """``awa.job.in_flight`` of a runtime: its running handlers (``runtime.in_flight``, job
    contexts by attempt), counted per queue at collection, so nothing is recorded per job.
    Returns the source to pass to ``untrack_in_flight`` at shutdown."""
    def source() -> dict[tuple[str], int]:
        counts: dict[tuple[str], int] = {}
        for ctx in list(running.values()):  # one C-level copy: safe from another thread
            key = (ctx.job.queue,)
            counts[key] = counts.get(key, 0) + 1
        return counts

    METRICS.job_in_flight.add_source(source)
    return source


def untrack_in_flight(source: Callable[[], dict[tuple[str], int]]) -> None:
    METRICS.job_in_flight.remove_source(source)


def track_open_attempts(count: Callable[[], int]) -> Callable[[], dict[tuple[()], int]]:
    """``awa.job.open_attempts`` of a runtime, read from ``count`` at collection.
    Returns the source to pass to ``untrack_open_attempts`` at shutdown."""
    def source() -> dict[tuple[()], int]:
        return {(): count()}

    METRICS.job_open_attempts.add_source(source)
    return source


def untrack_open_attempts(source: Callable[[], dict[tuple[()], int]]) -> None:
    METRICS.job_open_attempts.remove_source(source)


def capacity(queue: str, permits: Any) -> None:
    """The dispatcher is about to ask ``permits`` (a QueuePermits) for slots: how many are free."""
    free = permits.capacity - permits.in_use
    METRICS.dispatch_capacity_available.put((queue,), free if free > 0 else 0)


def unused_permits(queue: str, granted: int, claimed_rows: int) -> None:
    """A claim returned fewer rows than the permits it was granted."""
    if claimed_rows < granted:
        METRICS.dispatch_unused_permits.inc((queue,), granted - claimed_rows)


def woken_at(previous: float | None) -> float:
    """When the dispatcher was first woken since its last claim (keeps the earliest)."""
    return previous if previous is not None else time.perf_counter()


def wake_to_claim(queue: str, woken: float | None) -> float | None:
    """The claim after a wake-up returned: wake-to-claim latency (None: not woken).

    Returns None, the dispatcher's new ``woken_at``, so the call site is one line.
    """
    if woken is not None:
        METRICS.dispatch_wake_to_claim_duration.observe((queue,), time.perf_counter() - woken)
    return None


def outcomes(outcome: Outcome, applied: list[Finished]) -> None:
    """Transitions the completion batcher just committed (one outcome kind)."""

    by_key = Counter((f.ctx.job.kind, f.ctx.job.queue) for f in applied)
    if outcome is Outcome.COMPLETED:
        counter = METRICS.job_completed
    elif outcome is Outcome.SNOOZE:
        counter = METRICS.job_snoozed
    elif outcome is Outcome.WAIT:
        counter = METRICS.job_waiting_external
    elif outcome is Outcome.CANCEL:
        counter = METRICS.job_cancelled
    elif outcome is Outcome.RETRY:
        counter = METRICS.job_retried
        errors = Counter((f.ctx.job.kind, f.ctx.job.queue) for f in applied
                         if f.error is not None)
        for (kind, queue), n in errors.items():
            METRICS.job_failed.inc((kind, queue, False), n)
    else:  # FAIL, DLQ: the job ended
        for (kind, queue), n in by_key.items():
            METRICS.job_failed.inc((kind, queue, True), n)
        if outcome is Outcome.DLQ:
            reasons = Counter((f.ctx.job.kind, f.ctx.job.queue, f.reason) for f in applied)
            for reason_key, n in reasons.items():
                METRICS.job_dlq_moved.inc(reason_key, n)
        return
    for key, n in by_key.items():
        counter.inc(key, n)


def flushed(rows: int, seconds: float) -> None:
    METRICS.completion_flushes.inc(())
    METRICS.completion_flush_batch_size.observe((), rows)
    METRICS.completion_flush_duration.observe((), seconds)


def stale_ignored(items: list[Finished]) -> None:
    for queue, n in Counter(f.ctx.job.queue for f in items).items():
        METRICS.completion_stale_ignored.inc((queue,), n)


def stale_heartbeats(queue: str, n: int) -> None:
    METRICS.completion_stale_ignored.inc((queue,), n)


def heartbeat_batch() -> None:
    METRICS.heartbeat_batches.inc(())


# The producer side (awa.job.inserted) records through awa.metrics.record_inserted*:
# awa.producer and awa.bridge must not import the runtime.


# --- descriptors (awa.queue.info / awa.job_kind.info) ------------------------
def _tags(descriptor: dict[str, Any]) -> str | None:
    return ",".join(descriptor.get("tags") or ()) or None


def _descriptor_key(name: str, d: dict[str, Any]) -> tuple[str | None, ...]:
    """The info series' label values; a field the descriptor leaves unset is None, exported
    as ``metrics.UNSET_LABEL_VALUE`` (never an empty label value)."""
    return (name, d.get("display_name") or None, d.get("owner") or None,
            d.get("docs_url") or None, _tags(d), d.get("descriptor_hash") or None)


def descriptors_synced(queues: Iterable[dict[str, Any]], kinds: Iterable[dict[str, Any]]) -> None:
    """The runtime stored its descriptors: one info series (value 1) per descriptor.

    A descriptor that changed replaces its previous series, so one runtime
    reports one hash per queue/kind; different hashes across runtimes are drift.
    """
    for gauge, descriptors in ((METRICS.queue_info, queues), (METRICS.job_kind_info, kinds)):
        _replace_info(gauge, {_descriptor_key(d["name"], d) for d in descriptors})


def _replace_info(gauge: metrics.PreGauge, wanted: set[tuple[str | None, ...]]) -> None:
    """Drop the series of these names that are not wanted any more, then set the wanted ones."""
    names = {key[0] for key in wanted}
    gauge.forget(lambda key: key[0] in names and key not in wanted)
    for key in wanted:
        gauge.put(key, 1)
