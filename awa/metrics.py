"""The metric catalogue: the one place every metric name, label and help text is written.

Two sections, one shape (``MetricSpec``):

* ``RUNTIME_METRICS`` — recorded by the runtime, maintenance, producer and
  callbacks through OpenTelemetry instruments.  ``METRICS`` (an ``AwaMetrics``)
  creates one instrument per entry, as an attribute named by the OTel name
  without ``awa.`` and with dots as underscores (``awa.job.completed`` ->
  ``METRICS.job_completed``).
* ``DATABASE_METRICS`` — computed from the database by ``awa-ops exporter``
  (a Prometheus collector, no OTel), so alerts keep working when every worker
  is dead.  Their names all start with ``awa.db.`` (Prometheus ``awa_db_*``),
  so they never collide with runtime metrics.

The dashboard and alert generators read both tuples; ``prometheus_name``
gives the name a metric is scraped as (dots -> underscores, ``_seconds`` for
second-valued metrics, ``_total`` on counters), ``prometheus_label`` the
label of an attribute key (``awa.job.queue`` -> ``awa_job_queue``).

Instruments are created on a meter from the *global* MeterProvider.  Before
``awa.telemetry`` (or the application) installs an SDK provider, that meter is
OpenTelemetry's proxy meter: recording costs one attribute check and goes
nowhere; once a provider is set, the same instrument objects forward to real
ones.  So modules may bind ``METRICS.job_completed`` at import time; but a
measurement taken before the provider exists is dropped, so a one-off gauge
(``runtime.info``) must be set after the exporters are up.

Recording rule (issue 8): a counter is incremented exactly when its
transition is applied — after the guarded write returned its rows — and per
batch (``add(n)``) on the hot path.  Use ``job_attributes`` /
``queue_attributes`` for the attribute dicts: they are cached, so the hot path
does not build a dict per call (never mutate what they return).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from opentelemetry import metrics as otel_metrics

# --- attribute keys ---------------------------------------------------------
ATTR_KIND = "awa.job.kind"
ATTR_QUEUE = "awa.job.queue"
ATTR_STATE = "awa.job.state"
ATTR_TERMINAL = "awa.job.terminal"  # bool: the failure ended the job (failed / DLQ)
ATTR_RESCUE_KIND = "awa.rescue.kind"
ATTR_DLQ_REASON = "awa.dlq.reason"
ATTR_DISPATCH_REASON = "awa.dispatch.reason"
ATTR_BRANCH = "awa.maintenance.branch"
ATTR_CRON_NAME = "awa.cron.name"
ATTR_CALLBACK_OUTCOME = "awa.callback.outcome"
ATTR_RUNTIME_VERSION = "awa.runtime.version"
ATTR_RUNTIME_INSTANCE = "awa.runtime.instance_id"
ATTR_RUNTIME_HOST = "awa.runtime.hostname"
# database-side (awa-ops exporter) attribute keys
ATTR_DB_TABLE = "awa.db.table"
ATTR_DB_TXN_STATE = "awa.db.txn_state"
ATTR_DB_XMIN_SOURCE = "awa.db.xmin_source"
# span-only attributes (handler spans, awa.telemetry)
ATTR_ATTEMPT = "awa.job.attempt"
ATTR_JOB_ID = "awa.job.id"
ATTR_OUTCOME = "awa.job.outcome"

# --- attribute values with a closed set -----------------------------------
DISPATCH_REASON_NOTIFY = "notify"
DISPATCH_REASON_CAPACITY = "capacity"
DISPATCH_REASON_POLL = "poll"
DISPATCH_REASONS = (DISPATCH_REASON_NOTIFY, DISPATCH_REASON_CAPACITY, DISPATCH_REASON_POLL)

RESCUE_KIND_HEARTBEAT = "heartbeat"
RESCUE_KIND_DEADLINE = "deadline"
RESCUE_KIND_CALLBACK = "callback"
RESCUE_KINDS = (RESCUE_KIND_HEARTBEAT, RESCUE_KIND_DEADLINE, RESCUE_KIND_CALLBACK)

XMIN_SOURCES = (
    "transaction",  # backend_xmin / backend_xid of a session (long or idle-in-transaction)
    "replication_slot",  # pg_replication_slots.xmin
    "replication_slot_catalog",  # pg_replication_slots.catalog_xmin
    "standby_feedback",  # pg_stat_replication.backend_xmin
    "prepared_transaction",  # pg_prepared_xacts
)

# --- histogram bucket boundaries -------------------------------------------
# The SDK's default boundaries are scaled for milliseconds; job waits and
# durations live between about 1 ms and a minute.
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 5000, 10000)

Kind = Literal["counter", "histogram", "gauge", "updown"]
Source = Literal["runtime", "database"]

UNIT_SECONDS = "s"


@dataclass(frozen=True)
class MetricSpec:
    """One catalogue entry.

    ``name`` is the OTel name (dotted); ``attributes`` the OTel attribute keys
    (Prometheus labels after ``prometheus_label``); ``buckets`` the explicit
    boundaries of a histogram.  ``source`` tells who produces it: OTel
    instruments in the runtime, or the database exporter.
    """

    name: str
    kind: Kind
    unit: str
    attributes: tuple[str, ...]
    help: str
    source: Source = "runtime"
    buckets: tuple[float, ...] | None = None

    @property
    def prometheus(self) -> str:
        return prometheus_name(self)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(prometheus_label(key) for key in self.attributes)

    @property
    def attribute_name(self) -> str:
        """The ``AwaMetrics`` attribute of this entry's instrument."""
        return self.name.removeprefix("awa.").replace(".", "_")


