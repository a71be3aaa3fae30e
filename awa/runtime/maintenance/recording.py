"""Where maintenance records its metrics, each right after a transition applied.

Instruments and attribute keys come from the catalogue in ``awa.metrics``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from awa import metrics
from awa.metrics import METRICS


def record_rescues(rescue_kind: str, applied: Iterable[dict[str, Any]]) -> None:
    """Rows returned by a rescue statement: ``action`` retry/fail/dlq, or a duplicate."""
    by_queue: Counter[str] = Counter()
    transitions: Counter[tuple[str, str, str, str | None]] = Counter()
    for row in applied:
        by_queue[row["queue"]] += 1
        transitions[(row.get("action", "cancel"), row["kind"], row["queue"],
                     row.get("dlq_reason"))] += 1
    for queue, n in by_queue.items():
        METRICS.maintenance_rescues.add(n, {metrics.ATTR_QUEUE: queue,
                                            metrics.ATTR_RESCUE_KIND: rescue_kind})
    for (action, kind, queue, reason), n in transitions.items():
        attrs = metrics.job_attributes(kind, queue)
        if action == "retry":
            METRICS.job_retried.add(n, attrs)
            METRICS.job_failed.add(n, {**attrs, metrics.ATTR_TERMINAL: False})
        elif action == "fail":
            METRICS.job_failed.add(n, {**attrs, metrics.ATTR_TERMINAL: True})
        elif action == "dlq":
            METRICS.job_failed.add(n, {**attrs, metrics.ATTR_TERMINAL: True})
            METRICS.job_dlq_moved.add(n, {**attrs, metrics.ATTR_DLQ_REASON: reason})
        else:
            METRICS.job_cancelled.add(n, attrs)


def record_promotion(promoted_by_queue: Counter[str], seconds: float) -> None:
    METRICS.maintenance_promote_batches.add(1)
    METRICS.maintenance_promote_duration.record(seconds)
    for queue, n in promoted_by_queue.items():
        METRICS.maintenance_promoted.add(n, metrics.queue_attributes(queue))


def record_cancelled_duplicates(rows: Iterable[dict[str, Any]]) -> None:
    for (kind, queue), n in Counter((r["kind"], r["queue"]) for r in rows).items():
        METRICS.job_cancelled.add(n, metrics.job_attributes(kind, queue))


def record_branch(branch: str, seconds: float, interval_s: float) -> None:
    attrs = {metrics.ATTR_BRANCH: branch}
    METRICS.maintenance_branch_duration.record(seconds, attrs)
    if seconds > interval_s:
        METRICS.maintenance_branch_overrun.add(1, attrs)


def record_leadership(active: bool, *, elected: bool = False) -> None:
    if elected:
        METRICS.leader_elected.add(1)
    METRICS.leader_active.set(1 if active else 0)


def record_cron_fired(name: str, queue: str, n: int) -> None:
    METRICS.cron_fired.add(n, {metrics.ATTR_CRON_NAME: name, metrics.ATTR_QUEUE: queue})


def record_dlq_purged(queue_counts: Counter[str]) -> None:
    for queue, n in queue_counts.items():
        METRICS.job_dlq_purged.add(n, metrics.queue_attributes(queue))


def publish_queue_health(depth: dict[tuple[str, str], int], lag: dict[str, float],
                         dlq_depth: dict[str, int]) -> None:
    for (queue, state), n in depth.items():
        METRICS.queue_depth.set(n, {metrics.ATTR_QUEUE: queue, metrics.ATTR_STATE: state})
    for queue, seconds in lag.items():
        METRICS.queue_lag.set(seconds, metrics.queue_attributes(queue))
    for queue, n in dlq_depth.items():
        METRICS.job_dlq_depth.set(n, metrics.queue_attributes(queue))
