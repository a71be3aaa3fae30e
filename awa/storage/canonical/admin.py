"""Canonical engine: the admin group of the Engine protocol."""

from __future__ import annotations


class CanonicalAdmin:
    """Filled in by the admin group."""