def _counter(name, unit, attributes, help):
    return MetricSpec(name, "counter", unit, tuple(attributes), help)


def _updown(name, unit, attributes, help):
    return MetricSpec(name, "updown", unit, tuple(attributes), help)


def _gauge(name, unit, attributes, help, source: Source = "runtime"):
    return MetricSpec(name, "gauge", unit, tuple(attributes), help, source)


def _seconds_histogram(name, attributes, help):
    return MetricSpec(name, "histogram", UNIT_SECONDS, tuple(attributes), help,
                      buckets=SECONDS_BUCKETS)


def _size_histogram(name, unit, attributes, help):
    return MetricSpec(name, "histogram", unit, tuple(attributes), help,
                      buckets=BATCH_SIZE_BUCKETS)


_JOB = (ATTR_KIND, ATTR_QUEUE)
_Q = (ATTR_QUEUE,)

# --- section 1: runtime metrics (OTel instruments) --------------------------
RUNTIME_METRICS: tuple[MetricSpec, ...] = (
    # jobs: one counter per applied transition
    _counter("awa.job.claimed", "{job}", _JOB,
             "Jobs claimed for execution (running, attempt+1)."),
    _counter("awa.job.completed", "{job}", _JOB,
             "Attempts whose completion was written (state completed)."),
    _counter("awa.job.failed", "{job}", _JOB + (ATTR_TERMINAL,),
             "Attempts that ended in an error and were written back; awa.job.terminal=true "
             "when the job ended (failed or moved to the DLQ), false when it will be retried."),
    _counter("awa.job.retried", "{job}", _JOB,
             "Attempts written back as retryable (handler error or RetryAfter)."),
    _counter("awa.job.cancelled", "{job}", _JOB,
             "Jobs moved to cancelled (handler Cancel, admin cancel, or rescued as duplicate)."),
    _counter("awa.job.snoozed", "{job}", _JOB,
             "Attempts written back as scheduled by Snooze (the attempt is not spent)."),
    _counter("awa.job.waiting_external", "{job}", _JOB,
             "Attempts parked in waiting_external by WaitForCallback."),
    _updown("awa.job.in_flight", "{job}", _Q,
            "Handlers currently running in this runtime."),
    _seconds_histogram("awa.job.duration", _JOB,
                       "Handler execution time, claim to outcome, in seconds."),
    _seconds_histogram("awa.job.wait_duration", _JOB,
                       "Time from a job becoming runnable (created_at or run_at, the later) "
                       "to its claim, in seconds."),
    _counter("awa.job.dlq_moved", "{job}", _JOB + (ATTR_DLQ_REASON,),
             "Jobs moved into the dead-letter queue, by reason."),
    _counter("awa.job.dlq_retried", "{job}", _Q,
             "Dead-letter entries moved back to available by an operator."),
    _counter("awa.job.dlq_purged", "{job}", _Q,
             "Dead-letter entries deleted (by an operator or retention)."),
    _gauge("awa.job.dlq_depth", "{job}", _Q,
           "Dead-letter entries per queue; published by the leader only."),
    # queues (leader only, so a fleet does not multiply them)
    _gauge("awa.queue.depth", "{job}", _Q + (ATTR_STATE,),
           "Jobs per queue and state (available, running, waiting_external, scheduled, "
           "retryable, failed; not the unbounded completed/cancelled); published by the leader "
           "only."),
    _gauge("awa.queue.lag", UNIT_SECONDS, _Q,
           "Age of the oldest available job per queue, in seconds; published by the leader only."),
    # dispatch
    _counter("awa.dispatch.claim_batches", "{batch}", _Q,
             "Claim statements that returned at least one job."),
    _size_histogram("awa.dispatch.claim_batch_size", "{job}", _Q,
                    "Jobs per non-empty claim statement."),
    _seconds_histogram("awa.dispatch.claim_duration", _Q,
                       "Time of one claim statement, in seconds."),
    _counter("awa.dispatch.wakeups", "{wakeup}", _Q + (ATTR_DISPATCH_REASON,),
             "Dispatcher wake-ups by reason: notify (LISTEN), capacity (a permit freed), "
             "poll (the poll interval, when notifications were lost or absent)."),
    _counter("awa.dispatch.empty_claims", "{claim}", _Q,
             "Claim statements that found nothing to claim."),
    _counter("awa.dispatch.rate_limited", "{claim}", _Q,
             "Claims held back because the queue's token bucket was empty."),
    # completion batcher
    _counter("awa.completion.flushes", "{flush}", (),
             "Completion batch writes (one statement per outcome group)."),
    _size_histogram("awa.completion.flush_batch_size", "{job}", (),
                    "Outcomes written per completion flush."),
    _seconds_histogram("awa.completion.flush_duration", (),
                       "Time of one completion flush, in seconds."),
    _counter("awa.completion.stale_ignored", "{job}", _Q,
             "Outcome, heartbeat or progress writes that matched no row for their "
             "(id, run_lease): the attempt was rescued, cancelled or superseded; ignored."),
    # heartbeats
    _counter("awa.heartbeat.batches", "{batch}", (),
             "Heartbeat batch writes (one statement for all running attempts)."),
    # maintenance (leader)
    _counter("awa.maintenance.rescues", "{job}", _Q + (ATTR_RESCUE_KIND,),
             "Attempts rescued by maintenance, by kind: heartbeat (stale), deadline "
             "(hard deadline exceeded), callback (callback timed out)."),
    _counter("awa.maintenance.promote_batches", "{batch}", (),
             "Promotion statements that moved at least one scheduled/retryable job to available."),
    _counter("awa.maintenance.promoted", "{job}", _Q,
             "Jobs promoted from scheduled/retryable to available."),
    _seconds_histogram("awa.maintenance.promote_duration", (),
                       "Time of one promotion statement, in seconds."),
    _seconds_histogram("awa.maintenance.branch.duration", (ATTR_BRANCH,),
                       "Time of one pass of a maintenance branch (promote, rescue, cleanup, "
                       "cron, snapshot, ...), in seconds."),
    _counter("awa.maintenance.branch.overrun", "{pass}", (ATTR_BRANCH,),
             "Maintenance passes that took longer than their branch's interval."),
    # leadership
    _counter("awa.leader.elected", "{election}", (),
             "Times this runtime acquired leadership (each one a leader change)."),
    _gauge("awa.leader.active", "{leader}", (),
           "1 while this runtime holds leadership, else 0."),
    # cron
    _counter("awa.cron.fired", "{job}", (ATTR_CRON_NAME,) + _Q,
             "Cron schedules fired: a job was enqueued for a due fire time."),
    # callbacks
    _counter("awa.callback.resolved", "{callback}", _Q + (ATTR_CALLBACK_OUTCOME,),
             "External callbacks applied to a waiting job, by outcome (complete, fail, retry, "
             "resume)."),
    # producer
    _size_histogram("awa.enqueue.batch_size", "{job}", (),
                    "Rows per enqueue call (insert_many / COPY batch)."),
    _seconds_histogram("awa.enqueue.duration", (),
                       "Wall-clock time per enqueue call (insert_many / COPY batch), in seconds."),
    # runtime
    _gauge("awa.runtime.info", "{runtime}", (ATTR_RUNTIME_VERSION, ATTR_RUNTIME_INSTANCE,
                                             ATTR_RUNTIME_HOST),
           "Always 1 for a started runtime; its labels identify it."),
)

