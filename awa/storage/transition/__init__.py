"""The live switch of storage engines, canonical -> queue storage (and back while it runs).

``state`` holds the transition's state in the database, its steps (prepare, enter-mixed,
finalize, abort) and what blocks each; ``engine`` the composing layer that serves a database
while it is canonical or in a transition (``TransitionEngine``).  Statements are in
``transition.sql``.  docs/production.md, "Choosing and switching storage engines", is the
operator's guide; docs/architecture.md §5 the design.
"""

from __future__ import annotations

from collections.abc import Callable

from awa.storage.engine import Engine
from awa.storage.transition.state import (
    ABORTING,
    ACTIVE,
    CANONICAL,
    MIXED,
    PREPARED,
    ROLES,
    STATES,
    TRANSITION_MIGRATION,
    TransitionRefused,
    TransitionState,
    TransitionStatus,
    abort_steps,
    canonical_backlog_steps,
    enter_mixed_steps,
    finalize_steps,
    note_installed_steps,
    prepare_steps,
    read_steps,
    status_steps,
)


def engine_over(canonical: Engine, state: TransitionState,
                queue_loader: Callable[[str], Engine]) -> Engine:
    """The transition layer over canonical's engine and queue storage's (loaded by
    ``queue_loader`` from its schema once the state needs it)."""
    from awa.storage.transition.engine import TransitionEngine

    return TransitionEngine(canonical, state, queue_loader)


__all__ = ["ABORTING", "ACTIVE", "CANONICAL", "MIXED", "PREPARED", "ROLES", "STATES",
           "TRANSITION_MIGRATION", "TransitionRefused", "TransitionState", "TransitionStatus",
           "abort_steps", "canonical_backlog_steps", "engine_over", "enter_mixed_steps",
           "finalize_steps", "note_installed_steps", "prepare_steps", "read_steps", "status_steps"]
