"""A budget of the shared test server's connections, shared by every pytest-xdist worker.

The test server allows ``max_connections`` (100 on the machines CI runs on) and must not be
reconfigured.  Most tests hold a handful of connections; a few start worker processes (each
a runtime with a pool of ten, two LISTEN sessions and the leader's) or a real awa-pg fleet,
and hold twenty to sixty.  When several of those ran on different workers at once the server
refused new clients (``too many clients already``) and an unrelated test failed.

So each test reserves, before its fixtures run, the most connections it holds at once:
``DEFAULT_RESERVATION`` unless it says more with ``@pytest.mark.connections(n)``.  A
reservation waits until it fits beside the others, in turn (``ConnectionBudget``: a large
one is not starved by a stream of small ones).  The figures were measured: a sampler read
``pg_stat_activity`` every 100 ms through a whole suite run, and each marked test declares
its peak with room to spare.

The ledger is a directory of small files under one ``flock``: ``wait-<ticket>-<pid>-<n>``
for a reservation in line, ``held-<ticket>-<pid>-<n>`` for one granted.  A file whose
process has died (a worker killed mid-test) is ignored and removed, so a crash does not
leak slots.
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
        os.kill(pid, 0)  # no signal sent: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's
    return True


class ConnectionBudget:
    """Reservations against ``capacity`` connections, in one ledger directory.

    A reservation is granted when it fits beside those held and no older one in line could
    fit once the light reservations (at most ``light``) now held are done.  So a large
    reservation waits only for the short tests ahead of it, never for ever; and while it
    cannot fit until a large one ends, small ones do not wait behind it.
    """

    def __init__(self, capacity: int, ledger: Path, light: int = DEFAULT_RESERVATION) -> None:
        self.capacity = capacity
        self.light = light
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

    def _ledger(self) -> tuple[dict[int, int], list[int]]:
        """The live waiters (ticket: connections wanted) and the live reservations held;
        files of dead processes are removed on the way."""
        waiting: dict[int, int] = {}
        held: list[int] = []
        for path in self.ledger.iterdir():
            kind, _, rest = path.name.partition("-")
            if kind not in ("wait", "held"):
                continue
            ticket, pid, wanted = (int(field) for field in rest.split("-"))
            if not _alive(pid):
                path.unlink(missing_ok=True)
            elif kind == "wait":
                waiting[ticket] = wanted
            else:
                held.append(wanted)
        return waiting, held

    def _grantable(self, ticket: int, wanted: int) -> bool:
        waiting, held = self._ledger()
        if sum(held) + wanted > self.capacity:
            return False
        heavy_held = sum(n for n in held if n > self.light)
        return not any(older < ticket and n + heavy_held <= self.capacity
                       for older, n in waiting.items())

    @contextlib.contextmanager
    def reserve(self, wanted: int) -> Iterator[int]:
        """Hold ``wanted`` connections (at most the whole capacity) while the block runs."""
        wanted = max(1, min(wanted, self.capacity))
        pid = os.getpid()
        with self._locked():
            text = self._counter_path.read_text() if self._counter_path.exists() else "0"
            ticket = int(text) + 1
            self._counter_path.write_text(str(ticket))
            waiting_path = self.ledger / f"wait-{ticket}-{pid}-{wanted}"
            waiting_path.touch()
        held_path = self.ledger / f"held-{ticket}-{pid}-{wanted}"
        try:
            while True:
                with self._locked():
                    if self._grantable(ticket, wanted):
                        held_path.touch()
                        waiting_path.unlink()
                        break
                time.sleep(POLL_S)
            yield wanted
        finally:
            with self._locked():
                waiting_path.unlink(missing_ok=True)
                held_path.unlink(missing_ok=True)


def server_budget(admin_url: str, ledger: Path) -> ConnectionBudget:
    """The run's budget on the server at ``admin_url``: its max_connections less
    ``UNRESERVED``.  ``ledger``: a directory every worker of the run shares."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
    assert row is not None
    return ConnectionBudget(int(row[0]) - UNRESERVED, ledger)