# --- section 2: database-side metrics (awa-ops exporter) ---------------------
_TABLE = (ATTR_DB_TABLE,)
DATABASE_METRICS: tuple[MetricSpec, ...] = (
    _gauge("awa.db.queue.depth", "{job}", _Q + (ATTR_STATE,),
           "Jobs per queue and state, counted in the database.", "database"),
    _gauge("awa.db.queue.lag", UNIT_SECONDS, _Q,
           "Age of the oldest available job per queue, in seconds.", "database"),
    _gauge("awa.db.running.oldest_heartbeat_age", UNIT_SECONDS, _Q,
           "Age of the oldest heartbeat among running jobs per queue, in seconds.", "database"),
    _gauge("awa.db.running.heartbeat_stale", "{job}", _Q,
           "Running jobs whose heartbeat is older than the staleness threshold.", "database"),
    _gauge("awa.db.running.deadline_overdue", "{job}", _Q,
           "Running jobs past their hard deadline.", "database"),
    _gauge("awa.db.runtimes.live", "{runtime}", (),
           "Runtime instances seen within their snapshot window and not shutting down.",
           "database"),
    _gauge("awa.db.leader.present", "{leader}", (),
           "1 when a live runtime reports leadership, else 0.", "database"),
    _gauge("awa.db.dlq.depth", "{job}", _Q + (ATTR_DLQ_REASON,),
           "Dead-letter entries per queue and reason.", "database"),
    _gauge("awa.db.unique.wedged", "{job}", _Q,
           "Running jobs whose unique key is claimed by another job (the unique-claim wedge).",
           "database"),
    _gauge("awa.db.transaction.oldest_age", UNIT_SECONDS, (ATTR_DB_TXN_STATE,),
           "Age of the oldest open transaction per backend state (active, idle in "
           "transaction, ...), in seconds.", "database"),
    _gauge("awa.db.xmin_horizon.age", UNIT_SECONDS, (ATTR_DB_XMIN_SOURCE,),
           "How long the oldest holder of each xmin-horizon source has held it, in seconds "
           "(sources without a start time, like replication slots, are reported in xid_age "
           "only).", "database"),
    _gauge("awa.db.xmin_horizon.xid_age", "{transaction}", (ATTR_DB_XMIN_SOURCE,),
           "age() in transactions of the oldest xmin held by each source: transaction, "
           "replication_slot, replication_slot_catalog, standby_feedback, prepared_transaction.",
           "database"),
    _gauge("awa.db.table.dead_tuples", "{tuple}", _TABLE,
           "Dead tuples per queue table (pg_stat_user_tables.n_dead_tup).", "database"),
    _gauge("awa.db.table.live_tuples", "{tuple}", _TABLE,
           "Live tuples per queue table (pg_stat_user_tables.n_live_tup).", "database"),
    _gauge("awa.db.table.last_autovacuum_age", UNIT_SECONDS, _TABLE,
           "Seconds since the last autovacuum of each queue table.", "database"),
    _gauge("awa.db.notification_queue.usage", "1", (),
           "Fraction (0..1) of the LISTEN/NOTIFY queue in use (pg_notification_queue_usage()).",
           "database"),
    _gauge("awa.db.exporter.scrape_duration", UNIT_SECONDS, (),
           "Time the exporter spent computing this scrape, in seconds.", "database"),
    _gauge("awa.db.exporter.scrape_success", "{scrape}", (),
           "1 when every query of this scrape succeeded, else 0.", "database"),
)

