"""Producer: insert, insert_many, COPY, transactional enqueue (issue: foundation)."""

from __future__ import annotations


class ProducerMixin:
    """Insert paths of the client; filled in by the foundation issue."""
