"""The optional parts of awa-py, and the pip extra that installs each.

``pip install awa-py`` gives the runtime, the ``awa`` command and metrics.
The rest is installed by an extra (pyproject.toml ``[project.optional-dependencies]``):

    ops        awa-ops generate: Grafana dashboards and alert rules
    tui        awa-tui and `awa serve`: the console, in a terminal or a browser
    callbacks  `awa callbacks serve`: the HTTP callback receiver
    embedded   the embedded PostgreSQL used when no database is configured
    all        every extra above

Code that needs one of them imports it where it is used, after ``require``,
so a missing extra is one line naming the command that installs it.
"""

from __future__ import annotations

import importlib.util

from awa.job import AwaError

DISTRIBUTION = "awa-py"

# extra -> the modules only it makes importable (by import name).  The ops extra also lists
# pyyaml, which awa_ops.generate imports, but cel-python (a core dependency) installs it anyway.
MODULES: dict[str, tuple[str, ...]] = {
    "ops": ("grafana_foundation_sdk",),
    "tui": ("textual", "textual_serve", "textual_plotext", "fastapi", "uvicorn", "websockets"),
    "callbacks": ("uvicorn",),
    "embedded": ("pgserver",),
}


class MissingExtra(AwaError):
    """A feature whose extra is not installed; the message says how to install it."""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    return [m for m in MODULES[extra] if importlib.util.find_spec(m) is None]


def install_hint(extra: str, feature: str) -> str:
    """One line: ``awa-tui needs the tui extra: pip install 'awa-py[tui]'``."""
    return f"{feature} needs the {extra} extra: pip install '{DISTRIBUTION}[{extra}]'"


def require(extra: str, feature: str) -> None:
    """Raise ``MissingExtra`` (one line) unless every module of ``extra`` is importable."""
    if missing_modules(extra):
        raise MissingExtra(install_hint(extra, feature))
