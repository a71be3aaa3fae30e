"""Which canonical table holds which states: the one split every statement on the
canonical tables uses (canonical's own, and queue storage's reads of them)."""

from __future__ import annotations

from awa import lifecycle
from awa.statements import named_statements

DEFERRED_STATES = ("scheduled", "retryable")
"""States whose rows live in ``awa.scheduled_jobs``; every other state in ``awa.jobs_hot``."""
HOT_STATES = ("available", "running", "waiting_external", "completed", "failed", "cancelled")
"""States whose rows live in ``awa.jobs_hot``."""


def depth_states_by_table() -> dict[str, list[str]]:
    """``lifecycle.DEPTH_STATES`` split by table, as the ``hot_states`` / ``deferred_states``
    parameters of the depth statements."""
    return {"hot_states": [s for s in lifecycle.DEPTH_STATES if s not in DEFERRED_STATES],
            "deferred_states": [s for s in lifecycle.DEPTH_STATES if s in DEFERRED_STATES]}


# Depth per (queue, state) in the canonical tables, each state counted in its table: a
# branch of both engines' queue statistics (``sql/admin.sql``; its state lists are
# ``depth_states_by_table()`` written out, which tests/storage/test_common_statements.py checks).
CANONICAL_DEPTH_COUNTS = named_statements("awa.storage.common",
                                          "sql/admin.sql")["canonical_depth_counts"]
