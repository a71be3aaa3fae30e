"""Which canonical table holds which states: the one split every statement on the
canonical tables uses (canonical's own, and queue storage's reads of them)."""

from __future__ import annotations

from awa import lifecycle

DEFERRED_STATES = ("scheduled", "retryable")
"""States whose rows live in ``awa.scheduled_jobs``; every other state in ``awa.jobs_hot``."""


def depth_states_by_table() -> dict[str, list[str]]:
    """``lifecycle.DEPTH_STATES`` split by table, as the ``hot_states`` / ``deferred_states``
    parameters of the depth statements."""
    return {"hot_states": [s for s in lifecycle.DEPTH_STATES if s not in DEFERRED_STATES],
            "deferred_states": [s for s in lifecycle.DEPTH_STATES if s in DEFERRED_STATES]}


def state_list(states: list[str]) -> str:
    """A constant SQL list of state literals (from the lifecycle constants, never user input)."""
    return ", ".join(f"'{state}'" for state in states)