ALL_METRICS: tuple[MetricSpec, ...] = RUNTIME_METRICS + DATABASE_METRICS

# --- lookup helpers ----------------------------------------------------------
_SANITIZE = re.compile(r"[^a-zA-Z0-9]+")


def prometheus_label(attribute_key: str) -> str:
    """The Prometheus label an OTel attribute key exports as."""
    return _SANITIZE.sub("_", attribute_key)


def prometheus_name(entry: MetricSpec) -> str:
    """The name Prometheus sees (without the histogram's _bucket/_sum/_count)."""
    name = _SANITIZE.sub("_", entry.name)
    if entry.unit == UNIT_SECONDS and not name.endswith("_seconds"):
        name += "_seconds"
    if entry.kind == "counter":
        name += "_total"
    return name


def prometheus_series(entry: MetricSpec) -> tuple[str, ...]:
    """Every series name the entry produces in a scrape."""
    base = prometheus_name(entry)
    if entry.kind == "histogram":
        return (base + "_bucket", base + "_sum", base + "_count")
    return (base,)


def prometheus_type(entry: MetricSpec) -> str:
    """The Prometheus TYPE (an up-down counter is exported as a gauge)."""
    return {"counter": "counter", "histogram": "histogram"}.get(entry.kind, "gauge")


