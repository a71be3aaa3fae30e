"""Engine 2, queue storage: append-only, vacuum-aware job storage (docs/architecture.md §7).

Enqueue appends ``ready_entries``; claim appends a ``lease_claims`` receipt
and advances a per-lane claim head; finishing a batch appends one closure row
per claim slot (``lease_claim_closure_batches``, whose exclusion constraint
lets one of two closers of an attempt win) and a ``done_entries`` row per
job; only long attempts materialize into ``leases`` /
``attempt_state``.  ``sql/`` holds what it installs;
``install_queue_storage`` installs it.  Every group
of the Engine protocol is implemented (shared tables -- queue_meta, the DLQ,
unique claims, cron, runtimes, descriptors -- use the engine-neutral core's
statements, ``awa.storage.common``);
``rings`` holds rotation and prune.  The default engine for new databases.

The load invariants (docs/architecture.md §7, "Load invariants"), and what keeps each
on this engine:

1. *Bounded in-flight* -- the runtime's: a dispatcher claims only with permits
   in hand and not while a whole completion batch waits to be written
   (``awa.runtime.completion.CompletionBatcher.backlogged``), so a runtime holds
   at most its slots plus one batch open (``awa.job.open_attempts``).
2. *One claim per attempt* -- an entry is claimed only by ``awa.qs_claim``
   holding its lane's claim-head lock, with a snapshot taken after the lock
   (every earlier claim's receipts visible); every other writer that removes or
   moves a ready entry (admin, the ``awa.jobs`` triggers) takes the same lock
   first (so does a batch operation moving a job to another lane: ``batch_operations``).
   Nothing re-appends a waiting entry behind the claims' back: priority aging
   is applied at claim time (``awa.qs_aged_priority``), never by moving rows --
   a pass that did so raced the claims and ran attempts twice under one
   lease.  A claim that returns late (``Dispatcher._still_ours``) runs exactly
   the attempts one heartbeat still finds open under its lease; the others were
   closed by whoever took them.
3. *Cost independent of depth* -- a claim reads its lanes' frontier (the newest
   receipt's ``lane_frontier``) and then only the entries it returns; the
   leader's depth read counts positions from the same frontier without reading
   entries (``maintenance.QUEUE_DEPTHS``); settling a claim head walks from the
   head to the first live entry only.  No statement tests every receipt the
   claim ring holds: the open receipts are read from the gaps between closed
   ranges (``awa.qs_open_receipts``) by rescue, prune, depth and ``awa.jobs``.
4. *No attempt left open by a stop* -- a stopping dispatcher lets a claim it
   already sent finish and runs its jobs (a cancelled claim statement may still
   commit); only then does shutdown's handling of in-flight handlers apply.
5. *One copy of history* -- a job completed while its ready entry is in the
   queue ring's current slot gets a ``done_entries`` row in that slot without
   args, naming the entry by ``ready_id``; the two go together when the slot is
   truncated, and ``awa.qs_done_rows`` (behind ``awa.jobs`` and the job lists)
   reads the args from the entry.  Failed and cancelled rows, and completions
   whose entry is in an older slot, stay whole.
"""

from __future__ import annotations

from functools import cache

from awa.schema.layout import QUEUE_STORAGE_LAYOUT_VERSION
from awa.storage.engine import Engine
from awa.storage.queue_storage.admin import QueueStorageAdmin
from awa.storage.queue_storage.batch_operations import QueueStorageBatchOperations
from awa.storage.queue_storage.callbacks import QueueStorageCallbacks
from awa.storage.queue_storage.cron_admin import QueueStorageCronAdmin
from awa.storage.queue_storage.enqueue import QueueStorageEnqueue
from awa.storage.queue_storage.execution import QueueStorageExecution
from awa.storage.queue_storage.maintenance import QueueStorageMaintenance
from awa.storage.queue_storage.reads import QueueStorageReads
from awa.storage.queue_storage.schema import (
    DEFAULT_SCHEMA,
    check_schema,
    install_queue_storage,
    install_queue_storage_sync,
)

NAME = "queue_storage"


class QueueStorageEngine(QueueStorageBatchOperations, QueueStorageEnqueue,
                         QueueStorageExecution, QueueStorageMaintenance, QueueStorageAdmin,
                         QueueStorageCallbacks, QueueStorageCronAdmin, QueueStorageReads):
    """The append-only engine behind ``awa.storage.engine.Engine``, its tables in ``schema``.

    Every statement it sends goes through ``self.sql`` (``schema.InSchema``), which
    names the layout's objects in this engine's schema.
    """

    name = NAME
    layout_version = QUEUE_STORAGE_LAYOUT_VERSION  # recorded in runtime_instances

    def __init__(self, schema: str = DEFAULT_SCHEMA) -> None:
        check_schema(schema)
        self.schema = schema


ENGINE = QueueStorageEngine()


@cache
def load(schema: str = DEFAULT_SCHEMA) -> Engine:
    """The loader ``awa.storage.ENGINES`` maps ``queue_storage`` to: one engine per schema."""
    return ENGINE if schema == DEFAULT_SCHEMA else QueueStorageEngine(schema)


__all__ = ["ENGINE", "NAME", "QueueStorageEngine", "install_queue_storage",
           "install_queue_storage_sync", "load"]
