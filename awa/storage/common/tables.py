"""Which canonical table holds which states: the one split every statement on the
canonical tables uses (canonical's own, and queue storage's reads of them)."""

from __future__ import annotations

from awa import lifecycle

DEFERRED_STATES = ("scheduled", "retryable")
"""States whose rows live in ``awa.scheduled_jobs``; every other state in ``awa.jobs_hot``."""
HOT_STATES = ("available", "running", "waiting_external", "completed", "failed", "cancelled")
"""States whose rows live in ``awa.jobs_hot``."""


def depth_states_by_table() -> dict[str, list[str]]:
    """``lifecycle.DEPTH_STATES`` split by table, as the ``hot_states`` / ``deferred_states``
    parameters of the depth statements."""
    return {"hot_states": [s for s in lifecycle.DEPTH_STATES if s not in DEFERRED_STATES],
            "deferred_states": [s for s in lifecycle.DEPTH_STATES if s in DEFERRED_STATES]}


def state_list(states: list[str]) -> str:
    """A constant SQL list of state literals (from the lifecycle constants, never user input)."""
    return ", ".join(f"'{state}'" for state in states)


# Depth per (queue, state) in the canonical tables, each state counted in its table: a
# branch of both engines' queue statistics (queue storage counts these tables too, empty
# on a database it laid out).  Served by the (state, queue, id) index of each table.
_DEPTH = depth_states_by_table()
CANONICAL_DEPTH_COUNTS = f"""SELECT queue, state, count(*) AS n FROM awa.jobs_hot
     WHERE state IN ({state_list(_DEPTH["hot_states"])})
     GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*) FROM awa.scheduled_jobs
     WHERE state IN ({state_list(_DEPTH["deferred_states"])})
     GROUP BY queue, state"""
