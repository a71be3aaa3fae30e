"""A budget of the shared test server's connections, shared by every pytest-xdist worker.

The test server allows ``max_connections`` (100 on the machines CI runs on) and must not be
reconfigured.  Most tests hold a handful of connections; a few start worker processes (each
a runtime with a pool of ten, two LISTEN sessions and the leader's) or a real awa-pg fleet,
and hold twenty to sixty.  When several of those ran on different workers at once the server
refused new clients (``too many clients already``) and an unrelated test failed.

So each test reserves, before its fixtures run, the most connections it holds at once:
``DEFAULT_RESERVATION`` unless it says more with ``@pytest.mark.connections(n)``.  A
reservation waits until it fits beside the others, first come first served (so a large one
is not starved by a stream of small ones).  The figures were measured: a sampler read
``pg_stat_activity`` every 100 ms through a whole suite run, and each marked test declares
its peak with room to spare.

The ledger is a directory of small files under one ``flock``: ``wait-<ticket>-<pid>`` for a
reservation in line, ``held-<ticket>-<pid>-<n>`` for one granted.  A file whose process has
died (a worker killed mid-test) is ignored and removed, so a crash does not leak slots.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from awa import config
from awa.runtime.runtime import connection_budget

# Connections kept out of every budget: the administrative connections that create and drop
# the test databases, a psql someone opens to look, the server's own margin for a spike
# the reservations did not foresee.
UNRESERVED = 10
# What a test that does not say reserves: a database fixture, a client pool that grows to a
# few connections, a CLI subprocess or two (the measured peak of unmarked tests was 11).
DEFAULT_RESERVATION = 12
POLL_S = 0.05
# The most one worker process (tests/support/worker_app.py, a default client) opens: the
# runtime's own rule at the default pool size.
WORKER_PROCESS = connection_budget(config.MAX_CONNECTIONS, listening=True, leader=True)["total"]


def with_worker_processes(count: int, *, besides: int = 4) -> int:
    """The reservation of a test that runs ``count`` worker processes at once, and holds
    ``besides`` connections of its own (its database fixture, its client's pool)."""
    return count * WORKER_PROCESS + besides


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ConnectionBudget:
    """Reservations against ``capacity`` connections, in one ledger directory."""

    def __init__(self, capacity: int, ledger: Path) -> None:
        self.capacity = capacity
        self.ledger = ledger
        ledger.mkdir(exist_ok=True)
        self._lock_path = self.ledger / "lock"
        self._counter_path = self.ledger / "counter"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _entries(self) -> tuple[list[tuple[int, Path]], int]:
        """The live waiters (ticket, file) and the sum of the live reservations; files of dead
        processes are removed on the way."""
        waiting: list[tuple[int, Path]] = []
        held = 0
        for path in self.ledger.iterdir():
            kind, _, rest = path.name.partition("-")
            if kind not in ("wait", "held"):
                continue
            fields = rest.split("-")
            if not _alive(int(fields[1])):
                path.unlink(missing_ok=True)
            elif kind == "wait":
                waiting.append((int(fields[0]), path))
            else:
                held += int(fields[2])
        return waiting, held

    def _take_ticket(self) -> int:
        with self._locked():
            text = self._counter_path.read_text() if self._counter_path.exists() else "0"
            ticket = int(text) + 1
            self._counter_path.write_text(str(ticket))
            (self.ledger / f"wait-{ticket}-{os.getpid()}").touch()
        return ticket

    @contextlib.contextmanager
    def reserve(self, wanted: int) -> Iterator[int]:
        """Hold ``wanted`` connections (at most the whole capacity) while the block runs."""
        wanted = max(1, min(wanted, self.capacity))
        ticket = self._take_ticket()
        pid = os.getpid()
        held_path = self.ledger / f"held-{ticket}-{pid}-{wanted}"
        try:
            while True:
                with self._locked():
                    waiting, held = self._entries()
                    first = min(t for t, _ in waiting) if waiting else ticket
                    if first == ticket and held + wanted <= self.capacity:
                        held_path.touch()
                        (self.ledger / f"wait-{ticket}-{pid}").unlink(missing_ok=True)
                        break
                time.sleep(POLL_S)
            yield wanted
        finally:
            with self._locked():
                (self.ledger / f"wait-{ticket}-{pid}").unlink(missing_ok=True)
                held_path.unlink(missing_ok=True)


def server_budget(admin_url: str, ledger: Path) -> ConnectionBudget:
    """The run's budget on the server at ``admin_url``: its max_connections less
    ``UNRESERVED``.  ``ledger``: a directory every worker of the run shares."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
    assert row is not None
    return ConnectionBudget(int(row[0]) - UNRESERVED, ledger)
