"""A fleet of worker processes through a real PgBouncer in transaction mode (issue 35).

8 processes x 64 workers share PgBouncer's ``default_pool_size = 10`` server
connections, poll-only (no direct URL).  Judged by the handlers' execution log
(tests/topology/fleet.py), not by the database alone: every job completed exactly
once, a SIGKILLed worker's attempts rescued, the leader elected once and again after
its process is killed, cron fired once per tick.  One job in 20 sleeps 2 s, so the worker
killed always has attempts in flight, however loaded the machine; the log is read
incrementally, so a poll costs the new lines only.  Then the same through a PgBouncer
restarted mid-run: nothing lost, work resumes within 5 s.

``AWA_TOPOLOGY_FLEET_JOBS`` (default 50,000) and ``AWA_TOPOLOGY_RESTART_JOBS``
(default 20,000: the restart at 30% and the drain after it need no more) scale the runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import awa
from support.pgbouncer import PgBouncer
from support.polling import wait_until
from topology.fleet import ExecutionLog, Fleet

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("chaos")]

FLEET_JOBS = int(os.environ.get("AWA_TOPOLOGY_FLEET_JOBS", "50000"))
RESTART_JOBS = int(os.environ.get("AWA_TOPOLOGY_RESTART_JOBS", "20000"))
PROCESSES = 8
SLOTS = 64
SERVER_POOL = 10
JOB_MS = 2
# Every SLOW_EVERY-th job sleeps SLOW_MS: there are always attempts in flight to cut short
# when a worker is SIGKILLed, however loaded the machine (with only 2 ms jobs a poll of the
# log under load almost never caught a worker mid-attempt).  1 in 20 at 2 s adds about
# 10 s of slot time across the fleet's 512 slots.
SLOW_EVERY = 20
SLOW_MS = 2_000
# A handler that returned this soon before its process was killed may not have had its
# completion written: running it again is the kill's doing, not a double execution.
DELIVERY_WINDOW_S = 2.0
RESUME_WITHIN_S = 5.0
KILL_SETTLE_S = 5.0


def _insert(url: str, n: int, *, slow_every: int = 0) -> set[int]:
    """``n`` work jobs, inserted through ``url`` (the pooler); with ``slow_every``, every
    ``slow_every``-th one sleeps ``SLOW_MS``."""
    ids: set[int] = set()
    with awa.Client(url) as client:
        for first in range(0, n, 1000):
            count = min(1000, n - first)
            args = [{"ms": SLOW_MS if slow_every and (first + i) % slow_every == 0 else JOB_MS}
                    for i in range(count)]
            inserted = client.insert_many(args, kind="work", queue="work")
            ids.update(job.id for job in inserted)
    assert len(ids) == n
    return ids


def _done_count(fleet: Fleet) -> int:
    return len(fleet.read_log().dones)


OBSERVER = "fleet-test-observer"


def _server_backends(database_url: str) -> int | None:
    """Server connections to this test's database now, besides the observer's own: its
    earlier connections may still be exiting under load, so it names them and leaves them
    out.  None when the shared server refuses the observer a connection (max_connections):
    that sample is skipped, the fleet's own connections go through the pooler."""
    try:
        conn = psycopg.connect(database_url, autocommit=True, application_name=OBSERVER)
    except psycopg.OperationalError:
        return None
    with conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND application_name <> %s "
                           "AND backend_type = 'client backend'", (OBSERVER,)).fetchone()
    return int(row[0]) if row else 0


def _completed_work(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE kind = 'work' "
                           "AND state = 'completed'").fetchone()
    return int(row[0]) if row else 0


def _assert_exactly_once(log: ExecutionLog, ids: set[int], killed: dict[int, float]) -> int:
    """Every job done; more than once only where a killed process's run was cut short.
    Returns how many jobs were started again after a kill (rescued)."""
    missing = ids - set(log.dones)
    assert not missing, f"{len(missing)} jobs never completed, e.g. {sorted(missing)[:5]}"
    for job_id in ids:
        dones = log.dones[job_id]
        healthy = [d for d in dones if d[0] not in killed
                   or d[2] < killed[d[0]] - DELIVERY_WINDOW_S]
        # A done cut short by a kill may or may not have reached the database (the job's
        # state says which); every other one counts, and there is at most one of those.
        assert len(healthy) <= 1, f"job {job_id} completed {len(dones)} times: {dones}"
        leases = [s[1] for s in log.starts[job_id]]
        assert len(leases) == len(set(leases)), f"job {job_id}: one run_lease ran twice"
    return sum(1 for job_id in ids if len(log.starts[job_id]) > 1)


def _busiest(fleet: Fleet, pids: list[int]) -> int | None:
    """The process among ``pids`` with the most attempts started and not yet done."""
    in_flight = fleet.read_log().in_flight
    open_by = {pid: len(in_flight[pid]) for pid in pids if in_flight.get(pid)}
    return max(open_by, key=lambda pid: open_by[pid]) if open_by else None


def _leader_now(fleet: Fleet) -> int | None:
    """The live process whose last leadership line is ``on``."""
    state: dict[int, str] = {}
    for _, pid, what in fleet.read_log().leadership:
        state[pid] = what
    live = [pid for pid, what in state.items() if what == "on" and pid in fleet.alive()]
    assert len(live) <= 1, f"two live leaders at once: {live}"
    return live[0] if live else None


@pytest.fixture
def fleet_bouncer(admin_url: str):
    target = conninfo_to_dict(admin_url)
    with PgBouncer(target_host=str(target.get("host") or "127.0.0.1"),
                   target_port=int(target.get("port") or 5432),
                   default_pool_size=str(SERVER_POOL)) as bouncer:
        yield bouncer


