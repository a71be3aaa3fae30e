"""The transition's statements, read by name from ``transition.sql`` (never assembled)."""

from __future__ import annotations

from awa.statements import named_statements


def statements() -> dict[str, str]:
    """Every ``-- name:`` section of ``transition.sql``, its comment lines left out."""
    return named_statements(__package__ or "awa.storage.transition", "transition.sql")


def load(name: str) -> str:
    """The statement called ``name``."""
    return statements()[name]
