"""Where maintenance records its metrics, each right after a transition applied.

Instruments and attribute keys come from the catalogue in ``awa.metrics``; keys
are attribute-value tuples in catalogue order (see ``awa.runtime.recording``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from awa.metrics import METRICS, record_inserted_count


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
