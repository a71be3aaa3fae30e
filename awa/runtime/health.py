"""A runtime's liveness flags, shared by the parts that set them and the ones that report
them: the dispatchers, completion batcher and heartbeat set ``postgres_connected``,
maintenance sets ``leader`` and ``maintenance_alive``; the snapshot, ``/readyz`` and
``client.health_check()`` read them, after ``refresh`` recomputes the loop flags from the
probes the runtime registered (``watch``)."""

from __future__ import annotations

import time
from collections.abc import Callable


def _alive() -> bool:
    return True


class Health:
    """Mutable liveness flags; maintenance sets ``leader`` and ``maintenance_alive``."""

    def __init__(self) -> None:
        self.leader = False
        self.maintenance_alive = False
        self.heartbeat_alive = True
        self.poll_loop_alive = True
        self._postgres_connected = True
        self.shutting_down = False
        # When this process last saw the database come back after losing it
        # (time.monotonic()); None while it never lost it.
        self.database_back_at: float | None = None
        # What refresh() asks: every dispatcher loop runs; the heartbeat beat lately.
        self._poll_loops_alive: Callable[[], bool] = _alive
        self._heartbeat_alive: Callable[[], bool] = _alive

    def watch(self, *, poll_loops_alive: Callable[[], bool],
              heartbeat_alive: Callable[[], bool]) -> None:
        """The probes ``refresh`` recomputes the loop flags from (the runtime's parts)."""
        self._poll_loops_alive = poll_loops_alive
        self._heartbeat_alive = heartbeat_alive

    @property
    def postgres_connected(self) -> bool:
        return self._postgres_connected

    @postgres_connected.setter
    def postgres_connected(self, value: bool) -> None:
        if value and not self._postgres_connected:
            self.database_back_at = time.monotonic()
        self._postgres_connected = value

    def database_steady_for(self) -> float:
        """Seconds the database has answered since this process last lost it (inf: never lost)."""
        if not self._postgres_connected:
            return 0.0
        if self.database_back_at is None:
            return float("inf")
        return time.monotonic() - self.database_back_at

    @property
    def healthy(self) -> bool:
        return (self.postgres_connected and self.poll_loop_alive and self.heartbeat_alive
                and not self.shutting_down)

    def refresh(self) -> None:
        """Recompute the loop flags from the tasks themselves."""
        if self.shutting_down:
            return
        self.poll_loop_alive = self._poll_loops_alive()
        self.heartbeat_alive = self._heartbeat_alive()
