"""Queue and job-kind descriptors declared by the client (issue: maintenance)."""

from __future__ import annotations


class DescriptorMixin:
    """Placeholder until its issue fills it in."""
