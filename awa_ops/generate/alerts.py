"""Prometheus alert rules for awa, and the promtool unit tests that prove them.

Conventions (monitoring-mixins): CamelCase names prefixed ``Awa``; a
``severity`` label (critical pages, warning opens a ticket, info is context);
``summary`` and a templated ``description``; ``runbook_url`` into
``runbooks/alerts/<AlertName>.md``; a ``for:`` long enough not to flap.

Database-side conditions use the ``awa-ops exporter`` metrics (``awa_db_*``),
so they keep firing when every worker is dead. Every threshold and ``for:``
is a field of ``Thresholds`` (or ``for_overrides``), which the generator reads
from an optional YAML file; the unit tests are built from the same values, so
a tuned rule file ships with tests that still prove it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from awa import config, metrics
from awa_ops.generate.promql import selector
from awa_ops.generate.templating import render_template

# Empty: runbook links are repository-relative (runbooks/alerts/<Alert>.md) until an
# operator names where the runbooks are served with --runbook-base-url.
DEFAULT_RUNBOOK_BASE_URL = ""
ALERT_RUNBOOK_DIR = "runbooks/alerts"
RULES_FILE = "awa-rules.yml"
RULES_TEST_FILE = "awa-rules.test.yml"
GROUP_NAME = "awa"
SEVERITIES = ("critical", "warning", "info")
IDLE_IN_TRANSACTION = "idle in transaction"
AVAILABLE = "available"


def _metric(otel_name: str) -> str:
    """Prometheus name of a catalogue entry (KeyError for a name the catalogue lacks)."""
    return metrics.by_name(otel_name).prometheus


def _label(attribute_key: str) -> str:
    return metrics.prometheus_label(attribute_key)


# Names used by the rules, all resolved through the catalogue.
Q = _label(metrics.ATTR_QUEUE)
KIND = _label(metrics.ATTR_KIND)
STATE = _label(metrics.ATTR_STATE)
TERMINAL = _label(metrics.ATTR_TERMINAL)
RESCUE_KIND = _label(metrics.ATTR_RESCUE_KIND)
DLQ_REASON = _label(metrics.ATTR_DLQ_REASON)
BRANCH = _label(metrics.ATTR_BRANCH)
TABLE = _label(metrics.ATTR_DB_TABLE)
TXN_STATE = _label(metrics.ATTR_DB_TXN_STATE)
XMIN_SOURCE = _label(metrics.ATTR_DB_XMIN_SOURCE)
OWNER = _label(metrics.ATTR_OWNER)
DESCRIPTOR_HASH = _label(metrics.ATTR_DESCRIPTOR_HASH)
RING = _label(metrics.ATTR_RING)
BLOCKER = _label(metrics.ATTR_PRUNE_BLOCKER)
CRON = _label(metrics.ATTR_CRON_NAME)
SLOT = _label(metrics.ATTR_DB_SLOT)
SLOT_ACTIVE = _label(metrics.ATTR_DB_SLOT_ACTIVE)

COMPLETED = _metric("awa.job.completed")
FAILED = _metric("awa.job.failed")
RESCUES = _metric("awa.maintenance.rescues")
BRANCH_OVERRUN = _metric("awa.maintenance.branch.overrun")
BRANCH_PASSES = _metric("awa.maintenance.branch.duration") + "_count"
LEADER_ACTIVE = _metric("awa.leader.active")
RUNTIME_INFO = _metric("awa.runtime.info")
QUEUE_INFO = _metric("awa.queue.info")
KIND_INFO = _metric("awa.job_kind.info")
DB_DEPTH = _metric("awa.db.queue.depth")
DB_LAG = _metric("awa.db.queue.lag")
DB_UNSERVED = _metric("awa.db.queue.unserved")
DB_HEARTBEAT_STALE = _metric("awa.db.running.heartbeat_stale")
DB_DEADLINE_OVERDUE = _metric("awa.db.running.deadline_overdue")
DB_RUNTIMES_LIVE = _metric("awa.db.runtimes.live")
DB_LEADER_PRESENT = _metric("awa.db.leader.present")
DB_DLQ_DEPTH = _metric("awa.db.dlq.depth")
DB_UNIQUE_WEDGED = _metric("awa.db.unique.wedged")
DB_TXN_OLDEST = _metric("awa.db.transaction.oldest_age")
DB_XMIN_AGE = _metric("awa.db.xmin_horizon.age")
DB_DEAD_TUPLES = _metric("awa.db.table.dead_tuples")
DB_LIVE_TUPLES = _metric("awa.db.table.live_tuples")
DB_NOTIFY_USAGE = _metric("awa.db.notification_queue.usage")
DB_CRON_OVERDUE = _metric("awa.db.cron.overdue")
DB_SLOT_WAL = _metric("awa.db.replication_slot.retained_wal_bytes")
DB_SCRAPE_SUCCESS = _metric("awa.db.exporter.scrape_success")
PRUNE_BLOCKED_AGE = _metric("awa.storage.prune_blocked_age")
ROTATE_ATTEMPTS = _metric("awa.maintenance.rotate.attempts")
ROTATE_SKIPPED = _metric("awa.maintenance.rotate.skipped")
# Terminal rows inside their retention hold a slot by design: not a stall.
NOT_RETENTION = "!=" + metrics.PRUNE_BLOCKER_RETENTION


@dataclass(frozen=True)
class Thresholds:
    """Every tunable number of the rules; override any of them with ``--thresholds FILE``."""

    queue_lag_seconds: float = 300
    error_ratio: float = 0.10
    throughput_collapse_ratio: float = 0.25
    throughput_collapse_min_backlog: float = 100
    rescues_per_10m: float = 10
    # the dashboards' heartbeat-age panel: rescue takes a stale attempt within staleness +
    # one rescue interval (120 s by default); another interval on top and it failed to act
    heartbeat_age_seconds: float = (config.HEARTBEAT_STALENESS_MS
                                    + 2 * config.HEARTBEAT_RESCUE_INTERVAL_MS) / 1000
    deadline_overdue_jobs: float = 0
    dlq_growth_per_30m: float = 10
    xmin_horizon_age_seconds: float = 900
    idle_in_transaction_seconds: float = 300
    dead_tuples_min: float = 10_000
    dead_tuple_ratio: float = 0.20
    unique_wedged_jobs: float = 0
    maintenance_overruns_per_15m: float = 3
    # and most of its passes: a 250 ms branch (promote) that overruns a few of its 3,600
    # passes in 15 minutes on a busy database is noise, not a leader falling behind
    maintenance_overrun_ratio: float = 0.5
    notification_queue_usage: float = 0.5
    leader_changes_per_hour: float = 5
    prune_blocked_seconds: float = 1800  # a sealed ring slot held by live work this long
    ring_wrap_skip_ratio: float = 0.5  # share of rotations that hit a slot held by live work
    # a cron schedule's due fire time not enqueued this long (the leader fires within 1 s)
    cron_overdue_seconds: float = config.OPS_CRON_OVERDUE_S
    # WAL an inactive replication slot keeps: past this, a consumer that will not return is
    # filling the WAL disk (a standby down for maintenance keeps a few hundred MiB)
    inactive_slot_wal_bytes: float = 2**30
    for_overrides: dict[str, str] = field(default_factory=dict)


class ThresholdsError(ValueError):
    """A thresholds file the generator cannot use; the message says what to fix."""


_DURATION = re.compile(r"^(?:\d+[smhdw])+$")
_DURATION_PART = re.compile(r"(\d+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text: str) -> int:
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def load_thresholds(path: str | Path | None) -> Thresholds:
    """Thresholds from a YAML mapping of field names (and ``for: {AlertName: 5m}``)."""
    if path is None:
        return Thresholds()
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ThresholdsError(f"cannot read thresholds file {path}: {exc}".splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise ThresholdsError(f"{path}: expected a mapping of threshold names to numbers")
    known = {f.name for f in dataclasses.fields(Thresholds)} - {"for_overrides"}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "for":
            values["for_overrides"] = _parse_for(path, value)
        elif key not in known:
            raise ThresholdsError(
                f"{path}: unknown threshold {key!r}; known: {', '.join(sorted(known))}, for")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ThresholdsError(f"{path}: {key} must be a non-negative number, got {value!r}")
        else:
            values[key] = value
    return Thresholds(**values)


def _parse_for(path: str | Path, value: Any) -> dict[str, str]:
    names = {rule.name for rule in build_rules(Thresholds())}
    if not isinstance(value, dict):
        raise ThresholdsError(f"{path}: 'for' must map alert names to durations like 5m")
    overrides = {}
    for name, duration in value.items():
        if name not in names:
            raise ThresholdsError(f"{path}: unknown alert {name!r} under 'for'")
        if not isinstance(duration, str) or not _DURATION.match(duration):
            raise ThresholdsError(f"{path}: for.{name} must be a duration like 30s, 5m or 1h")
        overrides[name] = duration
    return overrides


# --- promtool series helpers ---------------------------------------------------
def num(value: float) -> str:
    """A number as PromQL/promtool accept it, without float noise."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def constant(value: float, minutes: int) -> str:
    return f"{num(value)}x{minutes}"


