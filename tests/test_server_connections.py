"""The test run's budget of server connections (tests/support/server_connections.py): what
keeps several process-starting tests on different xdist workers from running the shared
server out of connections."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from support.server_connections import ConnectionBudget


def _hold(budget: ConnectionBudget, wanted: int, events: list[str], name: str,
          release: threading.Event) -> None:
    with budget.reserve(wanted):
        events.append(f"{name} in")
        release.wait(10)
    events.append(f"{name} out")


def _start(budget: ConnectionBudget, wanted: int, events: list[str], name: str
           ) -> tuple[threading.Thread, threading.Event]:
    release = threading.Event()
    thread = threading.Thread(target=_hold, args=(budget, wanted, events, name, release))
    thread.start()
    return thread, release


def _wait_for(events: list[str], item: str) -> None:
    deadline = time.monotonic() + 10
    while item not in events:
        assert time.monotonic() < deadline, f"never saw {item!r}: {events}"
        time.sleep(0.01)


def test_a_reservation_waits_until_it_fits_and_a_large_one_is_not_overtaken(
        tmp_path: Path) -> None:
    budget = ConnectionBudget(10, tmp_path / "ledger")
    events: list[str] = []
    first, release_first = _start(budget, 6, events, "a")
    _wait_for(events, "a in")
    large, release_large = _start(budget, 8, events, "large")
    time.sleep(0.3)  # in line behind "a": 6 + 8 > 10
    small, release_small = _start(budget, 3, events, "small")
    time.sleep(0.3)
    # 6 + 3 would fit, but "large" came first: the small one waits its turn.
    assert events == ["a in"]
    release_first.set()
    _wait_for(events, "large in")
    time.sleep(0.3)
    assert "small in" not in events  # 8 + 3 > 10
    release_large.set()
    _wait_for(events, "small in")
    release_small.set()
    for thread in (first, large, small):
        thread.join(10)
    assert events.index("a out") < events.index("large in") < events.index("small in")


def test_a_small_one_passes_a_large_one_that_must_wait_for_another_large_one(
        tmp_path: Path) -> None:
    budget = ConnectionBudget(20, tmp_path / "ledger", light=4)
    events: list[str] = []
    heavy, release_heavy = _start(budget, 12, events, "heavy")
    _wait_for(events, "heavy in")
    large, release_large = _start(budget, 10, events, "large")  # 22 > 20: until heavy ends
    time.sleep(0.3)
    small, release_small = _start(budget, 3, events, "small")
    _wait_for(events, "small in")
    assert "large in" not in events
    release_heavy.set()
    _wait_for(events, "large in")  # 3 + 10 fit
    release_large.set()
    release_small.set()
    for thread in (heavy, large, small):
        thread.join(10)


def test_two_reservations_that_fit_together_hold_at_once(tmp_path: Path) -> None:
    budget = ConnectionBudget(10, tmp_path / "ledger")
    events: list[str] = []
    started = [_start(budget, 5, events, name) for name in ("a", "b")]
    _wait_for(events, "a in")
    _wait_for(events, "b in")
    for thread, release in started:
        release.set()
        thread.join(10)
    assert not list((tmp_path / "ledger").glob("held-*"))


def test_a_dead_process_reservation_is_not_counted(tmp_path: Path) -> None:
    budget = ConnectionBudget(10, tmp_path / "ledger")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    (tmp_path / "ledger" / f"held-1-{pid}-10").touch()
    (tmp_path / "ledger" / f"wait-2-{pid}-5").touch()
    with budget.reserve(10) as granted:
        assert granted == 10
    assert sorted(p.name for p in (tmp_path / "ledger").iterdir()) == ["counter", "lock"]


def test_more_than_the_whole_budget_is_clamped_to_it(tmp_path: Path) -> None:
    budget = ConnectionBudget(10, tmp_path / "ledger")
    with budget.reserve(40) as granted:
        assert granted == 10
