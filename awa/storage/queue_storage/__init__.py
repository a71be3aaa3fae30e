"""Engine 2, queue storage: append-only, vacuum-aware job storage (DESIGN §10).

Enqueue appends ``ready_entries``; claim appends a ``lease_claims`` receipt
and advances a per-lane claim head; finishing a batch appends one closure row
per claim slot (``lease_claim_closure_batches``, whose exclusion constraint
lets one of two closers of an attempt win) and a ``done_entries`` row per
job; only long attempts materialize into ``leases`` /
``attempt_state``.  ``awa/schema/queue_storage.sql`` holds the layout;
``install_queue_storage`` installs it.  Every group
of the Engine protocol is implemented (shared tables -- queue_meta, the DLQ,
unique claims, cron, runtimes, descriptors -- use canonical's statements);
``rings`` holds rotation and prune.  The default engine for new databases.
"""

from __future__ import annotations

from functools import cache

from awa.storage.engine import Engine
from awa.storage.queue_storage.admin import QueueStorageAdmin
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


class QueueStorageEngine(QueueStorageEnqueue, QueueStorageExecution, QueueStorageMaintenance,
                         QueueStorageAdmin, QueueStorageCallbacks, QueueStorageCronAdmin,
                         QueueStorageReads):
    """The append-only engine behind ``awa.storage.engine.Engine``, its tables in ``schema``.

    Every statement it sends goes through ``self.sql`` (``schema.InSchema``), which
    names the layout's objects in this engine's schema.
    """

    name = NAME

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
