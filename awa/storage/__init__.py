"""Storage engines: every job-table statement lives below this package.

``open_engine`` decides from the database which engine serves it; the
client, the CLI, ``awa-ops``, ``awa-tui`` and ``awa serve`` all go through it.
"""

from __future__ import annotations

from typing import Any

from awa.storage.engine import Engine


async def open_engine(conn_or_pool: Any) -> Engine:
    """The engine that serves this database (today: canonical only)."""
    from awa.storage.canonical import ENGINE
    return ENGINE
