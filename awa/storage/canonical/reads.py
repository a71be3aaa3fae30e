"""Canonical engine: the reads group of the Engine protocol."""

from __future__ import annotations


class CanonicalReads:
    """Filled in by the reads group."""
