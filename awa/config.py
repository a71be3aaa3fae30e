"""Every default of the system, in one place.

The seeds fix these values (docs/architecture.md §4); anything that reads a default
imports it from here, so a reader can find and change each one exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

# --- storage --------------------------------------------------------------
# The engine `awa migrate` lays a new (never-migrated) database out for; an
# existing database keeps its own.  `awa migrate --engine canonical` chooses.
DEFAULT_STORAGE_ENGINE = "queue_storage"
# Where a new database's queue-storage tables go (`awa migrate --queue-storage-schema`,
# `install_queue_storage(schema=...)`); the control surface (awa.jobs, awa.queue_meta,
# awa.runtime_storage_backends, ...) stays in schema awa whatever this is.
DEFAULT_QUEUE_STORAGE_SCHEMA = "awa"

# --- job defaults --------------------------------------------------------
DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 2
MIN_PRIORITY = 1
MAX_PRIORITY = 4
DEFAULT_MAX_ATTEMPTS = 25
MIN_MAX_ATTEMPTS = 1
MAX_MAX_ATTEMPTS = 1000

# Postgres identifiers (and so LISTEN channels) are at most 63 bytes; the
# channel for a queue is "awa:<queue>".
NOTIFY_CHANNEL_PREFIX = "awa:"
CANCEL_CHANNEL = "awa:cancel"
MAX_IDENTIFIER_BYTES = 63
MAX_QUEUE_NAME_BYTES = MAX_IDENTIFIER_BYTES - len(NOTIFY_CHANNEL_PREFIX)

# Unique jobs: bit positions of awa.job_state, in enum order.
JOB_STATES = (
    "scheduled",
    "available",
    "running",
    "completed",
    "retryable",
    "failed",
    "cancelled",
    "waiting_external",
)
DEFAULT_UNIQUE_STATES = ("scheduled", "available", "running", "completed", "retryable")
UNIQUE_KEY_BYTES = 16

# --- retry / backoff -----------------------------------------------------
BACKOFF_BASE_SECONDS = 2.0  # 2^attempt seconds
BACKOFF_JITTER_FRACTION = 0.25
BACKOFF_CAP = timedelta(hours=24)

# --- runtime intervals (milliseconds, the SDK's unit) ---------------------
POLL_INTERVAL_MS = 200
HEARTBEAT_INTERVAL_MS = 30_000
HEARTBEAT_STALENESS_MS = 90_000
HEARTBEAT_RESCUE_INTERVAL_MS = 30_000
DEADLINE_RESCUE_INTERVAL_MS = 30_000
CALLBACK_RESCUE_INTERVAL_MS = 30_000
DEADLINE_DURATION_MS = 5 * 60_000
LEADER_ELECTION_INTERVAL_MS = 10_000
PROMOTE_INTERVAL_MS = 250
CLEANUP_INTERVAL_MS = 60_000
SNAPSHOT_INTERVAL_MS = 10_000
# `awa adopt` refuses while a Rust-core runtime's snapshot is younger than this many of its
# own snapshot intervals (0.6.9 itself counts a runtime gone after two).
ADOPT_LIVE_SNAPSHOT_INTERVALS = 2
PRIORITY_AGING_INTERVAL_MS = 60_000
CRON_EVAL_INTERVAL_MS = 1_000
QUEUE_HEALTH_INTERVAL_MS = 5_000
SHUTDOWN_TIMEOUT_MS = 2_000
# How long a stopping dispatcher waits for a claim statement it already sent (its
# attempts are then run, not left open for rescue).
CLAIM_STOP_GRACE_MS = 5_000
CANCEL_LISTENER_RETRY_MS = 1_000
# After a deadline passes the runtime waits this long before dropping a
# handler that is still awaiting, so its slot is freed.
DEADLINE_DROP_GRACE_MS = 5_000

# --- batching --------------------------------------------------------------
CLAIM_BATCH_SIZE = 64
COMPLETION_FLUSH_MAX_ROWS = 512
# How long a flusher waits for more outcomes before writing: 5 ms lets one statement carry a
# claim batch's worth (queue storage, W=256, 3 alternated rounds: +6.7 % processed/s and
# -5 % worker CPU/job against 2 ms; 12 ms was slower again; canonical unchanged).
COMPLETION_FLUSH_INTERVAL_MS = 5
PROMOTE_BATCH_SIZE = 5_000
RESCUE_BATCH_SIZE = 1_000
CLEANUP_BATCH_SIZE = 1_000
ENQUEUE_BATCH_SIZE = 1_000
SYNC_HANDLER_THREADS = 32
# max_workers of each registered queue when start() is given no queue configs.
DEFAULT_MAX_WORKERS = 10
# A maintenance branch works through at most this many batches per tick, so
# one huge backlog cannot starve the other branches.
MAINTENANCE_MAX_BATCHES_PER_TICK = 20
# Leader branches running at once, so a new leader does not take the whole
# pool from the dispatchers; and how often the leader checks its lock connection.
MAINTENANCE_MAX_CONCURRENT_BRANCHES = 2
LEADER_PING_MAX_INTERVAL_MS = 1_000
# Leader fencing: a leader that stops pinging (SIGSTOP, GC pause, swapped-out
# host) has its lock session ended by the server after this many ping
# intervals idle (idle_session_timeout), within these bounds.
LEADER_FENCE_PINGS = 3
LEADER_FENCE_MIN_MS = 1_000
LEADER_FENCE_MAX_MS = 30_000
# Missed cron slots enqueued per schedule per tick under missed_fire_policy catch_up.
CRON_CATCH_UP_MAX_PER_TICK = 100

# --- retention -----------------------------------------------------------
COMPLETED_RETENTION_HOURS = 24.0
FAILED_RETENTION_HOURS = 72.0  # a floor
DLQ_RETENTION_DAYS = 30.0
RUNTIME_RETENTION_HOURS = 24.0
DESCRIPTOR_RETENTION_DAYS = 30.0

# --- database / connections ------------------------------------------------
MAX_CONNECTIONS = 10
CONNECT_TIMEOUT_S = 5
# Server settings every connection of ours starts with (libpq ``options``).  No JIT: our
# statements are short, and a plan over many ring partitions is costed high enough to be
# JIT-compiled at every call -- 30-100 ms of compilation for a 4 ms read.
SESSION_OPTIONS = "-c jit=off"
# Pooled connections lost in an outage are retried at this steady pace (and
# so is a heartbeat the outage held back).
POOL_RECONNECT_DELAY_MS = 200
# A pooled connection is checked with a round trip (an empty query) before it is handed
# out only when its socket has something to read while idle (the server ended it: a
# restart, pg_terminate_backend) or it sat idle longer than this: a busy runtime's claims
# and completion flushes take their connection with no extra round trip (issue 32).
POOL_CHECK_IDLE_S = 5.0
ADVISORY_LOCK_MIGRATE = 0x4157415F4D494752
# `awa migrate` under a live fleet (awa.schema.ddl): each step first takes every lock it needs
# on awa's tables, waiting at most this long for any one, so a worker never waits behind it
# for longer than this plus the step itself, and never deadlocks with it (the migration gives
# up first, well inside the server's deadlock_timeout).  A step that cannot take them rolls
# back and tries again after a pause growing from the first to the second value, this many
# times, before `awa migrate` fails in one line.
MIGRATE_LOCK_TIMEOUT_MS = 100
MIGRATE_RETRY_PAUSE_MS = (20, 1000)
MIGRATE_LOCK_ATTEMPTS = 200
ADVISORY_LOCK_LEADER = 0x4157415F4D41494E
# The live switch of engines (awa/storage/transition, docs/production.md "Choosing and
# switching storage engines").  A producer or runtime reads the transition state again at
# most this often (on the connection of its next enqueue, claim or maintenance pass: never a
# round trip per job); finalize and the end of an abort wait until the state has been in
# place for the settle time, so every process has read it since; their check of the drained
# engine takes its tables' SHARE lock with MIGRATE_LOCK_TIMEOUT_MS, this many times.
STORAGE_TRANSITION_REFRESH_S = 1.0
STORAGE_TRANSITION_SETTLE_S = 3.0
STORAGE_TRANSITION_LOCK_ATTEMPTS = 50
APP_NAME_WORKER = "awa-worker"
APP_NAME_LEADER = "awa-leader"
APP_NAME_LISTENER = "awa-listener"  # the cancel listener: the one `diagnose cancel-listener` counts
APP_NAME_QUEUE_LISTENER = "awa-queue-listener"  # wake-ups for the dispatchers
APP_NAME_CALLBACK_LISTENER = "awa-callback-listener"  # resumes for wait_for_callback
APP_NAME_CLI = "awa-cli"
APP_NAME_OPS = "awa-ops"
APP_NAME_TUI = "awa-tui"
APP_NAME_SERVE = "awa-serve"  # the REST API of `awa serve`
EMBEDDED_DB_NAME = "awa"

# --- ops (docs/architecture.md §10) ---------------------------------------
OPS_STATEMENT_TIMEOUT_MS = 5_000
OPS_LOCK_TIMEOUT_MS = 1_000
OPS_EVIDENCE_LIMIT = 50  # rows shown per finding
OPS_RUNTIME_LIVE_FACTOR = 3  # live while last_seen_at is within N snapshot intervals
OPS_RUNTIME_LIVE_MIN_S = 2.0  # ...and never less: a late snapshot on a busy host is not a death
OPS_WAITING_COUNT_CAP = 10_000  # diagnose runtime counts a stranded queue's jobs up to this
OPS_RUNTIME_GONE_S = 900  # a runtime silent longer than this is history, not an alarm
OPS_XACT_WARNING_S = 300  # a transaction pinning the xmin horizon this long warns
OPS_XACT_CRITICAL_S = 3_600
OPS_XID_AGE_WARNING = 10_000_000
OPS_VACUUM_RECENT_S = 600  # vacuumed this recently yet still dead: something pins the horizon
OPS_VACUUM_STALE_S = 1_800  # no vacuum for this long while dead rows pile up
OPS_DEAD_TUPLES_MIN = 10_000  # below this, dead tuples are never worth an alarm
OPS_CRON_OVERDUE_S = 300  # a cron schedule this late past a fire time warns
OPS_DLQ_RECENT_S = 3_600
OPS_ERROR_SAMPLE = 1_000  # recent DLQ/failed rows scanned for repeated errors
OPS_POISON_REPEATS = 3
OPS_ENQUEUE_TINY_BATCH = 10
OPS_WAL_SAMPLES = 5
OPS_WAL_SAMPLE_INTERVAL_MS = 50
OPS_NOTIFY_PROBE_TIMEOUT_S = 2.0
OPS_NOTIFY_QUEUE_WARNING = 0.5
OPS_CANCEL_WINDOW_S = 3_600
OPS_EXPORTER_STATEMENT_TIMEOUT_MS = 2_000
OPS_REPLICATION_LAG_WARNING_S = 60.0  # a standby replaying this far behind warns
OPS_REPLICATION_LAG_CRITICAL_S = 600.0
OPS_KNOWN_QUEUE_HISTORY_S = 3_600  # a queue served or completing this recently stays listed
OPS_KNOWN_QUEUE_LIMIT = 1_000  # per-queue rows/series for at most this many known queues
OPS_COMPLETED_WINDOW_S = 60  # the exporter's completions-per-second window
# Running attempts read to judge each by its own runtime's timing (only when some may be
# stale or overdue); past it, the lenient per-queue counts are kept (awa_ops.runtimes).
OPS_JUDGED_ATTEMPTS_LIMIT = 5_000
EXPORTER_LISTEN = "127.0.0.1:9465"
# awa-tui: refresh cadence, and the bounds that keep one refresh cheap on a huge database.
TUI_REFRESH_SECONDS = 2.0
TUI_MIN_REFRESH_SECONDS = 0.5
TUI_MAX_REFRESH_SECONDS = 60.0
TUI_COUNT_CAP = 100_000  # depth counts stop here and show "100000+"
TUI_ROW_LIMIT = 500  # rows per list screen
TUI_SCAN_WINDOW = 20_000  # newest rows a non-indexed filter (tag, reason) looks through
TUI_THROUGHPUT_POINTS = 60  # sparkline length, one point per refresh
TUI_DIAGNOSE_SECONDS = 30.0  # `diagnose all` reruns at most this often in the console
DEMO_PIPED_EVERY_S = 5.0  # the demo, piped (no terminal to redraw): a stats table this often
TUI_VALUE_CAP_BYTES = 64 * 1024  # job args/metadata/errors: fetched and shown up to this
SERVE_HOST = "127.0.0.1"
SERVE_PORT = 3000  # as the Rust-core `awa serve`
# `awa serve`'s REST API (the reference's flags and defaults; env AWA_POOL_MAX etc.)
SERVE_POOL_MAX = 10
SERVE_POOL_MIN = 2
SERVE_POOL_IDLE_TIMEOUT_S = 300.0
SERVE_POOL_MAX_LIFETIME_S = 1800.0
SERVE_POOL_ACQUIRE_TIMEOUT_S = 10.0
SERVE_CACHE_TTL_S = 5.0  # /api/stats, /api/queues, /api/runtime, /api/queues/runtime, /api/storage
SERVE_JOBS_LIMIT = 100  # /api/jobs and /api/dlq page size when none is asked
SERVE_JOBS_MAX_LIMIT = 1_000  # /api/jobs and /api/dlq pages are clamped to 1..this
SERVE_TIMESERIES_MINUTES = 60
SERVE_SUMMARY_CAP = 50_000  # /api/stats/timeseries, /api/kinds: rows read per part at most
SERVE_BULK_PREVIEW_MAX = 10_000  # ids a filter-wide bulk preview lists (more: use awa batch)
SERVE_TIMESERIES_MAX_MINUTES = 7 * 24 * 60  # /api/stats/timeseries: a week at most
SERVE_MAX_BODY_BYTES = 2 * 1024 * 1024  # a request body past this is 413 (axum's default limit)
SERVE_LIST_ARGS_CAP_BYTES = TUI_VALUE_CAP_BYTES  # /api/jobs, /api/dlq: bigger args are a marker
# Worker health endpoints (/healthz, /readyz): off unless an address is given.
HEALTH_ADDR_ENV = "AWA_HEALTH_ADDR"
# Durable batch operations (awa.batch_operations): run by the maintenance leader, a tick per
# interval.
BATCH_OPERATIONS_INTERVAL_MS = 1_000
BATCH_OP_CHUNK_SIZE = 500  # items changed (and recorded) per transaction
BATCH_OP_SCAN_PAGE = 10_000  # matching ids recorded per scan transaction
BATCH_OP_TICK_BUDGET_S = 0.5  # work per tick, so one operation never hogs maintenance
BATCH_OP_RETENTION_DAYS = 90.0  # finished operations kept this long
BATCH_OP_PREVIEW_SAMPLE = 10  # jobs a preview lists
# After each step the runner rests this many times the step's own time: a step holds its
# lanes (claims on them wait) and server CPU, and a busy server makes steps slower, so
# the rest grows with the load.  0 runs steps back to back (fastest; claims wait most).
BATCH_OP_PACE = 3.0
# Queue storage: at most this many items per chunk, whose source lanes stay locked (and
# their queues' claims wait) until the chunk commits.
BATCH_OP_LANE_CHUNK_SIZE = 100
METRICS_HOST = "127.0.0.1"

# --- external callbacks (awa.callbacks, awa.callback_server, awa.http_worker) --
CALLBACK_TIMEOUT_SECONDS = 3600.0  # register_callback / heartbeat_callback default
CALLBACK_TIMEOUT_MAX_SECONDS = 10 * 365 * 86_400.0  # a longer timeout is refused
CALLBACK_PATH_PREFIX = "/api/callbacks"
CALLBACK_SECRET_BYTES = 32  # BLAKE3 keyed hash key length
CALLBACK_MAX_BODY_BYTES = 256 * 1024  # larger callback bodies get 413
CALLBACK_LISTEN = "127.0.0.1:8470"  # `awa callbacks serve` default
# A handler in wait_for_callback is woken by a notification; as the fallback
# (lost notification) and to notice cancellation it re-reads its row first
# after MIN, doubling to MAX.
CALLBACK_WAIT_POLL_MIN_MS = 20
CALLBACK_WAIT_POLL_MAX_MS = 1_000
HTTP_WORKER_TIMEOUT_SECONDS = 30.0  # one POST of the HTTP worker
# A job's args + metadata as stored (JSON bytes): an insert past WARN logs one line, past MAX
# is refused with one line (big data belongs elsewhere; pass a reference).  Read at insert
# time, so an application may set awa.config.ENQUEUE_WARN_BYTES / ENQUEUE_MAX_BYTES.
ENQUEUE_WARN_BYTES = 1024 * 1024
ENQUEUE_MAX_BYTES = 16 * 1024 * 1024
DB_ERROR_LOG_INTERVAL_S = 30.0  # while the database is unreachable, one error line per this
BULK_SELECT_LIMIT = 1_000_000  # a bulk command (and its --dry-run) acts on at most this many


@dataclass(frozen=True)
class RateLimit:
    """Token bucket: ``max_rate`` jobs per second with bursts of ``burst``."""

    max_rate: float
    burst: int = 1


@dataclass(frozen=True)
class RetentionPolicy:
    completed_hours: float = COMPLETED_RETENTION_HOURS
    failed_hours: float = FAILED_RETENTION_HOURS
    dlq_days: float = DLQ_RETENTION_DAYS


@dataclass(frozen=True)
class QueueConfig:
    """One queue's share of a runtime.

    Either ``max_workers`` (hard mode) or ``min_workers`` + ``weight`` under
    the runtime's ``global_max_workers`` (weighted mode).
    """

    name: str
    max_workers: int | None = None
    min_workers: int | None = None
    weight: int = 1
    rate_limit: RateLimit | None = None
    deadline_duration_ms: int = DEADLINE_DURATION_MS
    claim_batch_size: int = CLAIM_BATCH_SIZE
    poll_interval_ms: int | None = None
    dlq_enabled: bool | None = None
    priority_aging_interval_ms: int = PRIORITY_AGING_INTERVAL_MS
    retention: RetentionPolicy | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RuntimeSettings:
    """Everything ``client.start()`` accepts besides the queues; names as the SDK's."""

    poll_interval_ms: int = POLL_INTERVAL_MS
    global_max_workers: int | None = None
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    heartbeat_staleness_ms: int = HEARTBEAT_STALENESS_MS
    heartbeat_rescue_interval_ms: int = HEARTBEAT_RESCUE_INTERVAL_MS
    deadline_rescue_interval_ms: int = DEADLINE_RESCUE_INTERVAL_MS
    callback_rescue_interval_ms: int = CALLBACK_RESCUE_INTERVAL_MS
    leader_election_interval_ms: int = LEADER_ELECTION_INTERVAL_MS
    promote_interval_ms: int = PROMOTE_INTERVAL_MS
    cleanup_interval_ms: int = CLEANUP_INTERVAL_MS
    snapshot_interval_ms: int = SNAPSHOT_INTERVAL_MS
    cron_eval_interval_ms: int = CRON_EVAL_INTERVAL_MS
    priority_aging_interval_ms: int = PRIORITY_AGING_INTERVAL_MS
    queue_health_interval_ms: int = QUEUE_HEALTH_INTERVAL_MS
    completed_retention_hours: float = COMPLETED_RETENTION_HOURS
    failed_retention_hours: float = FAILED_RETENTION_HOURS
    dlq_retention_days: float = DLQ_RETENTION_DAYS
    descriptor_retention_days: float = DESCRIPTOR_RETENTION_DAYS
    runtime_retention_hours: float = RUNTIME_RETENTION_HOURS
    cleanup_batch_size: int = CLEANUP_BATCH_SIZE
    promote_batch_size: int = PROMOTE_BATCH_SIZE
    rescue_batch_size: int = RESCUE_BATCH_SIZE
    dlq_enabled_by_default: bool = False
    deadline_drop_grace_ms: int = DEADLINE_DROP_GRACE_MS
    sync_handler_threads: int = SYNC_HANDLER_THREADS
    metrics_addr: str | None = None
    run_maintenance: bool = True
    health_addr: str | None = None  # /healthz and /readyz (else $AWA_HEALTH_ADDR; else none)
    batch_operations_interval_ms: int = BATCH_OPERATIONS_INTERVAL_MS
    batch_operations_pace: float = BATCH_OP_PACE  # 0: steps back to back (fastest)