def linear(step: float, minutes: int, start: float = 0) -> str:
    return f"{num(start)}+{num(step)}x{minutes}"


@dataclass(frozen=True)
class Expected:
    """One alert instance a test expects to be firing: its extra labels and its value."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class RuleCase:
    """Series over time and what the alert must do at ``eval_minutes``."""

    series: dict[str, str]
    eval_minutes: int
    firing: tuple[Expected, ...] = ()


@dataclass(frozen=True)
class AlertRule:
    name: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str
    runbook_check: str  # the diagnostic runbook (runbooks/<check>.md) the alert runbook links
    cases: Callable[[AlertRule], list[RuleCase]]

    @property
    def runbook_path(self) -> str:
        return f"{ALERT_RUNBOOK_DIR}/{self.name}.md"

    @property
    def for_minutes(self) -> int:
        return math.ceil(duration_seconds(self.for_) / 60)


def build_rules(t: Thresholds) -> list[AlertRule]:
    """The rule set for a set of thresholds, in the order it is written."""
    depth_available = selector(DB_DEPTH, **{STATE: f"={AVAILABLE}"})
    rules = [
        AlertRule(
            name="AwaNoActiveRuntime",
            severity="critical",
            expr=f"max({DB_RUNTIMES_LIVE}) < 1",
            for_="5m",
            summary="No awa runtime is alive.",
            description=(
                "The database reports {{ $value | humanize }} live awa runtimes: nothing claims "
                "jobs and no maintenance (rescue, promotion, cron) runs."),
            runbook_check="runtime",
            cases=lambda r: [
                RuleCase({DB_RUNTIMES_LIVE: constant(0, r.for_minutes + 5)}, r.for_minutes + 3,
                         (Expected({}, 0),)),
                RuleCase({DB_RUNTIMES_LIVE: constant(2, r.for_minutes + 5)}, r.for_minutes + 3),
            ],
        ),
        AlertRule(
            name="AwaNoLeader",
            severity="critical",
            expr=f"max({DB_LEADER_PRESENT}) < 1 and on () max({DB_RUNTIMES_LIVE}) > 0",
            for_="3m",
            summary="Live awa runtimes but no maintenance leader.",
            description=(
                "No live runtime holds leadership (leader present = {{ $value | humanize }}): "
                "stale heartbeats and deadlines are not rescued, scheduled and retryable jobs are "
                "not promoted, cron does not fire."),
            runbook_check="runtime",
            cases=lambda r: [
                RuleCase({DB_LEADER_PRESENT: constant(0, r.for_minutes + 5),
                          DB_RUNTIMES_LIVE: constant(2, r.for_minutes + 5)},
                         r.for_minutes + 3, (Expected({}, 0),)),
                RuleCase({DB_LEADER_PRESENT: constant(1, r.for_minutes + 5),
                          DB_RUNTIMES_LIVE: constant(2, r.for_minutes + 5)}, r.for_minutes + 3),
                # no runtime at all is AwaNoActiveRuntime's page, not this one
                RuleCase({DB_LEADER_PRESENT: constant(0, r.for_minutes + 5),
                          DB_RUNTIMES_LIVE: constant(0, r.for_minutes + 5)}, r.for_minutes + 3),
            ],
        ),
        AlertRule(
            name="AwaQueueUnserved",
            severity="critical",
            expr=f"max by ({Q}) ({DB_UNSERVED}) > 0",
            # a runtime counts as gone two snapshot intervals (20 s) after its last one; a
            # rolling restart leaves a queue unserved for a drain (shutdown_timeout, 2 s)
            # and a start; three minutes is neither
            for_="3m",
            summary="Jobs wait in a queue that no live runtime serves.",
            description=(
                "Queue {{ $labels.awa_job_queue }} has waiting jobs and no live runtime serves "
                "it: nothing will claim them until a worker for this queue starts."),
            runbook_check="runtime",
            cases=lambda r: [
                RuleCase({_labels_selector(DB_UNSERVED, {Q: "long"}):
                          constant(1, r.for_minutes + 5)}, r.for_minutes + 3,
                         (Expected({Q: "long"}, 1),)),
                RuleCase({_labels_selector(DB_UNSERVED, {Q: "long"}):
                          constant(0, r.for_minutes + 5)}, r.for_minutes + 3),
                # unserved for a minute during a rolling restart: no alert
                RuleCase({_labels_selector(DB_UNSERVED, {Q: "long"}):
                          f"0 1 {constant(0, r.for_minutes + 5)}"}, r.for_minutes + 3),
            ],
        ),
        AlertRule(
            name="AwaQueueLagHigh",
            severity="warning",
            expr=f"max by ({Q}) ({DB_LAG}) > {num(t.queue_lag_seconds)}",
            for_="10m",
            summary="Jobs wait too long to be claimed.",
            description=(
                "The oldest available job of queue {{ $labels.awa_job_queue }} has waited "
                "{{ $value | humanizeDuration }}: workers are too few, paused, rate limited or "
                "stuck."),
            runbook_check="stuck-running",
            cases=lambda r: _gauge_cases(r, DB_LAG, {Q: "email"}, t.queue_lag_seconds),
        ),
        AlertRule(
            name="AwaErrorRateHigh",
            severity="warning",
            expr=(
                f"sum by ({Q}) (rate({FAILED}[5m]))\n"
                f"/\n"
                f"(\n"
                f"  sum by ({Q}) (rate({FAILED}[5m]))\n"
                f"  + (sum by ({Q}) (rate({COMPLETED}[5m])) or "
                f"0 * sum by ({Q}) (rate({FAILED}[5m])))\n"
                f")\n"
                f"> {num(t.error_ratio)}"),
            for_="10m",
            summary="A large share of job attempts fail.",
            description=(
                "{{ $value | humanizePercentage }} of the attempts finished in queue "
                "{{ $labels.awa_job_queue }} over the last 5 minutes failed."),
            runbook_check="dlq",
            cases=_error_rate_cases(t),
        ),
        AlertRule(
            name="AwaThroughputCollapsed",
            severity="warning",
            expr=(
                f"(\n"
                f"  sum by ({Q}) (rate({COMPLETED}[10m]))\n"
                f"  < {num(t.throughput_collapse_ratio)} * "
                f"sum by ({Q}) (rate({COMPLETED}[10m] offset 1h))\n"
                f")\n"
                f"and on ({Q})\n"
                f"(sum by ({Q}) ({depth_available}) > {num(t.throughput_collapse_min_backlog)})"),
            for_="15m",
            summary="Completions collapsed while jobs are waiting.",
            description=(
                "Queue {{ $labels.awa_job_queue }} completes {{ $value | humanize }} jobs/s, "
                f"under {num(t.throughput_collapse_ratio * 100)}% of its rate an hour ago, while "
                "available jobs are waiting."),
            runbook_check="stuck-running",
            cases=_throughput_cases(t),
        ),
        AlertRule(
            name="AwaRescuesSpiking",
            severity="warning",
            expr=f"(\n{recent_increase(RESCUES, (Q, RESCUE_KIND), '10m', RUNTIME_INFO)}\n)\n"
                 f"> {num(t.rescues_per_10m)}",
            for_="5m",
            summary="Maintenance is rescuing many attempts.",
            description=(
                "{{ $value | humanize }} attempts of queue {{ $labels.awa_job_queue }} were "
                "rescued ({{ $labels.awa_rescue_kind }}) in the last 10 minutes: workers are "
                "crashing, losing the database, or handlers overrun their deadline."),
            runbook_check="stuck-running",
            cases=lambda r: _increase_cases(
                r, RESCUES, {Q: "email", KIND: "send_email", RESCUE_KIND: "heartbeat"},
                {Q: "email", RESCUE_KIND: "heartbeat"}, t.rescues_per_10m, 10,
                presence=RUNTIME_INFO),
        ),
        AlertRule(
            name="AwaHeartbeatsStale",
            severity="warning",
            # stale by the staleness of the runtime that runs each attempt (a fleet of long
            # jobs may use 270 s where the default is 90 s): rescue takes such an attempt at
            # its next scan (30 s), so two minutes of it means rescue is not acting
            expr=f"sum by ({Q}) ({DB_HEARTBEAT_STALE}) > 0",
            for_="2m",
            summary="Running jobs stopped heartbeating and are not rescued.",
            description=(
                "{{ $value | humanize }} running jobs of queue {{ $labels.awa_job_queue }} are "
                "past the heartbeat staleness of the runtime that runs them, for longer than "
                "rescue takes: stale-heartbeat rescue is not running (no leader, or its "
                "maintenance fails). A worker that merely died does not fire this: rescue "
                "retries its jobs within staleness + one rescue interval."),
            runbook_check="heartbeats",
            cases=lambda r: _gauge_cases(r, DB_HEARTBEAT_STALE, {Q: "email"}, 0,
                                         fire_value=3),
        ),
        AlertRule(
            name="AwaDeadlinesOverdue",
            severity="warning",
            expr=f"sum by ({Q}) ({DB_DEADLINE_OVERDUE}) > {num(t.deadline_overdue_jobs)}",
            # overdue = a heartbeat interval past the deadline; deadline rescue scans every 30 s:
            # two minutes more and rescue is not acting
            for_="2m",
            summary="Running jobs are past their deadline and not rescued.",
            description=(
                "{{ $value | humanize }} running jobs of queue {{ $labels.awa_job_queue }} are "
                "past their hard deadline: deadline rescue is not running or cannot keep up."),
            runbook_check="stuck-running",
            cases=lambda r: _gauge_cases(r, DB_DEADLINE_OVERDUE, {Q: "email"},
                                         t.deadline_overdue_jobs),
        ),
        AlertRule(
            name="AwaDLQGrowing",
            severity="warning",
            expr=f"{gauge_growth(DB_DLQ_DEPTH, (Q,), '30m', DB_SCRAPE_SUCCESS)}\n"
                 f"> {num(t.dlq_growth_per_30m)}",
            for_="5m",
            summary="The dead-letter queue is growing.",
            description=(
                "The dead-letter queue of queue {{ $labels.awa_job_queue }} grew by "
                "{{ $value | humanize }} entries in the last 30 minutes."),
            runbook_check="dlq",
            cases=lambda r: _increase_cases(
                r, DB_DLQ_DEPTH, {Q: "email", DLQ_REASON: "max_attempts_exhausted"},
                {Q: "email"}, t.dlq_growth_per_30m, 30, start=5, presence=DB_SCRAPE_SUCCESS),
        ),
        AlertRule(
            name="AwaXminHorizonPinned",
            severity="warning",
            expr=(f"max by ({XMIN_SOURCE}) ({DB_XMIN_AGE}) > "
                  f"{num(t.xmin_horizon_age_seconds)}"),
            for_="5m",
            summary="Something holds the MVCC xmin horizon back.",
            description=(
                "A {{ $labels.awa_db_xmin_source }} has held the xmin horizon for "
                "{{ $value | humanizeDuration }}: vacuum cannot remove dead tuples of the queue "
                "tables, which bloat and slow every claim."),
            runbook_check="mvcc-horizon",
            cases=lambda r: _gauge_cases(r, DB_XMIN_AGE, {XMIN_SOURCE: "transaction"},
                                         t.xmin_horizon_age_seconds),
        ),
        AlertRule(
            name="AwaIdleInTransaction",
            severity="warning",
            expr=(f"max({selector(DB_TXN_OLDEST, **{TXN_STATE: '=' + IDLE_IN_TRANSACTION})}) > "
                  f"{num(t.idle_in_transaction_seconds)}"),
            for_="2m",
            summary="A session sits idle inside an open transaction.",
            description=(
                "A session has been idle in transaction for {{ $value | humanizeDuration }}: it "
                "holds its locks and pins the xmin horizon until it commits or is terminated."),
            runbook_check="mvcc-horizon",
            cases=lambda r: [
                RuleCase({selector(DB_TXN_OLDEST, **{TXN_STATE: "=" + IDLE_IN_TRANSACTION}):
                          constant(2 * t.idle_in_transaction_seconds + 60, r.for_minutes + 5)},
                         r.for_minutes + 3,
                         (Expected({}, 2 * t.idle_in_transaction_seconds + 60),)),
                # a long *active* transaction is the horizon alert's business, not this one
                RuleCase({selector(DB_TXN_OLDEST, **{TXN_STATE: "=active"}):
                          constant(2 * t.idle_in_transaction_seconds + 60, r.for_minutes + 5)},
                         r.for_minutes + 3),
            ],
        ),
        AlertRule(
            name="AwaDeadTuplesGrowing",
            severity="warning",
            expr=(
                f"(max by ({TABLE}) ({DB_DEAD_TUPLES}) > {num(t.dead_tuples_min)})\n"
                f"and on ({TABLE})\n"
                f"(\n"
                f"  max by ({TABLE}) ({DB_DEAD_TUPLES})\n"
                f"  / (max by ({TABLE}) ({DB_DEAD_TUPLES}) + max by ({TABLE}) ({DB_LIVE_TUPLES}))\n"
                f"  > {num(t.dead_tuple_ratio)}\n"
                f")\n"
                f"and on ({TABLE})\n"
                f"(max by ({TABLE}) (delta({DB_DEAD_TUPLES}[30m])) > 0)"),
            for_="15m",
            summary="Dead tuples pile up in a queue table.",
            description=(
                "Queue table {{ $labels.awa_db_table }} holds {{ $value | humanize }} dead "
                "tuples and the count keeps rising: autovacuum is not keeping up or the xmin "
                "horizon is pinned."),
            runbook_check="dead-tuples",
            cases=_dead_tuple_cases(t),
        ),
        AlertRule(
            name="AwaUniqueClaimWedged",
            severity="warning",
            expr=f"sum by ({Q}) ({DB_UNIQUE_WEDGED}) > {num(t.unique_wedged_jobs)}",
            for_="5m",
            summary="Running jobs are wedged on a unique claim held by another job.",
            description=(
                "{{ $value | humanize }} running jobs of queue {{ $labels.awa_job_queue }} have "
                "a unique key claimed by another job: rescue cannot move them back to retryable."),
            runbook_check="unique-wedge",
            cases=lambda r: _gauge_cases(r, DB_UNIQUE_WEDGED, {Q: "email"}, t.unique_wedged_jobs),
        ),
        AlertRule(
            name="AwaMaintenanceOverrun",
            severity="warning",
            expr=(f"(sum by ({BRANCH}) (increase({BRANCH_OVERRUN}[15m])) > "
                  f"{num(t.maintenance_overruns_per_15m)})\n"
                  f"and on ({BRANCH})\n"
                  f"(\n"
                  f"  sum by ({BRANCH}) (increase({BRANCH_OVERRUN}[15m]))\n"
                  f"  / sum by ({BRANCH}) (increase({BRANCH_PASSES}[15m]))\n"
                  f"  > {num(t.maintenance_overrun_ratio)}\n"
                  f")"),
            for_="15m",
            summary="A maintenance branch keeps overrunning its interval.",
            description=(
                "Maintenance branch {{ $labels.awa_maintenance_branch }} overran its interval "
                "{{ $value | humanize }} times in the last 15 minutes, most of its passes: the "
                "leader falls behind on it (large backlog, slow database or locks)."),
            runbook_check="runtime",
            cases=_overrun_cases(t),
        ),
        AlertRule(
            name="AwaNotificationQueueFilling",
            severity="warning",
            expr=f"max({DB_NOTIFY_USAGE}) > {num(t.notification_queue_usage)}",
            for_="5m",
            summary="The LISTEN/NOTIFY queue is filling up.",
            description=(
                "The notification queue is {{ $value | humanizePercentage }} full: a listening "
                "session is not consuming (often one stuck in a long transaction). When it is "
                "full, every NOTIFY — and so every job insert — fails."),
            runbook_check="cancel-listener",
            cases=lambda r: _gauge_cases(r, DB_NOTIFY_USAGE, {}, t.notification_queue_usage,
                                         fire_value=(1 + t.notification_queue_usage) / 2),
        ),
        AlertRule(
            name="AwaLeaderFlapping",
            severity="info",
            # distinct leaders, not elections: a crash-looping runtime is elected once per
            # process, and a counter born at 1 shows no increase()
            expr=(f"count(max_over_time({LEADER_ACTIVE}[1h]) == 1) - 1 > "
                  f"{num(t.leader_changes_per_hour)}"),
            for_="10m",
            summary="Leadership keeps changing hands.",
            description=(
                "Leadership changed {{ $value | humanize }} times in the last hour: runtimes "
                "restart or lose their leader connection."),
            runbook_check="runtime",
            cases=_leader_cases(t),
        ),
        AlertRule(
            name="AwaDescriptorDrift",
            severity="warning",
            # every runtime exports one info series per descriptor it declares, labelled with
            # the descriptor's hash: more than one hash per queue (or kind) among the scraped,
            # so live, runtimes is drift
            expr=(f"count by ({Q}) (count by ({Q}, {DESCRIPTOR_HASH}) ({QUEUE_INFO})) > 1\n"
                  f"or\n"
                  f"count by ({KIND}) (count by ({KIND}, {DESCRIPTOR_HASH}) ({KIND_INFO})) > 1"),
            for_="30m",
            summary="Live runtimes disagree about a queue or job-kind descriptor.",
            description=(
                "Live runtimes declare {{ $value | humanize }} different descriptors for "
                "{{ $labels.awa_job_queue }}{{ $labels.awa_job_kind }} (a queue or job kind): "
                "two revisions of the worker code run at once, longer than a rollout takes."),
            runbook_check="descriptors",
            cases=_descriptor_drift_cases,
        ),
        AlertRule(
            name="AwaPruneStalled",
            severity="warning",
            expr=(f"max by ({RING}, {BLOCKER}) "
                  f"({selector(PRUNE_BLOCKED_AGE, **{BLOCKER: NOT_RETENTION})})\n"
                  f"> {num(t.prune_blocked_seconds)}"),
            for_="5m",
            summary="Queue-storage prune cannot reclaim a sealed partition.",
            description=(
                "A sealed slot of the {{ $labels.awa_ring }} ring has been held by "
                "{{ $labels.awa_prune_blocker }} for {{ $value | humanizeDuration }}: prune "
                "cannot truncate it, so its rows (and their dead tuples) stay and the ring "
                "cannot rotate past it."),
            runbook_check="dead-tuples",
            cases=_prune_stalled_cases(t),
        ),
        AlertRule(
            name="AwaRingWrapPressure",
            severity="warning",
            expr=(f"sum by ({RING}) "
                  f"(increase({selector(ROTATE_SKIPPED, **{BLOCKER: NOT_RETENTION})}[15m]))\n"
                  f"/\n"
                  f"sum by ({RING}) (increase({ROTATE_ATTEMPTS}[15m]))\n"
                  f"> {num(t.ring_wrap_skip_ratio)}"),
            for_="15m",
            summary="A queue-storage ring keeps failing to rotate.",
            description=(
                "{{ $value | humanizePercentage }} of the rotations of the {{ $labels.awa_ring }} "
                "ring in the last 15 minutes found its next slot still held by live work: the "
                "ring has wrapped onto unpruned history and every write piles into its current "
                "slot."),
            runbook_check="dead-tuples",
            cases=_wrap_pressure_cases(t),
        ),
        AlertRule(
            name="AwaCronNotFiring",
            severity="warning",
            expr=f"max by ({CRON}) ({DB_CRON_OVERDUE}) > {num(t.cron_overdue_seconds)}",
            # the leader fires a due slot within one cron evaluation (1 s); after a leader
            # failover (an election interval, 10 s) it fires the missed slot at once
            for_="5m",
            summary="A cron schedule is not firing.",
            description=(
                "Cron schedule {{ $labels.awa_cron_name }} has a fire time that was not enqueued "
                "for {{ $value | humanizeDuration }}: no leader, or the leader cannot evaluate "
                "its stored expression, or its cron pass fails."),
            runbook_check="cron",
            cases=lambda r: _gauge_cases(r, DB_CRON_OVERDUE, {CRON: "nightly-report"},
                                         t.cron_overdue_seconds),
        ),
        AlertRule(
            name="AwaReplicationSlotRetainingWal",
            severity="warning",
            expr=(f"max by ({SLOT}) ({selector(DB_SLOT_WAL, **{SLOT_ACTIVE: '=false'})}) > "
                  f"{num(t.inactive_slot_wal_bytes)}"),
            # a standby restarting or re-syncing reconnects within minutes
            for_="15m",
            summary="An inactive replication slot keeps WAL on the primary.",
            description=(
                "Replication slot {{ $labels.awa_db_replication_slot }} has no consumer and "
                "keeps {{ $value | humanize1024 }}B of WAL, growing with every write until its "
                "consumer returns or the slot is dropped; a full WAL disk stops the server."),
            runbook_check="mvcc-horizon",
            cases=lambda r: _slot_wal_cases(r, t.inactive_slot_wal_bytes),
        ),
        AlertRule(
            name="AwaExporterDown",
            severity="warning",
            expr=f"max({DB_SCRAPE_SUCCESS}) < 1 or absent({DB_SCRAPE_SUCCESS})",
            for_="5m",
            summary="The awa-ops exporter is down or cannot query the database.",
            description=(
                "The awa-ops exporter check returned {{ $value | humanize }} (0: it is scraped "
                "but its database queries fail; 1: no exporter is scraped at all): the "
                "database-side alerts (no runtime, no leader, heartbeats, horizon, dead tuples) "
                "cannot fire."),
            runbook_check="schema",
            cases=lambda r: [
                RuleCase({DB_SCRAPE_SUCCESS: constant(0, r.for_minutes + 5)}, r.for_minutes + 3,
                         (Expected({}, 0),)),
                RuleCase({DB_RUNTIMES_LIVE: constant(1, r.for_minutes + 5)}, r.for_minutes + 3,
                         (Expected({}, 1),)),
                RuleCase({DB_SCRAPE_SUCCESS: constant(1, r.for_minutes + 5)}, r.for_minutes + 3),
            ],
        ),
    ]
    return [dataclasses.replace(rule, for_=t.for_overrides.get(rule.name, rule.for_))
            for rule in rules]


def recent_increase(counter: str, by: tuple[str, ...], window: str, presence: str) -> str:
    """Increase over ``window`` that also counts counters born inside it.

    A counter series appears at its first increment, a value increase() never
    sees; a series absent ``window`` ago (while ``presence`` was scraped, so
    this is not a fresh Prometheus) counts from zero.
    """
    group = ", ".join(by)
    return (f"  (\n"
            f"    sum by ({group}) (increase({counter}[{window}]))\n"
            f"    and on ({group}) sum by ({group}) ({counter} offset {window})\n"
            f"  )\n"
            f"  or\n"
            f"  (\n"
            f"    sum by ({group}) ({counter})\n"
            f"    unless on ({group}) sum by ({group}) ({counter} offset {window})\n"
            f"  )\n"
            f"  and on () (count({presence} offset {window}) > 0)")


def gauge_growth(gauge: str, by: tuple[str, ...], window: str, presence: str) -> str:
    """How much a gauge grew over ``window``; delta() would miss series born inside it.

    A series absent ``window`` ago counts from zero, provided ``presence``
    reported then (otherwise Prometheus simply has no history yet).
    """
    group = ", ".join(by)
    return (f"sum by ({group}) ({gauge})\n"
            f"- (\n"
            f"  sum by ({group}) ({gauge} offset {window})\n"
            f"  or\n"
            f"  0 * sum by ({group}) ({gauge}) and on () (max({presence} offset {window}) > 0)\n"
            f")")


def _labels_selector(metric: str, labels: dict[str, str]) -> str:
    return selector(metric, **{k: "=" + v for k, v in labels.items()})


def _gauge_cases(rule: AlertRule, metric: str, labels: dict[str, str], threshold: float,
                 fire_value: float | None = None) -> list[RuleCase]:
    """A gauge above its threshold fires; at or below it does not."""
    minutes = rule.for_minutes + 5
    fire = fire_value if fire_value is not None else 2 * threshold + 60
    series = _labels_selector(metric, labels)
    return [
        RuleCase({series: constant(fire, minutes)}, rule.for_minutes + 3,
                 (Expected(dict(labels), fire),)),
        RuleCase({series: constant(threshold, minutes)}, rule.for_minutes + 3),
    ]


def _slot_wal_cases(rule: AlertRule, threshold: float) -> list[RuleCase]:
    """An inactive slot past the threshold fires, named; an active one keeping as much (a
    lagging consumer still reads it), or an inactive one at the threshold, does not."""
    minutes = rule.for_minutes + 5
    fire = 2 * threshold
    inactive = {SLOT: "standby_eu_1", SLOT_ACTIVE: "false"}
    active = {SLOT: "standby_eu_2", SLOT_ACTIVE: "true"}
    return [
        RuleCase({_labels_selector(DB_SLOT_WAL, inactive): constant(fire, minutes),
                  _labels_selector(DB_SLOT_WAL, active): constant(fire, minutes)},
                 rule.for_minutes + 3, (Expected({SLOT: "standby_eu_1"}, fire),)),
        RuleCase({_labels_selector(DB_SLOT_WAL, inactive): constant(threshold, minutes)},
                 rule.for_minutes + 3),
    ]


def _increase_cases(rule: AlertRule, metric: str, labels: dict[str, str],
                    by_labels: dict[str, str], threshold: float, window_minutes: int,
                    start: float = 0, presence: str | None = None) -> list[RuleCase]:
    """A counter (or growing gauge) rising by twice the threshold per window fires; half does not.

    With ``presence`` (the rule counts series born inside the window): a series that appears
    with twice the threshold fires; one that was there before Prometheus' history does not.
    """
    minutes = 2 * window_minutes + rule.for_minutes + 5
    at = window_minutes + rule.for_minutes + 3
    series = _labels_selector(metric, labels)
    fire = 2 * threshold
    cases = [
        RuleCase({series: linear(fire / window_minutes, minutes, start)}, at,
                 (Expected(dict(by_labels), fire),)),
        RuleCase({series: linear(threshold / 2 / window_minutes, minutes, start)}, at),
    ]
    if presence is None:
        return cases
    born = window_minutes + 2
    if rule.for_minutes + 1 < window_minutes - 2:  # it can fire before the series ages out
        cases.append(RuleCase(
            {presence: constant(1, minutes), series: f"_x{born} {constant(fire, minutes - born)}"},
            born + rule.for_minutes + 1, (Expected(dict(by_labels), fire),)))
    # a fresh Prometheus sees an old total, not a burst
    cases.append(RuleCase({presence: constant(1, minutes), series: constant(fire, minutes)},
                          rule.for_minutes + 2))
    return cases


def _leader_cases(t: Thresholds) -> Callable[[AlertRule], list[RuleCase]]:
    def cases(rule: AlertRule) -> list[RuleCase]:
        leaders = int(t.leader_changes_per_hour) + 2
        at = leaders + rule.for_minutes + 2
        minutes = at + 5
        # runtime i leads during minute i only: one leader change per minute
        one_each = {_labels_selector(LEADER_ACTIVE, {"instance": f"runtime-{i}:9464"}):
                    (f"_x{i} " if i else "") + f"1 {constant(0, minutes - i - 1)}"
                    for i in range(leaders)}
        steady = {_labels_selector(LEADER_ACTIVE, {"instance": "runtime-0:9464"}):
                  constant(1, minutes),
                  _labels_selector(LEADER_ACTIVE, {"instance": "runtime-1:9464"}):
                  constant(0, minutes)}
        return [RuleCase(one_each, at, (Expected({}, leaders - 1),)),
                RuleCase(steady, at)]
    return cases





def _overrun_cases(t: Thresholds) -> Callable[[AlertRule], list[RuleCase]]:
    def cases(rule: AlertRule) -> list[RuleCase]:
        minutes = 15 + rule.for_minutes + 10
        at = 15 + rule.for_minutes + 5
        labels = {BRANCH: "rescue"}
        overruns = _labels_selector(BRANCH_OVERRUN, labels)
        passes = _labels_selector(BRANCH_PASSES, labels)
        many = 2 * t.maintenance_overruns_per_15m / 15  # per minute: twice the threshold
        every = many / max(t.maintenance_overrun_ratio, 0.01) / 2  # passes: ratio x 2 overrun
        return [
            RuleCase({overruns: linear(many, minutes), passes: linear(every, minutes)}, at,
                     (Expected(labels, 2 * t.maintenance_overruns_per_15m),)),
            # as many overruns, but among a fast branch's thousands of passes: noise
            RuleCase({overruns: linear(many, minutes), passes: linear(240, minutes)}, at),
            # every pass overruns, but too few of them
            RuleCase({overruns: linear(t.maintenance_overruns_per_15m / 30, minutes),
                      passes: linear(t.maintenance_overruns_per_15m / 30, minutes)}, at),
        ]
    return cases


def _descriptor_drift_cases(rule: AlertRule) -> list[RuleCase]:
    """Two runtimes with different hashes fire; equal hashes, or a rollout that ends, do not."""
    minutes = rule.for_minutes + 15
    at = rule.for_minutes + 10

    def info(metric: str, label: str, name: str, runtime: int, digest: str) -> str:
        return _labels_selector(metric, {label: name, DESCRIPTOR_HASH: digest,
                                         OWNER: "team-" + digest,
                                         "instance": f"runtime-{runtime}:9464"})

    old = info(QUEUE_INFO, Q, "email", 0, "a1")
    new = info(QUEUE_INFO, Q, "email", 1, "b2")
    same = info(QUEUE_INFO, Q, "email", 1, "a1")
    return [
        RuleCase({old: constant(1, minutes), new: constant(1, minutes)}, at,
                 (Expected({Q: "email"}, 2),)),
        RuleCase({info(KIND_INFO, KIND, "send_email", 0, "a1"): constant(1, minutes),
                  info(KIND_INFO, KIND, "send_email", 1, "b2"): constant(1, minutes)}, at,
                 (Expected({KIND: "send_email"}, 2),)),
        RuleCase({old: constant(1, minutes), same: constant(1, minutes)}, at),
        # a rollout: the old revision drains within ten minutes, well under for:
        RuleCase({old: constant(1, 10), new: constant(1, minutes)}, at),
    ]


def _prune_stalled_cases(t: Thresholds) -> Callable[[AlertRule], list[RuleCase]]:
    def cases(rule: AlertRule) -> list[RuleCase]:
        minutes = rule.for_minutes + 5
        at = rule.for_minutes + 3
        fire = 2 * t.prune_blocked_seconds + 60

        def age(blocker: str) -> str:
            return _labels_selector(PRUNE_BLOCKED_AGE, {RING: "queue", BLOCKER: blocker})

        return [
            RuleCase({age("lease"): constant(fire, minutes)}, at,
                     (Expected({RING: "queue", BLOCKER: "lease"}, fire),)),
            RuleCase({age("lease"): constant(t.prune_blocked_seconds, minutes)}, at),
            # terminal rows inside their retention hold the slot by design
            RuleCase({age(metrics.PRUNE_BLOCKER_RETENTION): constant(fire, minutes)}, at),
        ]
    return cases


def _wrap_pressure_cases(t: Thresholds) -> Callable[[AlertRule], list[RuleCase]]:
    def cases(rule: AlertRule) -> list[RuleCase]:
        minutes = 15 + rule.for_minutes + 10
        at = 15 + rule.for_minutes + 5
        attempts = _labels_selector(ROTATE_ATTEMPTS, {RING: "lease"})

        def skipped(blocker: str) -> str:
            return _labels_selector(ROTATE_SKIPPED, {RING: "lease", BLOCKER: blocker})

        # one rotation attempt a minute (the cleanup interval); per mille skipped
        high = min(1000, math.floor(t.ring_wrap_skip_ratio * 1000) + 200)
        low = max(0, math.ceil(t.ring_wrap_skip_ratio * 1000) - 200)
        return [
            RuleCase({attempts: linear(1000, minutes), skipped("lease"): linear(high, minutes)},
                     at, (Expected({RING: "lease"}, high / 1000),)),
            RuleCase({attempts: linear(1000, minutes), skipped("lease"): linear(low, minutes)},
                     at),
            # a ring full of retained terminal history is expected, not pressure
            RuleCase({attempts: linear(1000, minutes),
                      skipped(metrics.PRUNE_BLOCKER_RETENTION): linear(1000, minutes)}, at),
        ]
    return cases


def _error_rate_cases(t: Thresholds) -> Callable[[AlertRule], list[RuleCase]]:
    def cases(rule: AlertRule) -> list[RuleCase]:
        minutes = rule.for_minutes + 10
        at = rule.for_minutes + 7
        failed = _labels_selector(FAILED, {KIND: "send_email", Q: "email", TERMINAL: "false"})
        completed = _labels_selector(COMPLETED, {KIND: "send_email", Q: "email"})
        # per minute out of 100 finished attempts: above and below the threshold
        fail_high = min(100, math.floor(t.error_ratio * 100) + 20)
        fail_low = max(0, math.ceil(t.error_ratio * 100) - 5)
        return [
            RuleCase({failed: linear(fail_high, minutes),
                      completed: linear(100 - fail_high, minutes)},
                     at, (Expected({Q: "email"}, fail_high / 100),)),
            # every attempt fails and nothing completes: still an error rate, not a gap
            RuleCase({failed: linear(60, minutes)}, at, (Expected({Q: "email"}, 1),)),
            RuleCase({failed: linear(fail_low, minutes),
                      completed: linear(100 - fail_low, minutes)},
                     at),
        ]
    return cases


def _throughput_cases(t: Thresholds) -> Callable[[AlertRule], list[RuleCase]]:
    def cases(rule: AlertRule) -> list[RuleCase]:
        healthy_minutes = 70
        at = healthy_minutes + 10 + rule.for_minutes + 3
        total = at + 5
        completed = _labels_selector(COMPLETED, {KIND: "send_email", Q: "email"})
        depth = _labels_selector(DB_DEPTH, {Q: "email", STATE: AVAILABLE})
        backlog = constant(2 * t.throughput_collapse_min_backlog + 10, total)
        stalled = (f"{linear(60, healthy_minutes)} "
                   f"{constant(60 * healthy_minutes, total - healthy_minutes - 1)}")
        return [
            RuleCase({completed: stalled, depth: backlog}, at, (Expected({Q: "email"}, 0),)),
            RuleCase({completed: linear(60, total), depth: backlog}, at),
            # stalled but nothing is waiting: an idle queue is fine
            RuleCase({completed: stalled, depth: constant(0, total)}, at),
        ]
    return cases


def _dead_tuple_cases(t: Thresholds) -> Callable[[AlertRule], list[RuleCase]]:
    def cases(rule: AlertRule) -> list[RuleCase]:
        minutes = 30 + rule.for_minutes + 10
        at = 30 + rule.for_minutes + 5
        dead = _labels_selector(DB_DEAD_TUPLES, {TABLE: "jobs_hot"})
        live = _labels_selector(DB_LIVE_TUPLES, {TABLE: "jobs_hot"})
        start = 2 * t.dead_tuples_min
        step = max(1.0, math.ceil(t.dead_tuples_min / 100))
        # dead tuples ten times the live rows: the ratio clears any threshold below 0.9
        live_rows = constant(max(1.0, (start + step * minutes) / 10), minutes)
        return [
            RuleCase({dead: linear(step, minutes, start), live: live_rows}, at,
                     (Expected({TABLE: "jobs_hot"}, start + step * at),)),
            # many dead tuples, but vacuum keeps the count flat
            RuleCase({dead: constant(start, minutes), live: live_rows}, at),
        ]
    return cases


# --- rendering ---------------------------------------------------------------
def runbook_url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + "/" + path if base_url else path


def rules_document(rules: list[AlertRule], base_url: str) -> dict[str, Any]:
    return {"groups": [{
        "name": GROUP_NAME,
        "rules": [{
            "alert": rule.name,
            "expr": rule.expr,
            "for": rule.for_,
            "labels": {"severity": rule.severity},
            "annotations": {
                "summary": rule.summary,
                "description": rule.description,
                "runbook_url": runbook_url(base_url, rule.runbook_path),
            },
        } for rule in rules],
    }]}


def unit_tests_document(rules: list[AlertRule], base_url: str,
                        rules_file: str = RULES_FILE) -> dict[str, Any]:
    tests = []
    for rule in rules:
        for case in rule.cases(rule):
            tests.append({
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
                "alert_rule_test": [{
                    "eval_time": f"{case.eval_minutes}m",
                    "alertname": rule.name,
                    "exp_alerts": [{
                        "exp_labels": {"severity": rule.severity, **expected.labels},
                        "exp_annotations": {
                            "summary": rule.summary,
                            "description": render_template(rule.description, expected.labels,
                                                           expected.value),
                            "runbook_url": runbook_url(base_url, rule.runbook_path),
                        },
                    } for expected in case.firing],
                }],
            })
    return {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": tests}


def readme(rules: list[AlertRule], t: Thresholds) -> str:
    """alerts/README.md: what ships, how to load it, and every knob with its current value."""
    lines = [
        "# awa alert rules",
        "",
        "Generated by `awa-ops generate` from `awa/metrics.py` and `awa_ops/generate/alerts.py`;",
        "do not edit by hand. Load the rules into Prometheus and check them with promtool:",
        "",
        "```yaml",
        "rule_files:",
        f"  - /etc/prometheus/awa/{RULES_FILE}",
        "```",
        "",
        "```",
        f"promtool check rules {RULES_FILE}",
        f"promtool test rules {RULES_TEST_FILE}",
        "```",
        "",
        "Database-side alerts need `awa-ops exporter` scraped by the same Prometheus;",
        "runtime-side ones need each worker's metrics endpoint (`awa worker --metrics-addr`).",
        "",
        "| Alert | Severity | For | Summary |",
        "|---|---|---|---|",
    ]
    lines += [f"| [{r.name}](../{r.runbook_path}) | {r.severity} | {r.for_} | {r.summary} |"
              for r in rules]
    lines += [
        "",
        "## Tuning",
        "",
        "`awa-ops generate --thresholds FILE` regenerates the rules and their unit tests",
        "from a YAML mapping of any of these keys (values shown are the ones in this build),",
        "plus `for:` durations per alert:",
        "",
        "```yaml",
    ]
    lines += [f"{f.name}: {num(getattr(t, f.name))}" for f in dataclasses.fields(Thresholds)
              if f.name != "for_overrides"]
    lines += ["for:"]
    lines += [f"  {r.name}: {r.for_}" for r in rules]
    lines += [
        "```",
        "",
        "`--runbook-base-url` sets where `runbook_url` points (default: empty, so links are",
        "repository-relative, e.g. `runbooks/alerts/AwaNoLeader.md`).",
        "",
    ]
    return "\n".join(lines)


# --- time-scaled rules (the incident matrix) ---------------------------------------
# Thresholds that are durations: scaled with the rules' windows and for:.
TIME_THRESHOLDS = ("queue_lag_seconds", "heartbeat_age_seconds", "xmin_horizon_age_seconds",
                   "idle_in_transaction_seconds", "prune_blocked_seconds",
                   "cron_overdue_seconds")
_RANGE = re.compile(r"\[(\d+[smhdw])\]")
_OFFSET = re.compile(r"offset (\d+[smhdw])")


def _scaled_duration(text: str, factor: float) -> str:
    """``text`` (a PromQL duration) times ``factor``, in whole seconds, at least 1 s."""
    return f"{max(1, round(duration_seconds(text) * factor))}s"


def scaled_rules(t: Thresholds, factor: float) -> list[AlertRule]:
    """The same rules on a faster clock, for a runtime whose intervals are all scaled by
    ``factor`` (the incident matrix runs workers with every interval x 1/30 and these rules
    with ``factor`` = 1/30): every ``for:``, range window, offset and duration threshold is
    multiplied by ``factor``; counts and ratios stay.  One source: ``build_rules``."""
    scaled_t = dataclasses.replace(t, **{name: getattr(t, name) * factor
                                         for name in TIME_THRESHOLDS})
    out = []
    for rule in build_rules(scaled_t):
        expr = _RANGE.sub(lambda m: f"[{_scaled_duration(m.group(1), factor)}]", rule.expr)
        expr = _OFFSET.sub(lambda m: f"offset {_scaled_duration(m.group(1), factor)}", expr)
        out.append(dataclasses.replace(rule, expr=expr,
                                       for_=_scaled_duration(rule.for_, factor)))
    return out
