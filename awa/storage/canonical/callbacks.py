"""Canonical engine: the callbacks group of the Engine protocol."""

from __future__ import annotations


class CanonicalCallbacks:
    """Filled in by the callbacks group."""
