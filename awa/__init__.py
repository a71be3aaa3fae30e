"""awa: a Postgres-native background job queue, the full runtime in Python."""

from awa import callback_contract
from awa.admin import DlqEntry, QueueStat, RetryFailedResult
from awa.callbacks import ResolveResult
from awa.client import AsyncClient, Client, RawClient, SyncTransaction
from awa.compat import migrate, migrations, migrations_range, schema_patches
from awa.config import QueueConfig, RateLimit, RetentionPolicy
from awa.job import (
    AwaError,
    CallbackNotFound,
    CallbackToken,
    Cancel,
    DatabaseError,
    ForeignSchema,
    Job,
    JobNotFound,
    JobState,
    RetryAfter,
    SchemaNotMigrated,
    SerializationError,
    Snooze,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
    WaitForCallback,
)
from awa.partitioned import PartitionedQueue
from awa.producer import Transaction
from awa.runtime.events import JobEvent
from awa.schema import current_migration_version
from awa.serialization import derive_kind
from awa.telemetry import init_telemetry, shutdown_telemetry
from awa.version import __version__ as __version__
from awa.worker import HealthCheck, QueueHealth

__all__ = [
    "AsyncClient", "Client", "QueueConfig", "RateLimit", "RetentionPolicy",
    "AwaError", "CallbackNotFound", "CallbackToken", "Cancel", "DatabaseError", "ForeignSchema",
    "Job", "JobNotFound", "JobState", "RetryAfter", "SchemaNotMigrated", "SerializationError",
    "Snooze", "TerminalError", "UniqueConflict", "UnknownJobKind", "ValidationError",
    "WaitForCallback", "current_migration_version", "derive_kind",
    "DlqEntry", "QueueStat", "RetryFailedResult", "SyncTransaction", "Transaction", "migrations",
    "migrations_range",
    "init_telemetry", "shutdown_telemetry", "ResolveResult", "callback_contract",
    "HealthCheck", "QueueHealth", "JobEvent",
    "migrate", "schema_patches", "PartitionedQueue", "RawClient",
]