_BY_NAME = {entry.name: entry for entry in ALL_METRICS}
_BY_PROMETHEUS = {prometheus_name(entry): entry for entry in ALL_METRICS}
assert len(_BY_NAME) == len(ALL_METRICS), "duplicate metric name in the catalogue"
assert len(_BY_PROMETHEUS) == len(ALL_METRICS), "duplicate Prometheus name in the catalogue"


def by_name(name: str) -> MetricSpec:
    """Catalogue entry by OTel name (``awa.job.completed``); KeyError when absent."""
    return _BY_NAME[name]


def by_prometheus_name(name: str) -> MetricSpec | None:
    """Catalogue entry for a Prometheus series name (``_bucket``/``_sum``/``_count`` allowed)."""
    if name in _BY_PROMETHEUS:
        return _BY_PROMETHEUS[name]
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            entry = _BY_PROMETHEUS.get(name.removesuffix(suffix))
            if entry is not None and entry.kind == "histogram":
                return entry
    return None


# --- cached attribute sets for the hot path --------------------------------
@lru_cache(maxsize=4096)
def job_attributes(kind: str, queue: str) -> dict[str, str]:
    """``{awa.job.kind, awa.job.queue}``, cached: do not mutate the result."""
    return {ATTR_KIND: kind, ATTR_QUEUE: queue}


@lru_cache(maxsize=1024)
def queue_attributes(queue: str) -> dict[str, str]:
    """``{awa.job.queue}``, cached: do not mutate the result."""
    return {ATTR_QUEUE: queue}


# --- instruments -------------------------------------------------------------
METER_NAME = "awa"


class AwaMetrics:
    """One OTel instrument per runtime catalogue entry, as attributes.

    ``METRICS.job_completed.add(n, job_attributes(kind, queue))``,
    ``METRICS.job_duration.record(seconds, attrs)``, ``METRICS.job_in_flight.add(±n, attrs)``,
    ``METRICS.queue_depth.set(v, attrs)``.
    """

    def __init__(self, meter: Any | None = None) -> None:
        if meter is None:
            meter = otel_metrics.get_meter(METER_NAME)
        self.meter = meter
        for entry in RUNTIME_METRICS:
            setattr(self, entry.attribute_name, _create_instrument(meter, entry))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not instruments: say which exist.
        raise AttributeError(
            f"AwaMetrics has no instrument {name!r}; add it to RUNTIME_METRICS in awa/metrics.py")


def _create_instrument(meter: Any, entry: MetricSpec) -> Any:
    if entry.kind == "counter":
        return meter.create_counter(entry.name, entry.unit, entry.help)
    if entry.kind == "updown":
        return meter.create_up_down_counter(entry.name, entry.unit, entry.help)
    if entry.kind == "gauge":
        return meter.create_gauge(entry.name, entry.unit, entry.help)
    return meter.create_histogram(entry.name, entry.unit, entry.help,
                                  explicit_bucket_boundaries_advisory=entry.buckets)


METRICS = AwaMetrics()
