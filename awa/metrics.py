"""The metric catalogue: the one place every metric name, label and help text is written.

Two sections, one shape (``MetricSpec``):

* ``RUNTIME_METRICS`` — recorded by the runtime, maintenance, producer and
  callbacks through pre-aggregated OpenTelemetry instruments.
  ``awa.instruments.METRICS`` creates one instrument per entry, as an attribute
  named by the OTel name without ``awa.`` and with dots as underscores
  (``awa.job.completed`` -> ``METRICS.job_completed``); ``awa.recording`` turns
  runtime, maintenance, producer and operator events into their updates.
* ``DATABASE_METRICS`` — computed from the database by ``awa-ops exporter``
  (a Prometheus collector, no OTel), so alerts keep working when every worker
  is dead.  Their names all start with ``awa.db.`` (Prometheus ``awa_db_*``),
  so they never collide with runtime metrics.

The dashboard and alert generators read both tuples; ``prometheus_name``
gives the name a metric is scraped as (dots -> underscores, ``_seconds`` for
second-valued metrics, ``_total`` on counters), ``prometheus_label`` the
label of an attribute key (``awa.job.queue`` -> ``awa_job_queue``).

This module holds data only (names, kinds, units, attribute keys and their closed
value sets, help, bucket boundaries) and lookups over it: it imports no OpenTelemetry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

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
# What the runtime's code speaks: "<engine> <layout>" (queue_storage's layout version,
# canonical's schema version), e.g. "queue_storage 8"; two values at once: a rolling upgrade.
ATTR_RUNTIME_LAYOUT = "awa.runtime.layout"
# queue storage: partition rings and what blocks their prune
ATTR_RING = "awa.ring"  # queue | claim | lease
ATTR_PRUNE_BLOCKER = "awa.prune.blocker"  # PRUNE_BLOCKERS
ATTR_STORAGE_ENGINE = "awa.storage.engine"  # canonical | queue_storage
# descriptor info series (awa.queue.info / awa.job_kind.info)
ATTR_DISPLAY_NAME = "awa.descriptor.display_name"
ATTR_OWNER = "awa.descriptor.owner"
ATTR_DOCS_URL = "awa.descriptor.docs_url"
ATTR_TAGS = "awa.descriptor.tags"  # the descriptor's tags joined with ","
ATTR_DESCRIPTOR_HASH = "awa.descriptor.hash"
# database-side (awa-ops exporter) attribute keys
ATTR_DB_TABLE = "awa.db.table"
ATTR_DB_TXN_STATE = "awa.db.txn_state"
ATTR_DB_XMIN_SOURCE = "awa.db.xmin_source"
ATTR_DB_SLOT = "awa.db.replication_slot"
ATTR_DB_SLOT_ACTIVE = "awa.db.replication_slot.active"  # "true" / "false"
# span-only attributes (handler spans, awa.telemetry)
ATTR_ATTEMPT = "awa.job.attempt"
ATTR_JOB_ID = "awa.job.id"
ATTR_OUTCOME = "awa.job.outcome"

# The value of a label whose value is unset (a descriptor field left out, a DLQ entry without
# a reason): series never carry an empty label value (issue 33).  The exporter uses it too.
UNSET_LABEL_VALUE = "none"

# --- attribute values with a closed set -----------------------------------
DISPATCH_REASON_NOTIFY = "notify"
DISPATCH_REASON_CAPACITY = "capacity"
DISPATCH_REASON_POLL = "poll"
DISPATCH_REASONS = (DISPATCH_REASON_NOTIFY, DISPATCH_REASON_CAPACITY, DISPATCH_REASON_POLL)

RESCUE_KIND_HEARTBEAT = "heartbeat"
RESCUE_KIND_DEADLINE = "deadline"
RESCUE_KIND_CALLBACK = "callback"
RESCUE_KINDS = (RESCUE_KIND_HEARTBEAT, RESCUE_KIND_DEADLINE, RESCUE_KIND_CALLBACK)

RINGS = ("queue", "claim", "lease")

# Values a runtime's series are seeded with at start (AwaMetrics.seed_zeros): the small
# closed sets.  (Not the DLQ reasons: with kind x queue they would multiply a worker's
# series by six for an event the exporter's awa_db_dlq_depth already shows.)
SEEDED_VALUES: dict[str, Sequence[Any]] = {
    ATTR_TERMINAL: (False, True), ATTR_DISPATCH_REASON: DISPATCH_REASONS,
    ATTR_RESCUE_KIND: RESCUE_KINDS}
# What held a sealed ring slot that prune could not truncate (the storage
# engine's PRUNE_BLOCKERS): a claimable ready entry, an open claim receipt, a
# lease, terminal rows inside their retention (expected), a lock held by
# another session past prune's lock_timeout.
PRUNE_BLOCKER_RETENTION = "retention"
PRUNE_BLOCKERS = ("ready", "receipt", "lease", PRUNE_BLOCKER_RETENTION, "lock")

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
        """The ``awa.instruments.AwaMetrics`` attribute of this entry's instrument."""
        return self.name.removeprefix("awa.").replace(".", "_")


