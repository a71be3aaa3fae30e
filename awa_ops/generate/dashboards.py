"""The four Grafana dashboards, built with grafana-foundation-sdk from the metric catalogue.

Panels are declared as small ``PanelSpec`` values (title, description, unit,
queries, thresholds, runbooks); ``build_dashboards`` turns them into SDK
builders. Every metric and label comes from ``awa.metrics``; thresholds come
from the same ``Thresholds`` the alert rules use, so a panel turns red where
its alert starts to count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

from awa import metrics
from awa_ops import findings
from awa_ops.diagnose import CHECKS
from awa_ops.generate import alerts
from awa_ops.generate.alerts import (
    BLOCKER,
    BRANCH,
    DESCRIPTOR_HASH,
    DLQ_REASON,
    KIND,
    OWNER,
    RESCUE_KIND,
    RING,
    STATE,
    TABLE,
    TXN_STATE,
    XMIN_SOURCE,
    Q,
    Thresholds,
    runbook_url,
)
from awa_ops.generate.promql import ALERTS_SERIES, DATASOURCE_VAR, QUEUE_VAR, selector

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}")
RATE = "$__rate_interval"
TAG = "awa"
DISPATCH_REASON = metrics.prometheus_label(metrics.ATTR_DISPATCH_REASON)
CRON_NAME = metrics.prometheus_label(metrics.ATTR_CRON_NAME)
SLOT = metrics.prometheus_label(metrics.ATTR_DB_SLOT)
SLOT_ACTIVE = metrics.prometheus_label(metrics.ATTR_DB_SLOT_ACTIVE)
CALLBACK_OUTCOME = metrics.prometheus_label(metrics.ATTR_CALLBACK_OUTCOME)
RUNTIME_VERSION = metrics.prometheus_label(metrics.ATTR_RUNTIME_VERSION)
STORAGE_ENGINE = metrics.prometheus_label(metrics.ATTR_STORAGE_ENGINE)
QUEUE_MATCH = {Q: f"=~${QUEUE_VAR}"}
# Prometheus' own series of the generated rules: firing awa alerts mark every time series panel.
FIRING_ALERTS = selector(ALERTS_SERIES, alertname="=~Awa.*", alertstate="=firing")


def m(otel_name: str) -> str:
    return metrics.by_name(otel_name).prometheus


def q(otel_name: str, suffix: str = "", **matchers: str) -> str:
    """A selector of a catalogue metric, filtered by the queue variable when it has that label."""
    entry = metrics.by_name(otel_name)
    if metrics.ATTR_QUEUE in entry.attributes:
        matchers = {**QUEUE_MATCH, **matchers}
    return selector(entry.prometheus + suffix, **matchers)


def rate(otel_name: str, **matchers: str) -> str:
    return f"rate({q(otel_name, **matchers)}[{RATE}])"


def increase(otel_name: str, **matchers: str) -> str:
    return f"increase({q(otel_name, **matchers)}[{RATE}])"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat | bargauge
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),)
    runbooks: tuple[str, ...] = ()  # repository paths, e.g. runbooks/mvcc-horizon.md
    stacked: bool = False
    width: int = 8
    height: int = 8
    min: float | None = 0


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    file: str
    title: str
    description: str
    rows: tuple[tuple[str, tuple[PanelSpec, ...]], ...]
    queue_source: str  # the catalogue metric whose awa_job_queue values fill the queue variable


def owner_info() -> str:
    """One ``awa_queue_info`` series per queue carrying its owner label (one pick under drift)."""
    return f"topk by ({Q}) (1, max by ({Q}, {OWNER}) ({q('awa.queue.info')}))"


def with_owner(expr: str) -> str:
    """``expr`` (one series per queue) with the queue descriptor's owner joined on.

    Queues without a descriptor keep their series, without an owner label.
    """
    return f"({expr}) * on ({Q}) group_left ({OWNER}) {owner_info()}\nor on ({Q}) ({expr})"


QUEUE_OWNER_LEGEND = "{{awa_job_queue}} {{awa_descriptor_owner}}"


def quantiles(otel_name: str, by: tuple[str, ...] = ()) -> tuple[Target, ...]:
    """p50/p95/p99 of a histogram, optionally per label."""
    entry = metrics.by_name(otel_name)
    group = ", ".join(("le",) + by)
    suffix = "".join(f" {{{{{label}}}}}" for label in by)
    return tuple(
        Target(f"histogram_quantile({quantile}, sum by ({group}) "
               f"(rate({q(otel_name, '_bucket')}[{RATE}])))", f"p{int(quantile * 100)}{suffix}")
        for quantile in (0.5, 0.95, 0.99)
        if entry.kind == "histogram"
    )


def average(otel_name: str) -> Target:
    return Target(f"sum(rate({q(otel_name, '_sum')}[{RATE}])) / "
                  f"sum(rate({q(otel_name, '_count')}[{RATE}]))", "average")


def warn_at(value: float, color: str = "red") -> tuple[tuple[float | None, str], ...]:
    return ((None, "green"), (value, color))


def diagnostic(check: str) -> str:
    """The runbook of an ``awa-ops diagnose`` check (the same path its findings print)."""
    if check not in CHECKS:
        raise KeyError(f"no diagnostic check {check!r}")
    return findings.runbook(check)


def alert_runbook(name: str) -> str:
    return f"{alerts.ALERT_RUNBOOK_DIR}/{name}.md"


def error_ratio(by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    failed = f"sum{grouping} (rate({q('awa.job.failed')}[{RATE}]))"
    completed = f"sum{grouping} (rate({q('awa.job.completed')}[{RATE}]))"
    return f"{failed} / ({failed} + ({completed} or 0 * {failed}))"


def overview(t: Thresholds) -> DashboardSpec:
    glance = (
        PanelSpec("Throughput", "Jobs completed per second across the selected queues.",
                  (Target(f"sum({rate('awa.job.completed')})"),), unit="ops", kind="stat",
                  width=4, height=4, runbooks=(alert_runbook("AwaThroughputCollapsed"),)),
        PanelSpec("Error rate", "Share of finished attempts that failed (retryable or terminal) "
                  "over the rate window.", (Target(error_ratio()),), unit="percentunit",
                  kind="stat", thresholds=((None, "green"), (t.error_ratio / 2, "orange"),
                                           (t.error_ratio, "red")),
                  width=4, height=4, runbooks=(alert_runbook("AwaErrorRateHigh"),)),
        PanelSpec("In flight", "Handlers running right now in every scraped runtime.",
                  (Target(f"sum({q('awa.job.in_flight')})"),), kind="stat", width=4, height=4),
        PanelSpec("Live runtimes", "Runtime instances the database sees alive (awa-ops "
                  "exporter); zero means nothing claims jobs.",
                  (Target(f"max({m('awa.db.runtimes.live')})"),), kind="stat",
                  thresholds=((None, "red"), (1, "green")), width=4, height=4,
                  runbooks=(alert_runbook("AwaNoActiveRuntime"), diagnostic("runtime"))),
        PanelSpec("Leader present", "1 when a live runtime holds the maintenance leadership; 0 "
                  "means no rescue, promotion or cron.",
                  (Target(f"max({m('awa.db.leader.present')})"),), kind="stat",
                  thresholds=((None, "red"), (1, "green")), width=4, height=4,
                  runbooks=(alert_runbook("AwaNoLeader"), diagnostic("runtime"))),
        PanelSpec("DLQ depth", "Dead-letter entries in the selected queues (database count).",
                  (Target(f"sum({q('awa.db.dlq.depth')})"),), kind="stat",
                  thresholds=((None, "green"), (1, "orange")), width=4, height=4,
                  runbooks=(alert_runbook("AwaDLQGrowing"), diagnostic("dlq"))),
    )
    throughput = (
        PanelSpec("Job outcomes", "Transitions applied per second, by outcome: claims, "
                  "completions, failures that will retry and that ended the job, retries, "
                  "cancellations, snoozes and callback waits.",
                  (Target(f"sum({rate('awa.job.claimed')})", "claimed"),
                   Target(f"sum({rate('awa.job.completed')})", "completed"),
                   Target(f"sum by ({metrics.prometheus_label(metrics.ATTR_TERMINAL)}) "
                          f"({rate('awa.job.failed')})", "failed terminal={{awa_job_terminal}}"),
                   Target(f"sum({rate('awa.job.retried')})", "retried"),
                   Target(f"sum({rate('awa.job.cancelled')})", "cancelled"),
                   Target(f"sum({rate('awa.job.snoozed')})", "snoozed"),
                   Target(f"sum({rate('awa.job.waiting_external')})", "waiting external")),
                  unit="ops", width=12),
        PanelSpec("Throughput by queue", "Jobs completed per second, per queue.",
                  (Target(with_owner(f"sum by ({Q}) ({rate('awa.job.completed')})"),
                          QUEUE_OWNER_LEGEND),),
                  unit="ops", width=12, runbooks=(alert_runbook("AwaThroughputCollapsed"),)),
        PanelSpec("Inserted vs completed by queue", "Jobs enqueued per second (every producer "
                  "path) against jobs completed per second, per queue: inserted steadily above "
                  "completed means the backlog grows.",
                  (Target(with_owner(f"sum by ({Q}) ({rate('awa.job.inserted')})"),
                          "inserted " + QUEUE_OWNER_LEGEND),
                   Target(with_owner(f"sum by ({Q}) ({rate('awa.job.completed')})"),
                          "completed " + QUEUE_OWNER_LEGEND)),
                  unit="ops", width=12, runbooks=(diagnostic("enqueue"),)),
        PanelSpec("Error rate by queue", "Failed attempts / finished attempts per queue; the "
                  "AwaErrorRateHigh threshold is drawn in red.",
                  (Target(with_owner(error_ratio(Q)), QUEUE_OWNER_LEGEND),), unit="percentunit",
                  thresholds=warn_at(t.error_ratio), width=12,
                  runbooks=(alert_runbook("AwaErrorRateHigh"), diagnostic("dlq"))),
        PanelSpec("In flight by queue", "Handlers running now, per queue, summed over runtimes.",
                  (Target(with_owner(f"sum by ({Q}) ({q('awa.job.in_flight')})"),
                          QUEUE_OWNER_LEGEND),),
                  width=12, stacked=True, runbooks=(diagnostic("stuck-running"),)),
    )
    queues = (
        PanelSpec("Queue depth by state", "Jobs per state in the selected queues, as published by "
                  "the leader runtime.",
                  (Target(f"sum by ({STATE}) ({q('awa.queue.depth')})", "{{awa_job_state}}"),),
                  stacked=True, runbooks=(diagnostic("stuck-running"),)),
        PanelSpec("Queue lag", "Age of the oldest available job per queue (leader runtime); the "
                  "AwaQueueLagHigh threshold is drawn in red.",
                  (Target(with_owner(f"max by ({Q}) ({q('awa.queue.lag')})"),
                          QUEUE_OWNER_LEGEND),),
                  unit="s", thresholds=warn_at(t.queue_lag_seconds),
                  runbooks=(alert_runbook("AwaQueueLagHigh"),)),
        PanelSpec("Runtimes by version", "Started runtimes per awa version "
                  f"({metrics.by_name('awa.runtime.info').prometheus}); "
                  "two versions at once means a rollout is in progress.",
                  (Target(f"count by ({RUNTIME_VERSION}) ({m('awa.runtime.info')})",
                          "{{awa_runtime_version}}"),), stacked=True,
                  runbooks=(diagnostic("runtime"),)),
        PanelSpec("Wait time", "Time from a job becoming runnable to its claim: p50, p95, p99.",
                  quantiles("awa.job.wait_duration"), unit="s", width=12,
                  runbooks=(alert_runbook("AwaQueueLagHigh"),)),
        PanelSpec("Handler duration", "Handler execution time, claim to outcome: p50, p95, p99.",
                  quantiles("awa.job.duration"), unit="s", width=12,
                  runbooks=(alert_runbook("AwaDeadlinesOverdue"),)),
    )
    recovery = (
        PanelSpec("Rescues by kind", "Attempts moved back by maintenance: heartbeat (worker "
                  "gone), deadline (ran too long), callback (timed out).",
                  (Target(f"sum by ({RESCUE_KIND}) ({rate('awa.maintenance.rescues')})",
                          "{{awa_rescue_kind}}"),), unit="ops",
                  runbooks=(alert_runbook("AwaRescuesSpiking"), diagnostic("stuck-running"))),
        PanelSpec("DLQ moves by reason", "Jobs moved into the dead-letter queue per second, by "
                  "reason, and operator retries and purges.",
                  (Target(f"sum by ({DLQ_REASON}) ({rate('awa.job.dlq_moved')})",
                          "moved {{awa_dlq_reason}}"),
                   Target(f"sum({rate('awa.job.dlq_retried')})", "retried"),
                   Target(f"sum({rate('awa.job.dlq_purged')})", "purged")), unit="ops",
                  runbooks=(alert_runbook("AwaDLQGrowing"), diagnostic("dlq"))),
        PanelSpec("DLQ depth by queue", "Dead-letter entries per queue, as published by the "
                  "leader runtime.",
                  (Target(with_owner(f"sum by ({Q}) ({q('awa.job.dlq_depth')})"),
                          QUEUE_OWNER_LEGEND),),
                  stacked=True, runbooks=(diagnostic("dlq"),)),
        PanelSpec("Leadership", "Runtimes reporting leadership (should be exactly 1) and the "
                  "database's view of it.",
                  (Target(f"sum({m('awa.leader.active')})", "runtimes holding leadership"),
                   Target(f"max({m('awa.db.leader.present')})", "leader present (database)")),
                  thresholds=((None, "red"), (1, "green")),
                  runbooks=(alert_runbook("AwaNoLeader"),)),
        PanelSpec("Top kinds", "The ten job kinds completing the most jobs per second.",
                  (Target(f"topk(10, sum by ({KIND}) ({rate('awa.job.completed')}))",
                          "{{awa_job_kind}}"),), unit="ops", kind="bargauge", width=16),
        PanelSpec("Descriptor drift", "Distinct descriptor hashes the scraped runtimes report "
                  "per queue and per job kind; above 1 means runtimes disagree about a "
                  "descriptor (normal during a rollout, AwaDescriptorDrift past 30 minutes).",
                  (Target(f"count by ({Q}) (count by ({Q}, {DESCRIPTOR_HASH}) "
                          f"({q('awa.queue.info')}))", "queue {{awa_job_queue}}"),
                   Target(f"count by ({KIND}) (count by ({KIND}, {DESCRIPTOR_HASH}) "
                          f"({m('awa.job_kind.info')}))", "kind {{awa_job_kind}}")),
                  thresholds=warn_at(2, "orange"), width=8,
                  runbooks=(alert_runbook("AwaDescriptorDrift"), diagnostic("descriptors"))),
    )
    return DashboardSpec(
        "awa-overview", "awa-overview.json", "Awa overview",
        "Is the queue healthy? Throughput, errors, backlog, latency, runtimes, recovery.",
        (("At a glance", glance), ("Throughput and errors", throughput), ("Queues", queues),
         ("Runtimes and recovery", recovery)),
        queue_source="awa.db.queue.depth")


def workers(t: Thresholds) -> DashboardSpec:
    claims = (
        PanelSpec("Claims", "Claim statements that returned jobs, and jobs claimed, per second.",
                  (Target(f"sum by ({Q}) ({rate('awa.dispatch.claim_batches')})",
                          "batches {{awa_job_queue}}"),
                   Target(f"sum by ({Q}) ({rate('awa.job.claimed')})", "jobs {{awa_job_queue}}")),
                  unit="ops"),
        PanelSpec("Claim latency", "Time of one claim statement: p50, p95, p99. Rising latency "
                  "with a pinned horizon means the claim index is wading through dead tuples.",
                  quantiles("awa.dispatch.claim_duration"), unit="s",
                  runbooks=(diagnostic("dead-tuples"),)),
        PanelSpec("Claim batch size", "Jobs per non-empty claim: small batches under load mean "
                  "workers are the bottleneck, not the database.",
                  quantiles("awa.dispatch.claim_batch_size")[:2]
                  + (average("awa.dispatch.claim_batch_size"),)),
        PanelSpec("Wakeups by reason", "Why dispatchers woke: notify (LISTEN), capacity (a slot "
                  "freed), poll (notifications lost or absent). Mostly poll means LISTEN is "
                  "not working.",
                  (Target(f"sum by ({DISPATCH_REASON}) ({rate('awa.dispatch.wakeups')})",
                          "{{awa_dispatch_reason}}"),), unit="ops", stacked=True,
                  runbooks=(diagnostic("cancel-listener"),)),
        PanelSpec("Empty claims", "Claims that found nothing: wake-ups without work.",
                  (Target(f"sum by ({Q}) ({rate('awa.dispatch.empty_claims')})",
                          "{{awa_job_queue}}"),), unit="ops"),
        PanelSpec("Rate limited", "Claims held back by a queue's token bucket.",
                  (Target(f"sum by ({Q}) ({rate('awa.dispatch.rate_limited')})",
                          "{{awa_job_queue}}"),), unit="ops"),
        PanelSpec("Capacity available", "Free handler slots per queue, summed over runtimes, "
                  "when each dispatcher last asked for permits; 0 with a growing lag means "
                  "workers, not the database, are the bottleneck.",
                  (Target(with_owner(f"sum by ({Q}) ({q('awa.dispatch.capacity_available')})"),
                          QUEUE_OWNER_LEGEND),)),
        PanelSpec("Unused permits", "Permits granted to claims that returned fewer jobs, per "
                  "second: free slots with no work behind them.",
                  (Target(f"sum by ({Q}) ({rate('awa.dispatch.unused_permits')})",
                          "{{awa_job_queue}}"),), unit="ops"),
        PanelSpec("Wake to claim latency", "Time from a NOTIFY waking a dispatcher to its claim "
                  "returning: p50, p95, p99. High while claims are fast means the event loop "
                  "is starved.",
                  quantiles("awa.dispatch.wake_to_claim_duration"), unit="s",
                  runbooks=(diagnostic("cancel-listener"),)),
    )
    completion = (
        PanelSpec("Completion flushes", "Outcome batch writes per second and heartbeat batch "
                  "writes per second.",
                  (Target(f"sum({rate('awa.completion.flushes')})", "completion flushes"),
                   Target(f"sum({rate('awa.heartbeat.batches')})", "heartbeat batches")),
                  unit="ops", runbooks=(diagnostic("heartbeats"),)),
        PanelSpec("Flush batch size", "Outcomes written per completion flush.",
                  quantiles("awa.completion.flush_batch_size")[:2]
                  + (average("awa.completion.flush_batch_size"),)),
        PanelSpec("Flush latency", "Time of one completion flush: p50, p95, p99.",
                  quantiles("awa.completion.flush_duration"), unit="s"),
        PanelSpec("Stale results ignored", "Outcome, heartbeat or progress writes for an attempt "
                  "that was already rescued, cancelled or superseded. Harmless, but a steady "
                  "stream means handlers outlive their leases.",
                  (Target(f"sum by ({Q}) ({rate('awa.completion.stale_ignored')})",
                          "{{awa_job_queue}}"),), unit="ops",
                  runbooks=(diagnostic("stuck-running"),)),
        PanelSpec("In flight per runtime", "Handlers running now in each scraped runtime.",
                  (Target(f"sum by (instance) ({q('awa.job.in_flight')})", "{{instance}}"),),
                  stacked=True),
        PanelSpec("Open attempts per runtime", "Attempts a runtime holds open in the database: "
                  "running handlers plus outcomes waiting for the next completion flush. It "
                  "stays at or below the runtime's slots plus one completion batch; above that, "
                  "claims outrun the flusher.",
                  (Target(f"sum by (instance) ({q('awa.job.open_attempts')})", "{{instance}}"),),
                  runbooks=(diagnostic("stuck-running"),)),
        PanelSpec("Callbacks resolved", "External callbacks applied, by outcome.",
                  (Target(f"sum by ({CALLBACK_OUTCOME}) ({rate('awa.callback.resolved')})",
                          "{{awa_callback_outcome}}"),), unit="ops"),
    )
    producers = (
        PanelSpec("Jobs inserted", "Jobs written per second by every enqueue path, per queue "
                  "and kind (from the processes that enqueue and are scraped).",
                  (Target(f"sum by ({Q}, {KIND}) ({rate('awa.job.inserted')})",
                          "{{awa_job_queue}} {{awa_job_kind}}"),), unit="ops",
                  runbooks=(diagnostic("enqueue"),)),
        PanelSpec("Enqueue batch size", "Rows per enqueue call: tiny batches cap producer "
                  "throughput at the round-trip cost.",
                  quantiles("awa.enqueue.batch_size")[:2] + (average("awa.enqueue.batch_size"),),
                  runbooks=(diagnostic("enqueue"),)),
        PanelSpec("Enqueue duration", "Time per enqueue call: p50, p95, p99. Slow with healthy "
                  "batch sizes points at contention or WAL pressure.",
                  quantiles("awa.enqueue.duration"), unit="s",
                  runbooks=(diagnostic("enqueue"),)),
    )
    return DashboardSpec(
        "awa-workers-dispatch", "awa-workers-dispatch.json", "Awa workers and dispatch",
        "How the runtimes claim, complete and heartbeat, and how producers enqueue.",
        (("Dispatch", claims), ("Completion and heartbeats", completion),
         ("Producers", producers)),
        queue_source="awa.db.queue.depth")


def maintenance(t: Thresholds) -> DashboardSpec:
    panels = (
        PanelSpec("Rescues by queue and kind", "Attempts rescued per second: heartbeat, "
                  "deadline, callback.",
                  (Target(f"sum by ({Q}, {RESCUE_KIND}) ({rate('awa.maintenance.rescues')})",
                          "{{awa_job_queue}} {{awa_rescue_kind}}"),), unit="ops", width=12,
                  runbooks=(alert_runbook("AwaRescuesSpiking"), diagnostic("stuck-running"))),
        PanelSpec("Promoted jobs", "Scheduled and retryable jobs promoted to available per "
                  "second, per queue, and promotion statements that moved rows.",
                  (Target(f"sum by ({Q}) ({rate('awa.maintenance.promoted')})",
                          "{{awa_job_queue}}"),
                   Target(f"sum({rate('awa.maintenance.promote_batches')})", "batches")),
                  unit="ops", width=12),
        PanelSpec("Promotion latency", "Time of one promotion statement: p50, p95, p99.",
                  quantiles("awa.maintenance.promote_duration"), unit="s", width=12),
        PanelSpec("Branch duration (p95)", "95th percentile time of one pass of each "
                  "maintenance branch.",
                  (Target(f"histogram_quantile(0.95, sum by (le, {BRANCH}) "
                          f"(rate({q('awa.maintenance.branch.duration', '_bucket')}[{RATE}])))",
                          "{{awa_maintenance_branch}}"),), unit="s", width=12,
                  runbooks=(alert_runbook("AwaMaintenanceOverrun"),)),
        PanelSpec("Branch overruns", "Maintenance passes that took longer than their interval, "
                  "per branch.",
                  (Target(f"sum by ({BRANCH}) ({increase('awa.maintenance.branch.overrun')})",
                          "{{awa_maintenance_branch}}"),),
                  thresholds=warn_at(t.maintenance_overruns_per_15m, "orange"),
                  runbooks=(alert_runbook("AwaMaintenanceOverrun"),)),
        PanelSpec("Leader changes", "Leadership acquisitions in the window, and how many "
                  "different runtimes led in it; more than a few an hour means runtimes "
                  "restart or lose their leader connection.",
                  (Target(f"sum({increase('awa.leader.elected')})", "elections"),
                   Target(f"count(max_over_time({m('awa.leader.active')}[{RATE}]) == 1)",
                          "runtimes that led")),
                  runbooks=(alert_runbook("AwaLeaderFlapping"), diagnostic("runtime"))),
        PanelSpec("Leadership by runtime", "1 for the runtime holding leadership.",
                  (Target(f"max by (instance) ({m('awa.leader.active')})", "{{instance}}"),),
                  runbooks=(alert_runbook("AwaNoLeader"),)),
        PanelSpec("Promotion batch size", "Jobs moved to available per promotion statement "
                  "that moved any: batches at the promotion limit mean a backlog of due jobs.",
                  quantiles("awa.maintenance.promote_batch_size")[:2]
                  + (average("awa.maintenance.promote_batch_size"),), width=12),
        PanelSpec("Cron fires", "Jobs enqueued by cron schedules in the window, per schedule.",
                  (Target(f"sum by ({CRON_NAME}) ({increase('awa.cron.fired')})",
                          "{{awa_cron_name}}"),), width=12),
        PanelSpec("Cron lateness", "Per active schedule, how long its oldest due fire time has "
                  "waited to be enqueued (0 on time), read from the database by awa-ops "
                  "exporter: it keeps rising when no leader fires it or the leader cannot "
                  "evaluate its stored expression.",
                  (Target(f"max by ({CRON_NAME}) ({m('awa.db.cron.overdue')})",
                          "{{awa_cron_name}}"),), unit="s", width=12,
                  thresholds=warn_at(t.cron_overdue_seconds),
                  runbooks=(alert_runbook("AwaCronNotFiring"), diagnostic("cron"))),
    )
    storage = (
        PanelSpec("Ring occupancy", "Share of each ring's slots whose partitions hold rows, "
                  "read from the database by awa-ops exporter (queue storage only). At 100 % "
                  "the ring cannot rotate: new rows pile into its current slot.",
                  (Target(f"max by ({RING}) ({m('awa.db.ring.occupied_slots')})\n/ "
                          f"max by ({RING}) ({m('awa.db.ring.slot_count')})",
                          "{{awa_ring}}"),
                   Target(f"max by ({RING}) ({m('awa.ring.occupied_slots')})\n/ "
                          f"max by ({RING}) ({m('awa.ring.slot_count')})",
                          "{{awa_ring}} (leader)")), unit="percentunit", kind="bargauge",
                  thresholds=((None, "green"), (0.75, "orange"), (1.0, "red")),
                  runbooks=(alert_runbook("AwaRingWrapPressure"), diagnostic("dead-tuples"))),
        PanelSpec("Storage engine", "Runtimes per storage engine they serve.",
                  (Target(f"count by ({STORAGE_ENGINE}) ({m('awa.storage.info')})",
                          "{{awa_storage_engine}}"),), kind="stat"),
        PanelSpec("Ring position", "The slot each ring writes to, and its generation "
                  "(rotations so far), in the database and as the leader last saw them.",
                  (Target(f"max by ({RING}) ({m('awa.db.ring.current_slot')})",
                          "slot {{awa_ring}}"),
                   Target(f"max by ({RING}) ({m('awa.ring.current_slot')})",
                          "slot {{awa_ring}} (leader)"),
                   Target(f"max by ({RING}) ({m('awa.db.ring.generation')})",
                          "generation {{awa_ring}}"),
                   Target(f"max by ({RING}) ({m('awa.ring.generation')})",
                          "generation {{awa_ring}} (leader)"))),
        PanelSpec("Since last rotation", "Seconds since each ring last rotated "
                  "(awa.queue_ring_state.rotated_at).",
                  (Target(f"max by ({RING}) ({m('awa.db.ring.rotation_age')})",
                          "{{awa_ring}}"),), unit="s"),
        PanelSpec("Rotations", "Ring rotations per second by ring (the generation's rate), and "
                  "rotations skipped because the next slot still held rows, by blocker.",
                  (Target(f"sum by ({RING}) (rate({m('awa.db.ring.generation')}[{RATE}]))",
                          "rotated {{awa_ring}}"),
                   Target(f"sum by ({RING}) ({rate('awa.maintenance.rotate.attempts')})",
                          "attempted {{awa_ring}}"),
                   Target(f"sum by ({RING}, {BLOCKER}) "
                          f"({rate('awa.maintenance.rotate.skipped')})",
                          "skipped {{awa_ring}} ({{awa_prune_blocker}})")), unit="ops",
                  runbooks=(alert_runbook("AwaRingWrapPressure"),)),
        PanelSpec("Prune", "Sealed slots truncated per second, and those prune could not "
                  "reclaim, by what held them (retention is expected).",
                  (Target(f"sum by ({RING}) ({rate('awa.maintenance.prune.attempts')})",
                          "attempted {{awa_ring}}"),
                   Target(f"sum by ({RING}) ({rate('awa.maintenance.prune.truncated')})",
                          "truncated {{awa_ring}}"),
                   Target(f"sum({rate('awa.maintenance.prune.carried_failed')})",
                          "failed rows carried forward"),
                   Target(f"sum by ({RING}, {BLOCKER}) "
                          f"({rate('awa.maintenance.prune.skipped')})",
                          "skipped {{awa_ring}} ({{awa_prune_blocker}})")), unit="ops",
                  runbooks=(alert_runbook("AwaPruneStalled"),)),
        PanelSpec("Blocked sealed slots", "How long the longest-blocked sealed slot of each "
                  "ring has been held, by blocker (leader's view).",
                  (Target(f"max by ({RING}, {BLOCKER}) "
                          f"({m('awa.storage.prune_blocked_age')})",
                          "{{awa_ring}} ({{awa_prune_blocker}})"),), unit="s",
                  thresholds=warn_at(t.prune_blocked_seconds),
                  runbooks=(alert_runbook("AwaPruneStalled"), diagnostic("dead-tuples"))),
        PanelSpec("Blocked sealed slots by blocker", "Sealed slots the leader's last prune "
                  "pass could not reclaim, by what held them.",
                  (Target(f"sum by ({RING}, {BLOCKER}) ({m('awa.storage.blocked_slots')})",
                          "{{awa_ring}} ({{awa_prune_blocker}})"),), stacked=True,
                  runbooks=(alert_runbook("AwaPruneStalled"),)),
        PanelSpec("Rotate and prune time (p95)", "95th percentile time of one prune pass and "
                  "one rotation per ring.",
                  (Target(f"histogram_quantile(0.95, sum by (le, {RING}) "
                          f"(rate({m('awa.maintenance.prune.duration')}_bucket[{RATE}])))",
                          "prune {{awa_ring}}"),
                   Target(f"histogram_quantile(0.95, sum by (le, {RING}) "
                          f"(rate({m('awa.maintenance.rotate.duration')}_bucket[{RATE}])))",
                          "rotate {{awa_ring}}")), unit="s"),
    )
    return DashboardSpec(
        "awa-maintenance", "awa-maintenance.json", "Awa maintenance",
        "What the elected leader does: rescue, promotion, branch timings, elections, cron; "
        "and, on queue storage, ring rotation and prune.",
        (("Maintenance", panels), ("Queue storage", storage)), queue_source="awa.db.queue.depth")


def postgres(t: Thresholds) -> DashboardSpec:
    horizon = (
        PanelSpec("xmin horizon age by source", "How long the oldest holder of each source "
                  "(transaction, replication slot, standby feedback, prepared transaction) has "
                  "held back the xmin horizon.",
                  (Target(f"max by ({XMIN_SOURCE}) ({m('awa.db.xmin_horizon.age')})",
                          "{{awa_db_xmin_source}}"),), unit="s",
                  thresholds=warn_at(t.xmin_horizon_age_seconds),
                  runbooks=(alert_runbook("AwaXminHorizonPinned"), diagnostic("mvcc-horizon"))),
        PanelSpec("Standby replay lag", "When the exporter reads a hot standby (standby = 1): "
                  "seconds and bytes of WAL received and not yet replayed, so how old what "
                  "these dashboards show may be.",
                  (Target(f"max({m('awa.db.replication.standby')})", "standby"),
                   Target(f"max({m('awa.db.replication.replay_lag')})", "replay lag (s)"),
                   Target(f"max({m('awa.db.replication.replay_lag_bytes')})",
                          "received, not replayed (bytes)")),
                  runbooks=(diagnostic("replication"),)),
        PanelSpec("WAL kept by replication slots", "Bytes of WAL each replication slot keeps "
                  "on the primary, by whether a consumer is connected: an inactive slot's line "
                  "only grows, until the WAL disk fills.",
                  (Target(f"max by ({SLOT}, {SLOT_ACTIVE}) "
                          f"({m('awa.db.replication_slot.retained_wal_bytes')})",
                          f"{{{{{SLOT}}}}} (active: {{{{{SLOT_ACTIVE}}}}})"),), unit="bytes",
                  thresholds=warn_at(t.inactive_slot_wal_bytes),
                  runbooks=(alert_runbook("AwaReplicationSlotRetainingWal"),
                            diagnostic("mvcc-horizon"))),
        PanelSpec("xmin horizon xid age by source", "age() in transactions of the oldest xmin "
                  "each source holds; replication slots only show here.",
                  (Target(f"max by ({XMIN_SOURCE}) ({m('awa.db.xmin_horizon.xid_age')})",
                          "{{awa_db_xmin_source}}"),),
                  runbooks=(diagnostic("mvcc-horizon"),)),
        PanelSpec("Oldest transaction by state", "Age of the oldest open transaction per "
                  "backend state; idle in transaction should never be old.",
                  (Target(f"max by ({TXN_STATE}) ({m('awa.db.transaction.oldest_age')})",
                          "{{awa_db_txn_state}}"),), unit="s",
                  thresholds=warn_at(t.idle_in_transaction_seconds, "orange"),
                  runbooks=(alert_runbook("AwaIdleInTransaction"), diagnostic("mvcc-horizon"))),
    )
    tables = (
        PanelSpec("Dead tuples per table", "Dead tuples per queue table; they should fall after "
                  "each autovacuum.",
                  (Target(f"max by ({TABLE}) ({m('awa.db.table.dead_tuples')})",
                          "{{awa_db_table}}"),),
                  thresholds=warn_at(t.dead_tuples_min, "orange"),
                  runbooks=(alert_runbook("AwaDeadTuplesGrowing"), diagnostic("dead-tuples"))),
        PanelSpec("Live tuples per table", "Live tuples per queue table.",
                  (Target(f"max by ({TABLE}) ({m('awa.db.table.live_tuples')})",
                          "{{awa_db_table}}"),),
                  runbooks=(diagnostic("dead-tuples"),)),
        PanelSpec("Dead tuple ratio", "dead / (dead + live) per queue table; the "
                  "AwaDeadTuplesGrowing ratio is drawn in red.",
                  (Target(f"max by ({TABLE}) ({m('awa.db.table.dead_tuples')}) / "
                          f"(max by ({TABLE}) ({m('awa.db.table.dead_tuples')}) + "
                          f"max by ({TABLE}) ({m('awa.db.table.live_tuples')}))",
                          "{{awa_db_table}}"),), unit="percentunit",
                  thresholds=warn_at(t.dead_tuple_ratio),
                  runbooks=(alert_runbook("AwaDeadTuplesGrowing"),)),
        PanelSpec("Time since last autovacuum", "Seconds since autovacuum last processed each "
                  "queue table; long gaps on a churning table mean vacuum is not keeping up.",
                  (Target(f"max by ({TABLE}) ({m('awa.db.table.last_autovacuum_age')})",
                          "{{awa_db_table}}"),), unit="s",
                  runbooks=(diagnostic("dead-tuples"),)),
        PanelSpec("Notification queue usage", "Share of the LISTEN/NOTIFY queue in use; when "
                  "full, every NOTIFY and so every job insert fails.",
                  (Target(f"max({m('awa.db.notification_queue.usage')})", "usage"),),
                  unit="percentunit", thresholds=warn_at(t.notification_queue_usage),
                  runbooks=(alert_runbook("AwaNotificationQueueFilling"),
                            diagnostic("cancel-listener"))),
    )
    jobs = (
        PanelSpec("Stale heartbeats", "Running jobs whose heartbeat is past the staleness "
                  "threshold, per queue.",
                  (Target(f"sum by ({Q}) ({q('awa.db.running.heartbeat_stale')})",
                          "{{awa_job_queue}}"),),
                  thresholds=warn_at(1, "orange"),
                  runbooks=(alert_runbook("AwaHeartbeatsStale"), diagnostic("heartbeats"))),
        PanelSpec("Oldest heartbeat age", "Age of the oldest heartbeat among running jobs, per "
                  "queue; the AwaHeartbeatsStale threshold is drawn in red.",
                  (Target(f"max by ({Q}) ({q('awa.db.running.oldest_heartbeat_age')})",
                          "{{awa_job_queue}}"),), unit="s",
                  thresholds=warn_at(t.heartbeat_age_seconds),
                  runbooks=(alert_runbook("AwaHeartbeatsStale"), diagnostic("heartbeats"))),
        PanelSpec("Deadline overdue", "Running jobs past their hard deadline, per queue.",
                  (Target(f"sum by ({Q}) ({q('awa.db.running.deadline_overdue')})",
                          "{{awa_job_queue}}"),), thresholds=warn_at(1, "orange"),
                  runbooks=(alert_runbook("AwaDeadlinesOverdue"), diagnostic("stuck-running"))),
        PanelSpec("Unique-wedged jobs", "Running jobs whose unique key another job holds.",
                  (Target(f"sum by ({Q}) ({q('awa.db.unique.wedged')})", "{{awa_job_queue}}"),),
                  thresholds=warn_at(1),
                  runbooks=(alert_runbook("AwaUniqueClaimWedged"), diagnostic("unique-wedge"))),
        PanelSpec("Queue depth by state (database)", "Jobs per state, counted by the exporter; "
                  "works when every worker is dead.",
                  (Target(f"sum by ({STATE}) ({q('awa.db.queue.depth')})", "{{awa_job_state}}"),),
                  stacked=True, runbooks=(diagnostic("stuck-running"),)),
        PanelSpec("Queue lag (database)", "Age of the oldest available job per queue, counted "
                  "by the exporter.",
                  (Target(f"max by ({Q}) ({q('awa.db.queue.lag')})", "{{awa_job_queue}}"),),
                  unit="s", thresholds=warn_at(t.queue_lag_seconds),
                  runbooks=(alert_runbook("AwaQueueLagHigh"),)),
        PanelSpec("Unserved queues", "Queues with waiting jobs and no live runtime serving "
                  "them (1): nothing claims their jobs until a worker for them starts.",
                  (Target(f"max by ({Q}) ({q('awa.db.queue.unserved')})", "{{awa_job_queue}}"),),
                  thresholds=warn_at(1, "red"),
                  runbooks=(alert_runbook("AwaQueueUnserved"), diagnostic("runtime"))),
        PanelSpec("Completions per second (database)", "Jobs completed per second per queue "
                  "over the last minute, counted by the exporter; 0 for a known idle queue.",
                  (Target(f"sum by ({Q}) ({q('awa.db.queue.completed_rate')})",
                          "{{awa_job_queue}}"),), unit="ops"),
        PanelSpec("DLQ depth by reason", "Dead-letter entries per queue and reason.",
                  (Target(f"sum by ({Q}, {DLQ_REASON}) ({q('awa.db.dlq.depth')})",
                          "{{awa_job_queue}} {{awa_dlq_reason}}"),), stacked=True,
                  runbooks=(alert_runbook("AwaDLQGrowing"), diagnostic("dlq"))),
        PanelSpec("Live runtimes", "Runtime instances the database sees alive.",
                  (Target(f"max({m('awa.db.runtimes.live')})", "live runtimes"),),
                  thresholds=((None, "red"), (1, "green")),
                  runbooks=(alert_runbook("AwaNoActiveRuntime"), diagnostic("runtime"))),
        PanelSpec("Exporter scrapes", "Time the exporter spent on its last scrape, and whether "
                  "every query succeeded (1).",
                  (Target(f"max({m('awa.db.exporter.scrape_duration')})", "duration"),
                   Target(f"min({m('awa.db.exporter.scrape_success')})", "success")),
                  unit="s", runbooks=(alert_runbook("AwaExporterDown"),)),
    )
    return DashboardSpec(
        "awa-postgres-health", "awa-postgres-health.json", "Awa Postgres health",
        "What the database says, from awa-ops exporter: MVCC horizon, transactions, table "
        "churn, NOTIFY queue, stuck and wedged jobs. Works when every worker is dead.",
        (("Horizon and transactions", horizon), ("Queue tables", tables),
         ("Jobs as the database sees them", jobs)),
        queue_source="awa.db.queue.depth")


DASHBOARDS = (overview, workers, maintenance, postgres)


def build_dashboards(t: Thresholds, base_url: str) -> dict[str, str]:
    """File name -> dashboard JSON text."""
    return {spec.file: _render(spec, base_url)
            for spec in (make(t) for make in DASHBOARDS)}


def _render(spec: DashboardSpec, base_url: str) -> str:
    builder = (
        sdk.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags([TAG])
        .editable()
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .link(sdk.DashboardLink("Awa dashboards").type(model.DashboardLinkType.DASHBOARDS)
              .tags([TAG]).as_dropdown(True).include_vars(True).keep_time(True))
        .link(sdk.DashboardLink("Runbooks").type(model.DashboardLinkType.LINK)
              .url(runbook_url(base_url, "runbooks/")).icon("doc").target_blank(True))
        .annotation(sdk.AnnotationQuery().name("Awa alerts").datasource(DATASOURCE)
                    .enable(True).icon_color("red").expr(FIRING_ALERTS))
        .with_variable(sdk.DatasourceVariable(DATASOURCE_VAR).label("Data source")
                       .type("prometheus"))
        .with_variable(
            sdk.QueryVariable(QUEUE_VAR).label("Queue").datasource(DATASOURCE)
            .query(f"label_values({m(spec.queue_source)}, {Q})")
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(model.VariableOption(selected=True, text="All", value="$__all")))
    )
    panel_id = 0
    for row_title, panels in spec.rows:
        panel_id += 1
        builder = builder.with_row(sdk.Row(row_title).id(panel_id))
        for panel in panels:
            panel_id += 1
            builder = builder.with_panel(_panel(panel, panel_id, base_url))
    return json.dumps(builder.build(), cls=JSONEncoder, indent=2) + "\n"


def _panel(spec: PanelSpec, panel_id: int,
           base_url: str) -> stat.Panel | bargauge.Panel | timeseries.Panel:
    builder: stat.Panel | bargauge.Panel | timeseries.Panel
    if spec.kind == "stat":
        builder = (stat.Panel()
                   .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])
                                   .values(False))
                   .color_mode(common.BigValueColorMode.VALUE)
                   .graph_mode(common.BigValueGraphMode.AREA))
    elif spec.kind == "bargauge":
        builder = (bargauge.Panel()
                   .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])
                                   .values(False))
                   .display_mode(common.BarGaugeDisplayMode.GRADIENT)
                   .orientation(common.VizOrientation.HORIZONTAL))
    else:
        builder = (timeseries.Panel()
                   .legend(common_builders.VizLegendOptions()
                           .display_mode(common.LegendDisplayMode.LIST)
                           .placement(common.LegendPlacement.BOTTOM).show_legend(True))
                   .tooltip(common_builders.VizTooltipOptions()
                            .mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING))
                   .fill_opacity(10)
                   .line_width(1)
                   .thresholds_style(common_builders.GraphThresholdsStyleConfig()
                                     .mode(common.GraphTresholdsStyleMode.LINE)
                                     if len(spec.thresholds) > 1 else
                                     common_builders.GraphThresholdsStyleConfig()
                                     .mode(common.GraphTresholdsStyleMode.OFF)))
        if spec.stacked:
            builder = builder.stacking(common_builders.StackingConfig()
                                       .mode(common.StackingMode.NORMAL))
    builder = (builder.id(panel_id).title(spec.title).description(spec.description)
               .datasource(DATASOURCE).unit(spec.unit).span(spec.width).height(spec.height)
               .thresholds(sdk.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE)
                           .steps([model.Threshold(value=v, color=c) for v, c in spec.thresholds])))
    if spec.min is not None:
        builder = builder.min(spec.min)
    instant = spec.kind in ("stat", "bargauge")
    for index, target in enumerate(spec.targets):
        query = (prometheus.Dataquery().expr(target.expr).ref_id(chr(ord("A") + index))
                 .datasource(DATASOURCE).legend_format(target.legend or "__auto"))
        builder = builder.with_target(query.instant() if instant and spec.kind == "bargauge"
                                      else query.range())
    if spec.runbooks:
        builder = builder.links([
            sdk.DashboardLink(f"Runbook: {path.rsplit('/', 1)[-1].removesuffix('.md')}")
            .type(model.DashboardLinkType.LINK).url(runbook_url(base_url, path))
            .target_blank(True)
            for path in spec.runbooks])
    return builder
