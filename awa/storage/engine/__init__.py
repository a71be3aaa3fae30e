"""The storage-engine seam: one typed async method per operation.

Everything above this package (runtime, maintenance, admin, callbacks,
``awa_ops``, ``awa_tui``) talks to job storage only through ``Engine``; only
``awa/storage/`` runs job-table SQL.  The shape follows River's driver
``Executor`` and Oban's ``Engine`` behaviour: methods take a connection (the
caller owns the transaction, so enqueue stays transactional with the user's
writes) plus dataclasses, and return dataclasses or ``awa.Job`` -- never a
cursor, a SQL string or a bare tuple row.

The protocol is split into groups, one per concern and one module each (the
group's protocol and its dataclasses; ``shared`` holds what several groups
share), composed here into ``Engine``, and into ``ReadEngine``, the read side
operators need, which the Rust-core reader (``awa.storage.rust_core``) serves
too.  Each engine implements every group; ``tests/storage/`` is the
conformance suite every engine must pass unchanged.  Every name is importable
from here (``from awa.storage.engine import QueueStat``).
"""

from __future__ import annotations

from typing import Protocol

from awa.storage.engine.admin import (
    AdminOps,
    AdminReads,
    DlqEntry,
    DlqFilter,
    JobDump,
    KindQueueCount,
    QueueCount,
    QueueStat,
    RetryFailedResult,
)
from awa.storage.engine.batch_operations import (
    BATCH_OPERATION_COLUMNS,
    BatchOperation,
    BatchOps,
    BatchPreview,
    ChunkOutcome,
    ScanCursor,
)
from awa.storage.engine.callbacks import (
    CALLBACK_RESULT_KEY,
    CALLBACK_RESUME_CHANNEL,
    CallbackHolder,
    CallbackOps,
    CallbackSpec,
    CallbackWait,
)
from awa.storage.engine.cron_admin import (
    CronAdminOps,
    CronAdminReads,
    CronJobInfo,
)
from awa.storage.engine.enqueue import (
    EnqueueBatch,
    EnqueueOps,
    InsertOutcome,
    UniqueHolder,
)
from awa.storage.engine.execution import (
    AppliedBatch,
    AttemptWrite,
    ExecutionOps,
    RuntimeSnapshot,
)
from awa.storage.engine.maintenance import (
    ORIGINAL_PRIORITY_KEY,
    PRUNE_BLOCKER_LEASE,
    PRUNE_BLOCKER_LOCK,
    PRUNE_BLOCKER_READY,
    PRUNE_BLOCKER_RECEIPT,
    PRUNE_BLOCKER_RETENTION,
    PRUNE_BLOCKERS,
    ActiveCronSchedule,
    CronFired,
    Descriptor,
    MaintenanceOps,
    MaintenanceReads,
    PromoteBatch,
    PromotedJob,
    PruneReport,
    PurgedBatch,
    QueueDepth,
    RescueAction,
    RescueBatch,
    RescuedAttempt,
    RingPass,
)
from awa.storage.engine.reads import (
    CAPPED_VALUES,
    CancelledAttempt,
    DlqCursor,
    DlqDepth,
    DlqEntriesPage,
    DlqPageQuery,
    DlqSummary,
    JobListQuery,
    JobRecord,
    JobSummary,
    KindCount,
    OpsReads,
    Oversized,
    QueueDetail,
    RepeatedError,
    RingState,
    RunningAttemptRead,
    RunningCounts,
    RuntimeDescriptorHashes,
    RuntimeInstance,
    StateBucket,
    StoredDescriptor,
    SupersededAttempt,
    UniqueClaimHolder,
    WedgedClaims,
)
from awa.storage.engine.shared import (
    CronSchedule,
)


class ReadEngine(OpsReads, AdminReads, CronAdminReads, MaintenanceReads, Protocol):
    """What operators read (awa_ops, awa_tui, the CLI's read commands), never a write: the
    ops reads, and the reads of the admin, cron admin and maintenance groups.  Every
    ``Engine`` is one; so is the Rust-core reader (``awa.storage.rust_core``), which serves
    a database our runtime never writes."""

    @property
    def name(self) -> str:
        """The engine's name: ``canonical``, ``queue_storage`` or ``rust_core`` (read-only:
        the transition layer answers with the engine new jobs go to)."""
        ...


class Engine(EnqueueOps, ExecutionOps, MaintenanceOps, AdminOps, CallbackOps, CronAdminOps,
             BatchOps, ReadEngine, Protocol):
    """A storage engine: every group."""

    @property
    def name(self) -> str:
        """``canonical`` or ``queue_storage``: what ``awa.runtime_storage_backends`` names."""
        ...


__all__ = [
    "ActiveCronSchedule",
    "AdminOps",
    "AdminReads",
    "AppliedBatch",
    "AttemptWrite",
    "BATCH_OPERATION_COLUMNS",
    "BatchOperation",
    "BatchOps",
    "BatchPreview",
    "CALLBACK_RESULT_KEY",
    "CALLBACK_RESUME_CHANNEL",
    "CAPPED_VALUES",
    "CallbackHolder",
    "CallbackOps",
    "CallbackSpec",
    "CallbackWait",
    "CancelledAttempt",
    "ChunkOutcome",
    "CronAdminOps",
    "CronAdminReads",
    "CronFired",
    "CronJobInfo",
    "CronSchedule",
    "Descriptor",
    "DlqCursor",
    "DlqDepth",
    "DlqEntriesPage",
    "DlqEntry",
    "DlqFilter",
    "DlqPageQuery",
    "DlqSummary",
    "Engine",
    "EnqueueBatch",
    "EnqueueOps",
    "ExecutionOps",
    "InsertOutcome",
    "JobDump",
    "JobListQuery",
    "JobRecord",
    "JobSummary",
    "KindCount",
    "KindQueueCount",
    "MaintenanceOps",
    "MaintenanceReads",
    "ORIGINAL_PRIORITY_KEY",
    "OpsReads",
    "Oversized",
    "PRUNE_BLOCKERS",
    "PRUNE_BLOCKER_LEASE",
    "PRUNE_BLOCKER_LOCK",
    "PRUNE_BLOCKER_READY",
    "PRUNE_BLOCKER_RECEIPT",
    "PRUNE_BLOCKER_RETENTION",
    "PromoteBatch",
    "PromotedJob",
    "PruneReport",
    "PurgedBatch",
    "QueueCount",
    "QueueDepth",
    "QueueDetail",
    "QueueStat",
    "ReadEngine",
    "RepeatedError",
    "RescueAction",
    "RescueBatch",
    "RescuedAttempt",
    "RetryFailedResult",
    "RingPass",
    "RingState",
    "RunningAttemptRead",
    "RunningCounts",
    "RuntimeDescriptorHashes",
    "RuntimeInstance",
    "RuntimeSnapshot",
    "ScanCursor",
    "StateBucket",
    "StoredDescriptor",
    "SupersededAttempt",
    "UniqueClaimHolder",
    "UniqueHolder",
    "WedgedClaims",
]