def _counter(name: str, unit: str, attributes: Iterable[str], help: str) -> MetricSpec:
    return MetricSpec(name, "counter", unit, tuple(attributes), help)


def _updown(name: str, unit: str, attributes: Iterable[str], help: str) -> MetricSpec:
    return MetricSpec(name, "updown", unit, tuple(attributes), help)


def _gauge(name: str, unit: str, attributes: Iterable[str], help: str,
           source: Source = "runtime") -> MetricSpec:
    return MetricSpec(name, "gauge", unit, tuple(attributes), help, source)


def _seconds_histogram(name: str, attributes: Iterable[str], help: str) -> MetricSpec:
    return MetricSpec(name, "histogram", UNIT_SECONDS, tuple(attributes), help,
                      buckets=SECONDS_BUCKETS)


def _size_histogram(name: str, unit: str, attributes: Iterable[str], help: str) -> MetricSpec:
    return MetricSpec(name, "histogram", unit, tuple(attributes), help,
                      buckets=BATCH_SIZE_BUCKETS)


_JOB = (ATTR_KIND, ATTR_QUEUE)
_Q = (ATTR_QUEUE,)
_RING = (ATTR_RING,)
_DESCRIPTOR = (ATTR_DISPLAY_NAME, ATTR_OWNER, ATTR_DOCS_URL, ATTR_TAGS, ATTR_DESCRIPTOR_HASH)

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
    _updown("awa.job.open_attempts", "{job}", (),
            "Attempts this runtime holds open in the database: claimed and not yet written "
            "back (slots taken, running handlers included, plus outcomes waiting for their "
            "flush). Bounded by the runtime's slots plus one completion batch."),
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
    _gauge("awa.dispatch.capacity_available", "{permit}", _Q,
           "Free handler slots of the queue when its dispatcher last asked for permits "
           "(0 while every slot is busy)."),
    _counter("awa.dispatch.unused_permits", "{permit}", _Q,
             "Permits granted to a claim statement that returned fewer jobs than granted "
             "(given back unused: the queue had less work than free slots)."),
    _seconds_histogram("awa.dispatch.wake_to_claim_duration", _Q,
                       "Time from a dispatcher being woken (a NOTIFY for its queue) to its next "
                       "claim statement returning, in seconds."),
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
    _size_histogram("awa.maintenance.promote_batch_size", "{job}", (),
                    "Jobs moved to available per promotion statement that moved any."),
    _seconds_histogram("awa.maintenance.branch.duration", (ATTR_BRANCH,),
                       "Time of one pass of a maintenance branch (promote, rescue, cleanup, "
                       "cron, snapshot, ...), in seconds."),
    _counter("awa.maintenance.branch.overrun", "{pass}", (ATTR_BRANCH,),
             "Maintenance passes that took longer than their branch's interval."),
    # queue storage: ring rotation and prune (leader, once per cleanup tick)
    _counter("awa.maintenance.rotate.attempts", "{rotation}", _RING,
             "Rotations that were due and the leader tried, per ring (the lease and claim rings "
             "at every cleanup tick, the queue ring once per slot span)."),
    _counter("awa.maintenance.rotate.skipped", "{rotation}", _RING + (ATTR_PRUNE_BLOCKER,),
             "Rotations that could not move the ring on because its next slot still held rows, "
             "by what held them (awa.prune.blocker; retention is expected, the rest is wrap "
             "pressure)."),
    _seconds_histogram("awa.maintenance.rotate.duration", _RING,
                       "Time of one rotation attempt of a ring, in seconds."),
    _counter("awa.maintenance.prune.attempts", "{partition}", _RING,
             "Sealed ring slots holding rows that prune tried to reclaim."),
    _counter("awa.maintenance.prune.skipped", "{partition}", _RING + (ATTR_PRUNE_BLOCKER,),
             "Sealed slots prune could not truncate, by blocker: ready (a claimable entry), "
             "receipt (an open claim), lease (a running attempt), retention (terminal rows "
             "younger than their retention), lock (another session held the partition)."),
    _counter("awa.maintenance.prune.truncated", "{partition}", _RING,
             "Sealed slots reclaimed by TRUNCATE."),
    _counter("awa.maintenance.prune.carried_failed", "{job}", (),
             "Failed rows inside the failed-retention floor carried forward to the current "
             "queue slot before their slot was truncated."),
    _seconds_histogram("awa.maintenance.prune.duration", _RING,
                       "Time of one prune pass over a ring's sealed slots, in seconds."),
    _gauge("awa.ring.current_slot", "{slot}", _RING,
           "The slot new rows of the ring go to, after the leader's last tick."),
    _gauge("awa.ring.generation", "{rotation}", _RING,
           "Rotations the ring has made since it was created, after the leader's last tick."),
    _gauge("awa.ring.slot_count", "{slot}", _RING, "Slots (partitions) of the ring."),
    _gauge("awa.ring.occupied_slots", "{slot}", _RING,
           "Slots of the ring holding any row after the leader's last tick (the current one "
           "included); equal to awa.ring.slot_count, the ring cannot rotate."),
    _gauge("awa.storage.blocked_slots", "{partition}", _RING + (ATTR_PRUNE_BLOCKER,),
           "Sealed slots the leader's last prune pass could not reclaim, by blocker."),
    _gauge("awa.storage.prune_blocked_age", UNIT_SECONDS, _RING + (ATTR_PRUNE_BLOCKER,),
           "How long the longest-blocked sealed slot of the ring has been blocked, by its "
           "current blocker, in seconds (since this leader first found it blocked)."),
    _gauge("awa.storage.info", "{runtime}", (ATTR_STORAGE_ENGINE,),
           "Always 1; its label names the storage engine this runtime serves (canonical, "
           "queue_storage)."),
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
    _counter("awa.job.inserted", "{job}", _JOB,
             "Jobs written by an enqueue path (insert, insert_many, COPY, a transaction, the "
             "bridge); unique duplicates that were skipped are not counted."),
    _size_histogram("awa.enqueue.batch_size", "{job}", (),
                    "Rows per enqueue call (insert_many / COPY batch)."),
    _seconds_histogram("awa.enqueue.duration", (),
                       "Wall-clock time per enqueue call (insert_many / COPY batch), in seconds."),
    # runtime
    _gauge("awa.runtime.info", "{runtime}", (ATTR_RUNTIME_VERSION, ATTR_RUNTIME_INSTANCE,
                                             ATTR_RUNTIME_HOST, ATTR_RUNTIME_LAYOUT),
           "Always 1 for a started runtime; its labels identify it and the layout its code "
           "speaks (a fleet showing two is mid-upgrade)."),
    # descriptors (every runtime, after it stored its descriptors)
    _gauge("awa.queue.info", "{queue}", _Q + _DESCRIPTOR,
           "Always 1 per queue descriptor this runtime declares; its labels carry the "
           "descriptor (display name, owner, docs URL, tags, hash) for joins onto queue series; "
           "a field the descriptor leaves unset reads \"none\"."),
    _gauge("awa.job_kind.info", "{kind}", (ATTR_KIND,) + _DESCRIPTOR,
           "Always 1 per job-kind descriptor this runtime declares; its labels carry the "
           "descriptor (display name, owner, docs URL, tags, hash); a field the descriptor "
           "leaves unset reads \"none\"."),
)

