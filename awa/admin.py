"""Admin operations shared by the client and the `awa` CLI (issue: foundation)."""

from __future__ import annotations


class AdminMixin:
    """Operator functions of the client; filled in by the foundation issue."""
