"""The transition's statements, read by name from ``transition.sql`` (never assembled)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_SECTION = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)


@cache
def statements() -> dict[str, str]:
    """Every ``-- name:`` section of ``transition.sql``, its comment lines left out."""
    text = resources.files(__package__).joinpath("transition.sql").read_text()
    parts = _SECTION.split(text)[1:]
    found = {}
    for name, body in zip(parts[::2], parts[1::2], strict=True):
        lines = [line for line in body.splitlines() if line and not line.startswith("--")]
        found[name] = "\n".join(lines).strip()
    return found


def load(name: str) -> str:
    """The statement called ``name``."""
    return statements()[name]