# --- section 2: database-side metrics (awa-ops exporter) ---------------------
_TABLE = (ATTR_DB_TABLE,)
DATABASE_METRICS: tuple[MetricSpec, ...] = (
    _gauge("awa.db.queue.depth", "{job}", _Q + (ATTR_STATE,),
           "Jobs per queue and state, counted in the database.", "database"),
    _gauge("awa.db.queue.lag", UNIT_SECONDS, _Q,
           "Age of the oldest available job per queue, in seconds.", "database"),
    _gauge("awa.db.queue.unserved", "1", _Q,
           "1 when the queue has waiting jobs (available or retryable) and no live runtime "
           "serves it (awa.known_queues.unserved_queues): nothing will claim them until a "
           "worker for the queue starts; else 0.", "database"),
    _gauge("awa.db.queue.completed_rate", "{job}/s", _Q,
           "Completions per second per queue over the last minute "
           "(config.OPS_COMPLETED_WINDOW_S), counted in the database; 0 for a known idle "
           "queue.  Where the engine keeps lifetime totals (the Rust core's queue storage, "
           "which folds completed rows away within seconds), since the previous scrape.",
           "database"),
    _gauge("awa.db.running.oldest_heartbeat_age", UNIT_SECONDS, _Q,
           "Age of the oldest heartbeat among running jobs per queue, in seconds.", "database"),
    _gauge("awa.db.running.heartbeat_stale", "{job}", _Q,
           "Running jobs whose heartbeat is older than the staleness threshold of the runtime "
           "that runs them.", "database"),
    _gauge("awa.db.running.deadline_overdue", "{job}", _Q,
           "Running jobs past their hard deadline by more than one heartbeat interval of the "
           "runtime that runs them.", "database"),
    _gauge("awa.db.runtimes.live", "{runtime}", (),
           "Runtime instances seen within their snapshot window and not shutting down.",
           "database"),
    _gauge("awa.db.leader.present", "{leader}", (),
           "1 when a live runtime reports leadership, else 0.", "database"),
    _gauge("awa.db.dlq.depth", "{job}", _Q + (ATTR_DLQ_REASON,),
           "Dead-letter entries per queue and reason.", "database"),
    _gauge("awa.db.unique.wedged", "{job}", _Q,
           "Running jobs whose unique key is claimed by another job and whose heartbeat is "
           "past their runtime's staleness, so rescue should have cancelled them (the "
           "unique-claim wedge); a superseded attempt that still runs is not counted.",
           "database"),
    _gauge("awa.db.transaction.oldest_age", UNIT_SECONDS, (ATTR_DB_TXN_STATE,),
           "Age of the oldest open transaction per backend state (active, idle in "
           "transaction, ...), in seconds.", "database"),
    _gauge("awa.db.xmin_horizon.age", UNIT_SECONDS, (ATTR_DB_XMIN_SOURCE,),
           "How long the oldest holder of each xmin-horizon source has held it, in seconds "
           "(an inactive replication slot: how long the exporter has seen it inactive with "
           "the same xmin; sources without a start time, like catalog_xmin or standby "
           "feedback, are reported in xid_age only).", "database"),
    _gauge("awa.db.xmin_horizon.xid_age", "{transaction}", (ATTR_DB_XMIN_SOURCE,),
           "age() in transactions of the oldest xmin held by each source: transaction, "
           "replication_slot, replication_slot_catalog, standby_feedback, prepared_transaction.",
           "database"),
    _gauge("awa.db.replication_slot.retained_wal_bytes", "By", (ATTR_DB_SLOT, ATTR_DB_SLOT_ACTIVE),
           "WAL each replication slot keeps on the primary (from its restart_lsn to the "
           "current WAL position), in bytes, and whether a consumer is connected: an inactive "
           "slot keeps WAL until its consumer returns or it is dropped, and a full WAL disk "
           "stops the server.  Not reported on a standby.", "database"),
    _gauge("awa.db.table.dead_tuples", "{tuple}", _TABLE,
           "Dead tuples per queue table (pg_stat_user_tables.n_dead_tup).", "database"),
    _gauge("awa.db.table.live_tuples", "{tuple}", _TABLE,
           "Live tuples per queue table (pg_stat_user_tables.n_live_tup).", "database"),
    _gauge("awa.db.table.last_autovacuum_age", UNIT_SECONDS, _TABLE,
           "Seconds since the last autovacuum of each queue table.", "database"),
    _gauge("awa.db.cron.overdue", UNIT_SECONDS, (ATTR_CRON_NAME,),
           "Per active (unpaused) cron schedule: seconds since its oldest fire time that has "
           "not been enqueued (0 when it is on time); for a stored expression the runtime "
           "cannot evaluate (the leader skips it), seconds since it last fired.", "database"),
    _gauge("awa.db.notification_queue.usage", "1", (),
           "Fraction (0..1) of the LISTEN/NOTIFY queue in use (pg_notification_queue_usage()).",
           "database"),
    # which server the exporter reads: a primary, or a hot standby and how far behind it is
    _gauge("awa.db.replication.standby", "1", (),
           "1 when the exporter reads a hot standby (pg_is_in_recovery()), 0 on a primary.",
           "database"),
    _gauge("awa.db.replication.replay_lag", UNIT_SECONDS, (),
           "On a standby: seconds since the last replayed commit while received WAL waits to "
           "be replayed, 0 when caught up; on a primary: the largest replay lag of its "
           "streaming standbys (0 with none).", "database"),
    _gauge("awa.db.replication.replay_lag_bytes", "By", (),
           "On a standby: WAL received and not yet replayed, in bytes; on a primary: the "
           "furthest behind of its streaming standbys, in bytes (0 with none).", "database"),
    # queue storage (nothing on canonical): the rings as awa.queue_ring_state and their
    # partitions hold them
    _gauge("awa.db.ring.current_slot", "{slot}", _RING,
           "The slot new rows of the ring go to (awa.queue_ring_state).", "database"),
    _gauge("awa.db.ring.generation", "{rotation}", _RING,
           "Rotations the ring has made (awa.queue_ring_state.generation).", "database"),
    _gauge("awa.db.ring.slot_count", "{slot}", _RING, "Slots (partitions) of the ring.",
           "database"),
    _gauge("awa.db.ring.occupied_slots", "{slot}", _RING,
           "Slots of the ring whose partitions hold any row (the current one included).",
           "database"),
    _gauge("awa.db.ring.rotation_age", UNIT_SECONDS, _RING,
           "Seconds since the ring last rotated (awa.queue_ring_state.rotated_at).", "database"),
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


_HISTOGRAMS = {e.name: tuple(float(b) for b in e.buckets or ()) for e in RUNTIME_METRICS
               if e.kind == "histogram"}


def histogram_boundaries(name: str) -> tuple[float, ...] | None:
    """Bucket boundaries of a runtime histogram by OTel name (None: not one of ours)."""
    return _HISTOGRAMS.get(name)
