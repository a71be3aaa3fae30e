"""Handler registration, start and shutdown of the runtime (issue: worker runtime)."""

from __future__ import annotations


class WorkerMixin:
    """Worker role of the client; filled in by the worker-runtime issue."""

    def __init__(self) -> None:
        self._runtime = None

    async def _close_runtime(self) -> None:
        return None