def test_eight_workers_through_pgbouncer_complete_every_job_once(
        fleet_bouncer: PgBouncer, database_url: str, tmp_path: Path):
    dbname = str(conninfo_to_dict(database_url)["dbname"])
    url = fleet_bouncer.url(dbname)
    ids = _insert(url, FLEET_JOBS, slow_every=SLOW_EVERY)
    fleet = Fleet(url, tmp_path / "log", processes=PROCESSES, slots=SLOTS, cron=True)
    fleet.start()
    try:
        peak = pooled_peak = 0

        def progressed(fraction: float) -> bool:
            nonlocal peak, pooled_peak
            pooled_peak = max(pooled_peak, fleet_bouncer.server_connections(dbname))
            # PostgreSQL's side, unless a worker was killed in the last KILL_SETTLE_S: the
            # pooler closes a killed client's server connections and opens new ones, and
            # the old backends may still be exiting for a moment under load.
            if time.time() - max(fleet.killed.values(), default=0.0) > KILL_SETTLE_S:
                peak = max(peak, _server_backends(database_url) or 0)
            return _done_count(fleet) >= fraction * FLEET_JOBS

        wait_until(lambda: progressed(0.2), timeout=600, interval=0.5,
                   message="a fifth of the jobs done")
        leader = wait_until(lambda: _leader_now(fleet), timeout=30, message="a leader")
        assert [p for _, p, w in fleet.read_log().leadership if w == "on"] == [leader], \
            "the leader is elected once"
        # A worker with attempts in flight dies: its attempts are rescued by the others.
        others = [p for p in fleet.alive() if p != leader]
        victim = wait_until(lambda: _busiest(fleet, others), timeout=60, interval=0.05,
                            message="a worker with attempts in flight")
        fleet.kill(victim)
        wait_until(lambda: progressed(0.5), timeout=600, interval=0.5,
                   message="half of the jobs done")
        # The leader's process dies: one other process takes over.
        fleet.kill(leader)
        killed_at = time.time()
        successor = wait_until(lambda: _leader_now(fleet), timeout=30,
                               message="a new leader after the old one was killed")
        assert successor != leader
        new_terms = [(t, p) for t, p, w in fleet.read_log().leadership
                     if w == "on" and t >= killed_at - 0.5]
        assert [p for _, p in new_terms] == [successor], "re-elected once"
        wait_until(lambda: progressed(1.0), timeout=900, interval=1.0,
                   message=f"all {FLEET_JOBS} jobs done")
        # Cron: at least two minute boundaries in the run, each slot fired once.
        wait_until(lambda: len(fleet.read_log().crons) >= 2, timeout=150, interval=1.0,
                   message="two cron ticks")
        log = fleet.read_log()
        assert pooled_peak <= SERVER_POOL, \
            f"PgBouncer held {pooled_peak} server connections for a pool of {SERVER_POOL}"
        assert 0 < peak <= SERVER_POOL, \
            f"{peak} server connections for a pool of {SERVER_POOL}"
    finally:
        fleet.stop()
    rescued = _assert_exactly_once(log, ids, fleet.killed)
    # What the victim started and never finished: cut short by the kill (its 2 s jobs make
    # that certain), each run again to its end by another process.
    victim_open = {job_id for job_id, _ in log.in_flight[victim]}
    assert victim_open, "the SIGKILLed worker had no attempt in flight"
    assert rescued >= 1, "the killed worker's attempts were run again"
    unrescued = {job_id for job_id in victim_open
                 if not any(p != victim for p, _, _ in log.dones.get(job_id, []))}
    assert not unrescued, f"attempts cut short by the kill never rescued: {sorted(unrescued)}"
    for slot, runs in log.crons.items():
        assert len(runs) == 1, f"cron slot {slot} ran {len(runs)} times"
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT metadata->>'cron_slot') FROM awa.jobs "
                           "WHERE kind = 'tick'").fetchone()
    assert row is not None and row[0] == row[1] >= 2, f"cron jobs vs slots: {row}"
    assert _completed_work(database_url) == FLEET_JOBS


def test_pgbouncer_restarted_mid_run_loses_nothing_and_work_resumes(
        fleet_bouncer: PgBouncer, database_url: str, tmp_path: Path):
    dbname = str(conninfo_to_dict(database_url)["dbname"])
    url = fleet_bouncer.url(dbname)
    ids = _insert(url, RESTART_JOBS)
    fleet = Fleet(url, tmp_path / "log", processes=PROCESSES, slots=SLOTS)
    fleet.start()
    try:
        wait_until(lambda: _done_count(fleet) >= 0.3 * RESTART_JOBS, timeout=600,
                   interval=0.5, message="30% of the jobs done")
        fleet_bouncer.restart()  # SIGTERM: every client and server connection cut
        back_at = time.time()
        wait_until(lambda: fleet.read_log().last_done > back_at,
                   timeout=30, interval=0.1, message="a completion after the restart")
        first_after = min(t for t in fleet.read_log().done_times() if t > back_at)
        assert first_after - back_at <= RESUME_WITHIN_S, \
            f"work resumed {first_after - back_at:.1f}s after PgBouncer was back"
        wait_until(lambda: _done_count(fleet) >= RESTART_JOBS, timeout=900, interval=1.0,
                   message=f"all {RESTART_JOBS} jobs done")
        wait_until(lambda: _completed_work(database_url) == RESTART_JOBS, timeout=60,
                   interval=0.5, message="every completion written")
        log = fleet.read_log()
        assert fleet.alive() == list(fleet.procs), "no worker died of the restart"
    finally:
        fleet.stop()
    _assert_exactly_once(log, ids, fleet.killed)
