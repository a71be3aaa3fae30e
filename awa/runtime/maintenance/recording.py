"""Where maintenance records its metrics, each right after a transition applied.

Instruments and attribute keys come from the catalogue in ``awa.metrics``; keys
are attribute-value tuples in catalogue order (see ``awa.runtime.recording``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from awa.metrics import METRICS, record_inserted_count
from awa.storage.engine import PRUNE_BLOCKER_LOCK, PruneReport


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


def record_descriptors(queues: Iterable[dict[str, Any]], kinds: Iterable[dict[str, Any]]) -> None:
    """The runtime stored its descriptors (awa.queue.info / awa.job_kind.info)."""
    from awa.runtime import recording

    recording.descriptors_synced(queues, kinds)
