"""Recording: every function that turns an event into instrument updates, in one place.

The catalogue (names, labels, help, buckets) is ``awa.metrics``; the pre-aggregated
instruments are ``awa.instruments.METRICS``; this module maps the events of the runtime's
loops, maintenance, the enqueue paths, external callbacks and operator actions onto them.
Instruments are keyed by the attribute-value tuple in catalogue order (``(kind, queue)``,
``(queue,)``): a recording is a dict update, no attribute dict and no OTel call per job.

Recording rule (issue 8): a counter is incremented exactly when its transition is applied
-- after the guarded write returned its rows -- and per batch (``inc(key, n)``) on the hot
path.  A claimed batch is recorded once per kind in it (counts and waits together);
``awa.job.in_flight`` is not recorded at all but counted from the runtime's running
handlers at collection.

Sections: the runtime (dispatch, execution, completion, heartbeats, descriptors),
maintenance (the leader's branches), enqueue (``awa.job.inserted`` and the producer's
histograms; ``awa.producer``, ``awa.bridge`` and ``awa.cron`` record here), callbacks and
operator actions (``awa.admin``).
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from awa import metrics
from awa.instruments import METRICS, PreGauge, job_attributes, queue_attributes, recording_live
from awa.job import job_datetime
from awa.outcome import Outcome
from awa.storage.engine import PRUNE_BLOCKER_LOCK, KindQueueCount

if TYPE_CHECKING:  # pragma: no cover
    from awa.job import Job
    from awa.storage.engine import PruneReport, QueueCount


class _Attempt(Protocol):
    @property
    def job(self) -> Job[Any]: ...


class EndedAttempt(Protocol):
    """What recording reads of an attempt the completion batcher wrote (the runtime's
    ``Finished``), named structurally: recording sits below the runtime that calls it."""

    @property
    def ctx(self) -> _Attempt: ...
    @property
    def error(self) -> dict[str, Any] | None: ...
    @property
    def reason(self) -> str | None: ...


# --- the runtime: dispatch, execution, completion, heartbeats ----------------
_NOTIFY = metrics.DISPATCH_REASON_NOTIFY
# Bound once: the per-batch and per-job calls skip two attribute lookups each.
_claim_duration = METRICS.dispatch_claim_duration.observe
_empty_claims = METRICS.dispatch_empty_claims.inc
_claim_batches = METRICS.dispatch_claim_batches.inc
_claim_batch_size = METRICS.dispatch_claim_batch_size.observe
_claimed = METRICS.job_claimed.inc
_wait_many = METRICS.job_wait_duration.observe_many
_duration = METRICS.job_duration.observe


def seed_zeros(queues: Sequence[str], kinds: Sequence[str]) -> None:
    """A runtime starts serving ``queues`` with handlers for ``kinds``: its 0 series
    (``AwaMetrics.seed_zeros``)."""
    METRICS.seed_zeros(queues, kinds)


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


def outcomes(outcome: Outcome, applied: Sequence[EndedAttempt]) -> None:
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


def stale_ignored(items: Sequence[EndedAttempt]) -> None:
    for queue, n in Counter(f.ctx.job.queue for f in items).items():
        METRICS.completion_stale_ignored.inc((queue,), n)


def stale_heartbeats(queue: str, n: int) -> None:
    METRICS.completion_stale_ignored.inc((queue,), n)


def heartbeat_batch() -> None:
    METRICS.heartbeat_batches.inc(())


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


def _replace_info(gauge: PreGauge, wanted: set[tuple[str | None, ...]]) -> None:
    """Drop the series of these names that are not wanted any more, then set the wanted ones."""
    names = {key[0] for key in wanted}
    gauge.forget(lambda key: key[0] in names and key not in wanted)
    for key in wanted:
        gauge.put(key, 1)


# --- maintenance (the leader's branches) -------------------------------------
def record_rescues(rescue_kind: str, applied: Iterable[dict[str, Any]]) -> None:
    """Rows returned by a rescue statement: ``action`` retry/fail/dlq, or a duplicate."""
    by_queue: Counter[str] = Counter()
    transitions: Counter[tuple[str, str, str, str | None]] = Counter()
    for row in applied:
        by_queue[row["queue"]] += 1
        transitions[(row.get("action", "cancel"), row["kind"], row["queue"],
                     row.get("dlq_reason"))] += 1
    for queue, n in by_queue.items():
        METRICS.maintenance_rescues.inc((queue, rescue_kind), n)
    for (action, kind, queue, reason), n in transitions.items():
        if action == "retry":
            METRICS.job_retried.inc((kind, queue), n)
            METRICS.job_failed.inc((kind, queue, False), n)
        elif action == "fail":
            METRICS.job_failed.inc((kind, queue, True), n)
        elif action == "dlq":
            METRICS.job_failed.inc((kind, queue, True), n)
            METRICS.job_dlq_moved.inc((kind, queue, reason), n)
        else:
            METRICS.job_cancelled.inc((kind, queue), n)


def record_promotion(promoted_by_queue: Counter[str], seconds: float) -> None:
    """One promotion statement moved jobs (called only when it moved at least one)."""
    METRICS.maintenance_promote_batches.inc(())
    METRICS.maintenance_promote_duration.observe((), seconds)
    METRICS.maintenance_promote_batch_size.observe((), sum(promoted_by_queue.values()))
    for queue, n in promoted_by_queue.items():
        METRICS.maintenance_promoted.inc((queue,), n)


def record_cancelled_duplicates(rows: Iterable[dict[str, Any]]) -> None:
    for key, n in Counter((r["kind"], r["queue"]) for r in rows).items():
        METRICS.job_cancelled.inc(key, n)


def record_branch(branch: str, seconds: float, interval_s: float) -> None:
    METRICS.maintenance_branch_duration.observe((branch,), seconds)
    if seconds > interval_s:
        METRICS.maintenance_branch_overrun.inc((branch,))


def record_leadership(active: bool, *, elected: bool = False) -> None:
    if elected:
        METRICS.leader_elected.inc(())
    METRICS.leader_active.put((), 1 if active else 0)


def record_cron_fired(name: str, kind: str, queue: str, n: int) -> None:
    """A schedule enqueued ``n`` jobs: fired, and inserted (cron is an enqueue path)."""
    METRICS.cron_fired.inc((name, queue), n)
    record_inserted_count(kind, queue, n)


def record_storage_engine(name: str) -> None:
    """This runtime serves a database laid out for the ``name`` engine (awa.storage.info)."""
    METRICS.storage_info.put((name,), 1)


def record_ring_tick(report: PruneReport, blocked_age: Mapping[tuple[str, str], float],
                     vanished: Iterable[tuple[str, str]]) -> None:
    """One rotate-and-prune tick of the leader (queue storage; canonical reports no rings).

    ``blocked_age``: per (ring, blocker), how long its longest-blocked sealed slot has been
    blocked; ``vanished``: (ring, blocker) pairs published before and not blocked any more
    (set to 0 so dashboards do not freeze on the last value).
    """
    if not report.rings:
        return
    blocked: Counter[tuple[str, str]] = Counter(
        (ring, blocker) for (ring, _), blocker in report.blockers.items())
    for ring, n in Counter(ring for ring, _ in report.attempted).items():
        METRICS.maintenance_prune_attempts.inc((ring,), n)
    for pair, n in blocked.items():
        METRICS.maintenance_prune_skipped.inc(pair, n)
    for ring, n in Counter(ring for ring, _ in report.truncated).items():
        METRICS.maintenance_prune_truncated.inc((ring,), n)
    if report.carried_failed:
        METRICS.maintenance_prune_carried_failed.inc((), report.carried_failed)
    for p in report.rings:
        key = (p.ring,)
        METRICS.maintenance_prune_duration.observe(key, p.prune_s)
        if p.due:
            # a rotation that is not due yet is neither an attempt nor a skip
            METRICS.maintenance_rotate_attempts.inc(key)
            METRICS.maintenance_rotate_duration.observe(key, p.rotate_s)
        if p.due and not p.rotated:
            # the next slot held rows; prune just looked at it and named what held them
            nxt = (p.current_slot + 1) % p.slot_count
            METRICS.maintenance_rotate_skipped.inc(
                (p.ring, report.blockers.get((p.ring, nxt), PRUNE_BLOCKER_LOCK)))
        METRICS.ring_current_slot.put(key, p.current_slot)
        METRICS.ring_generation.put(key, p.generation)
        METRICS.ring_slot_count.put(key, p.slot_count)
        METRICS.ring_occupied_slots.put(key, len(p.occupied))
    clear_blocked_slots(vanished)
    for pair, n in blocked.items():
        METRICS.storage_blocked_slots.put(pair, n)
    for pair, seconds in blocked_age.items():
        METRICS.storage_prune_blocked_age.put(pair, seconds)


def clear_blocked_slots(keys: Iterable[tuple[str, str]]) -> None:
    """(ring, blocker) pairs that hold no slot any more: their gauges read 0."""
    for key in keys:
        METRICS.storage_blocked_slots.put(key, 0)
        METRICS.storage_prune_blocked_age.put(key, 0.0)


def record_dlq_purged(queue_counts: Counter[str]) -> None:
    for queue, n in queue_counts.items():
        METRICS.job_dlq_purged.inc((queue,), n)


def publish_queue_health(depth: dict[tuple[str, str], int], lag: dict[str, float],
                         dlq_depth: dict[str, int]) -> None:
    for key, n in depth.items():
        METRICS.queue_depth.put(key, n)
    for queue, seconds in lag.items():
        METRICS.queue_lag.put((queue,), seconds)
    for queue, n in dlq_depth.items():
        METRICS.job_dlq_depth.put((queue,), n)


# --- enqueue (awa.job.inserted, awa.enqueue.*) --------------------------------
def record_inserted(batch: Any, outcome: Any) -> None:
    """An enqueue statement wrote ``outcome.inserted`` rows of ``batch``.

    Duck-typed (``batch.kind`` / ``batch.queue`` lists, ``outcome.jobs`` /
    ``outcome.inserted``).  Jobs that came back name the rows written exactly; a
    count-only write that skipped some takes them from the batch's largest
    (kind, queue) group.
    """
    if not recording_live():
        return
    kinds, queues = batch.kind, batch.queue
    inserted = outcome.inserted
    if inserted == len(kinds):
        pairs = Counter(zip(kinds, queues))
    elif outcome.jobs:
        pairs = Counter((job.kind, job.queue) for job in outcome.jobs)
    else:
        pairs = Counter(zip(kinds, queues))
        skipped = len(kinds) - inserted
        for key, n in pairs.most_common():
            taken = min(n, skipped)
            pairs[key] -= taken
            skipped -= taken
            if not skipped:
                break
    counter = METRICS.job_inserted
    for key, n in pairs.items():
        if n > 0:
            counter.inc(key, n)


def record_inserted_count(kind: str, queue: str, n: int) -> None:
    """``n`` jobs of one (kind, queue) written by an enqueue path (a cron fire)."""
    if n > 0:
        METRICS.job_inserted.inc((kind, queue), n)


def record_inserted_jobs(jobs: Iterable[Any]) -> None:
    """Jobs (``awa.Job``) an enqueue path wrote, counted by (kind, queue)."""
    counter = METRICS.job_inserted
    for key, n in Counter((j.kind, j.queue) for j in jobs).items():
        counter.inc(key, n)


# Jobs inserted inside a client transaction count when it commits.
_pending_inserts: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


def record_inserted_pending(transaction: Any, jobs: Iterable[Any]) -> None:
    """Jobs a ``Transaction`` inserted; counted by ``record_transaction_end`` on commit."""
    _pending_inserts.setdefault(transaction, []).extend(jobs)


def record_transaction_end(transaction: Any, committed: bool) -> None:
    jobs = _pending_inserts.pop(transaction, None)
    if jobs and committed:
        record_inserted_jobs(jobs)


def record_enqueue(batch_size: int, started: float) -> None:
    """Producer histograms (awa.enqueue.batch_size / awa.enqueue.duration)."""
    METRICS.enqueue_batch_size.record(batch_size)
    METRICS.enqueue_duration.record(time.perf_counter() - started)


# --- external callbacks (awa.callbacks) ---------------------------------------
def record_callback_resolved(job: Job[Any], outcome: str) -> None:
    """A callback resolution was applied to ``job`` (``outcome``: complete, fail, retry,
    resume)."""
    METRICS.callback_resolved.add(1, {metrics.ATTR_QUEUE: job.queue,
                                      metrics.ATTR_CALLBACK_OUTCOME: outcome})
    # A callback that ends the job is that job's completion or failure too.
    if outcome == "complete":
        METRICS.job_completed.add(1, job_attributes(job.kind, job.queue))
    elif outcome == "fail":
        METRICS.job_failed.add(1, {**job_attributes(job.kind, job.queue),
                                   metrics.ATTR_TERMINAL: True})


# --- operator actions (awa.admin) ---------------------------------------------
def _record_jobs(instrument: Any, counts: Iterable[KindQueueCount],
                 extra: dict[str, str] | None = None) -> None:
    """Count committed operator transitions per (kind, queue) -- after the write, never before."""
    for c in counts:
        if c.count:
            attrs = job_attributes(c.kind, c.queue)
            instrument.add(c.count, {**attrs, **extra} if extra else attrs)


def _record_job(instrument: Any, job: Job[Any], extra: dict[str, str] | None = None) -> None:
    _record_jobs(instrument, [KindQueueCount(job.kind, job.queue, 1)], extra)


def _record_queues(instrument: Any, counts: Iterable[QueueCount]) -> None:
    for c in counts:
        if c.count:
            instrument.add(c.count, queue_attributes(c.queue))


def record_job_cancelled(job: Job[Any]) -> None:
    """An operator cancelled ``job``."""
    _record_job(METRICS.job_cancelled, job)


def record_jobs_cancelled(counts: Iterable[KindQueueCount]) -> None:
    """An operator's drain cancelled these jobs."""
    _record_jobs(METRICS.job_cancelled, counts)


def record_dlq_retried(counts: Iterable[QueueCount]) -> None:
    """An operator moved DLQ entries back to available."""
    _record_queues(METRICS.job_dlq_retried, counts)


def record_dlq_entries_purged(counts: Iterable[QueueCount]) -> None:
    """An operator deleted DLQ entries (retention's purge is ``record_dlq_purged``)."""
    _record_queues(METRICS.job_dlq_purged, counts)


def record_job_dlq_moved(job: Job[Any], reason: str) -> None:
    """An operator moved the failed ``job`` into the DLQ."""
    _record_job(METRICS.job_dlq_moved, job, {metrics.ATTR_DLQ_REASON: reason})


def record_jobs_dlq_moved(counts: Iterable[KindQueueCount], reason: str) -> None:
    """An operator moved failed jobs into the DLQ."""
    _record_jobs(METRICS.job_dlq_moved, counts, {metrics.ATTR_DLQ_REASON: reason})
