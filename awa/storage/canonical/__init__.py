"""Engine 1, canonical: one row per job in ``jobs_hot`` / ``scheduled_jobs``, updated in place.

Each module holds one group of the ``Engine`` protocol, the mixin whose methods run its
statements; the statements are whole in ``sql/<group>.sql`` (named queries, read once at
import by ``awa.statements.named_statements``), and Python only binds parameters.
"""

from __future__ import annotations

from awa.storage.canonical.admin import CanonicalAdmin
from awa.storage.canonical.adopt import CanonicalAdopt
from awa.storage.canonical.batch_operations import CanonicalBatchOperations
from awa.storage.canonical.callbacks import CanonicalCallbacks
from awa.storage.canonical.cron_admin import CanonicalCronAdmin
from awa.storage.canonical.enqueue import CanonicalEnqueue
from awa.storage.canonical.execution import CanonicalExecution
from awa.storage.canonical.maintenance import CanonicalMaintenance
from awa.storage.canonical.reads import CanonicalReads


class CanonicalEngine(CanonicalBatchOperations, CanonicalEnqueue, CanonicalExecution,
                      CanonicalMaintenance, CanonicalAdmin, CanonicalCallbacks, CanonicalCronAdmin,
                      CanonicalReads, CanonicalAdopt):
    """The row-per-job engine behind ``awa.storage.engine.Engine``."""

    name = "canonical"


ENGINE = CanonicalEngine()
