"""The storage-engine seam: one typed async method per operation.

Everything above this module (runtime, maintenance, admin, callbacks,
``awa_ops``, ``awa_tui``) talks to job storage only through ``Engine``; only
``awa/storage/`` runs job-table SQL.  The shape follows River's driver
``Executor`` and Oban's ``Engine`` behaviour: methods take a connection (the
caller owns the transaction, so enqueue stays transactional with the user's
writes) plus dataclasses, and return dataclasses or ``awa.Job`` -- never a
cursor, a SQL string or a bare tuple row.

The protocol is split into groups, one per concern, composed into ``Engine``
at the bottom.  Each engine implements every group; ``tests/storage/`` is the
conformance suite every engine must pass unchanged.
"""

from __future__ import annotations

from typing import Protocol


# ============================================================================
# enqueue: insert batch, COPY batch, unique-holder lookup
# ============================================================================
class EnqueueOps(Protocol):
    """Producer side: appends jobs in the caller's transaction."""


# ============================================================================
# execution: claim, outcome batches guarded by (id, run_lease), heartbeat,
# progress, runtime snapshot
# ============================================================================
class ExecutionOps(Protocol):
    """The worker runtime's hot path; every method is one statement per batch."""


# ============================================================================
# maintenance: rescues, promotion, retention, aging, cron CAS, descriptors,
# queue depth / lag
# ============================================================================
class MaintenanceOps(Protocol):
    """What the elected leader runs; every write is guarded against a second leader."""


# ============================================================================
# admin: jobs, queues, DLQ
# ============================================================================
class AdminOps(Protocol):
    """Operator actions and lookups behind the client's admin API and the CLI."""


# ============================================================================
# callbacks: register, resolve, complete / fail / retry / resume / heartbeat
# ============================================================================
class CallbackOps(Protocol):
    """External-wait jobs: the attempt parks until a callback resolves it."""


# ============================================================================
# ops read side: what awa_ops and awa_tui show
# ============================================================================
class OpsReads(Protocol):
    """Bounded, index-backed reads for operators; never a write."""


# ============================================================================
class Engine(EnqueueOps, ExecutionOps, MaintenanceOps, AdminOps, CallbackOps, OpsReads, Protocol):
    """A storage engine: every group above."""

    name: str
    """``canonical`` or ``queue_storage``: what ``awa.runtime_storage_backends`` names."""
