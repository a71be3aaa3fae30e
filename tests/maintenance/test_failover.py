"""Leader failover with real worker subprocesses: SIGKILL the leader, another takes
over within the election interval and maintenance resumes; cron fires each slot once."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import pytest

import awa
from awa import config
from runtime.conftest import job_row, wait_until
from support.processes import start_worker
from support.server_connections import with_worker_processes

ELECTION_MS = 300
SETTINGS = {"leader_election_interval_ms": ELECTION_MS, "snapshot_interval_ms": 100,
            "cron_eval_interval_ms": 100}

LOCK_HOLDER = """
SELECT a.pid, a.application_name
  FROM pg_locks l JOIN pg_stat_activity a USING (pid)
 WHERE l.locktype = 'advisory' AND l.granted
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = %s"""


def lock_holders(db) -> list[dict]:
    return db.execute(LOCK_HOLDER, (config.ADVISORY_LOCK_LEADER,)).fetchall()


def leader_of(db, workers):
    """The worker whose runtime row says leader (the health query of the guide)."""
    rows = db.execute("""SELECT instance_id::text AS id FROM awa.runtime_instances
                          WHERE leader AND maintenance_alive
                            AND last_seen_at > now() - interval '1 second'""").fetchall()
    ids = {r["id"] for r in rows}
    leaders = [w for w in workers if w.alive and w.instance_id in ids]
    return leaders[0] if len(leaders) == 1 and len(ids) == 1 else None


@pytest.mark.connections(with_worker_processes(3))
def test_sigkilled_leader_is_replaced_within_the_election_interval(database_url, db):
    workers = [start_worker(database_url, "default:2", settings=SETTINGS) for _ in range(3)]
    try:
        leader = wait_until(lambda: leader_of(db, workers), timeout=10, message="a leader")
        assert len(lock_holders(db)) == 1
        # The lock connection names its runtime (what the console and diagnose read).
        assert lock_holders(db)[0]["application_name"] == f"awa-leader {leader.instance_id}"
        old_lock_pid = lock_holders(db)[0]["pid"]
        leader.kill()
        killed_at = time.monotonic()
        wait_until(lambda: [h for h in lock_holders(db) if h["pid"] != old_lock_pid],
                   timeout=5, interval=0.01, message="another runtime to take the lock")
        took = time.monotonic() - killed_at
        # Postgres drops the dead session's lock; the next attempt (<= one interval) wins.
        assert took < ELECTION_MS / 1000 + 1.0, took
        new_leader = wait_until(lambda: leader_of(db, workers), timeout=5,
                                message="the new leader's runtime row")
        assert new_leader is not leader
        # Maintenance resumes: a scheduled job is promoted and run by the survivors.
        with awa.Client(database_url) as client:
            job = client.insert({}, kind="fast", run_at=awa_now(db) + timedelta(seconds=0.3))
        wait_until(lambda: job_row(db, job.id)["state"] == "completed", timeout=10,
                   message="the scheduled job to be promoted and completed")
    finally:
        for w in workers:
            if w.alive:
                w.terminate()


def awa_now(db):
    return db.execute("SELECT now() AS now").fetchone()["now"]


@dataclass
class Tick:
    n: int


@pytest.mark.connections(with_worker_processes(3))
def test_cron_fires_every_slot_exactly_once_across_leader_kills(database_url, db):
    with awa.Client(database_url) as client:
        client.periodic("every_second", "* * * * * *", Tick, Tick(n=1), queue="cronq",
                        kind="fast", missed_fire_policy="catch_up")
        client.sync_cron_jobs()
    workers = [start_worker(database_url, "cronq:4", settings=SETTINGS) for _ in range(3)]
    try:
        for _ in range(2):
            leader = wait_until(lambda: leader_of(db, workers), timeout=10, message="a leader")
            time.sleep(1.5)
            leader.kill()
            workers.append(start_worker(database_url, "cronq:4", settings=SETTINGS))
        wait_until(lambda: leader_of(db, workers), timeout=10, message="a leader")
        time.sleep(1.5)
        # Freeze the schedule so the count is stable, then compare.
        db.execute("UPDATE awa.cron_jobs SET paused_at = now()")
        time.sleep(0.3)
        schedule = db.execute("SELECT created_at, last_enqueued_at FROM awa.cron_jobs"
                              ).fetchone()
        fired = [r["slot"] for r in db.execute(
            "SELECT (metadata->>'cron_slot')::timestamptz AS slot FROM awa.jobs "
            "WHERE metadata->>'cron_name' = 'every_second' ORDER BY 1")]
    finally:
        for w in workers:
            if w.alive:
                w.terminate()
    assert len(fired) >= 4
    assert len(fired) == len(set(fired)), "a slot fired twice"
    # Every second from the first slot to the last fired exactly once: no gaps
    # across the two failovers (catch_up) and no duplicates.
    expected = [fired[0] + timedelta(seconds=i) for i in range(len(fired))]
    assert fired == expected
    assert fired[-1] == schedule["last_enqueued_at"]
    assert fired[0] > schedule["created_at"]
