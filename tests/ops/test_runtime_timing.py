"""Each runtime's own published heartbeat timing: `diagnose stuck-running` judges each
attempt by it (staleness, and the overdue grace of one heartbeat interval) and the exporter
each queue's attempts (flags override); the exporter reads leadership from the leader lock
as well as from the runtimes' snapshots (issue 33)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from awa import config
from awa_ops.exporter import DatabaseCollector
from support.arrange import insert_job


def add_runtime(db, *, host: str, queue: str, staleness_ms: int, interval_ms: int,
                leader: bool = False) -> str:
    """A live registry row publishing its heartbeat timing with its queue, as
    awa.runtime.snapshot writes it; returns its instance id."""
    instance = str(uuid.uuid4())
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version,
                      started_at, last_seen_at, snapshot_interval_ms, leader, maintenance_alive,
                      shutting_down, queues)
                  VALUES (%s, %s, 4242, '0.1.0', now() - interval '1 hour', now(), 10000,
                          %s, %s, false, %s)""",
               [instance, host, leader, leader, json.dumps([{
                   "queue": queue, "heartbeat_interval_ms": interval_ms,
                   "heartbeat_staleness_ms": staleness_ms}])])
    return instance


def add_silent_attempt(db, queue: str, silent_s: float, deadline_in_s: float = 3600) -> int:
    now = datetime.now(UTC)
    return insert_job(db, "running", kind="k", queue=queue, attempt=1,
                      attempted_at=now - timedelta(minutes=1),
                      heartbeat_at=now - timedelta(seconds=silent_s),
                      deadline_at=now + timedelta(seconds=deadline_in_s))


async def scrape(database_url: str, staleness_s: float | None = None) -> dict[str, dict]:
    collector = DatabaseCollector(database_url, staleness_s)
    try:
        families = await collector.scrape()
    finally:
        await collector.close()
    return {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
            for f in families}


def per_queue(families: dict[str, dict], name: str) -> dict[str, float]:
    return {dict(labels)["awa_job_queue"]: value for labels, value in families[name].items()}


async def test_each_queue_is_judged_by_its_runtimes_published_staleness(database_url, db):
    add_runtime(db, host="fast-w", queue="fast", staleness_ms=6_000, interval_ms=1_000)
    add_runtime(db, host="slow-w", queue="slow", staleness_ms=90_000, interval_ms=30_000)
    add_silent_attempt(db, "fast", 20)
    add_silent_attempt(db, "slow", 20)
    add_silent_attempt(db, "slow", 120)

    stale = per_queue(await scrape(database_url), "awa_db_running_heartbeat_stale")
    assert stale["fast"] == 1  # 20 s silent, past its runtime's 6 s
    assert stale["slow"] == 1  # only the 120 s one: 20 s is within 90 s

    # A cutoff given (--heartbeat-staleness) overrides what the runtimes publish.
    stale = per_queue(await scrape(database_url, 10.0), "awa_db_running_heartbeat_stale")
    assert stale == {**stale, "fast": 1, "slow": 2}


async def test_leader_present_while_a_runtime_holds_the_lock(database_url, db):
    add_runtime(db, host="new-leader", queue="default", staleness_ms=90_000,
                interval_ms=30_000, leader=False)
    leader = "awa_db_leader_present"
    assert list((await scrape(database_url))[leader].values()) == [0.0]
    with psycopg.connect(database_url, autocommit=True) as holder:
        # Its flag reaches the registry only with its next snapshot; the lock is the news.
        holder.execute("SELECT pg_advisory_lock(%s)", [config.ADVISORY_LOCK_LEADER])
        assert list((await scrape(database_url))[leader].values()) == [1.0]
    assert list((await scrape(database_url))[leader].values()) == [0.0]


def test_stuck_running_judges_each_attempt_by_its_runtimes_timing(database_url, db, tmp_path):
    add_runtime(db, host="fast-w", queue="fast", staleness_ms=6_000, interval_ms=1_000)
    add_runtime(db, host="slow-w", queue="slow", staleness_ms=90_000, interval_ms=30_000)
    ids = {"fast_silent": add_silent_attempt(db, "fast", 20),
           "slow_silent": add_silent_attempt(db, "slow", 20),
           "fast_late": add_silent_attempt(db, "fast", 0, deadline_in_s=-4),
           "slow_late": add_silent_attempt(db, "slow", 0, deadline_in_s=-4)}
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def classes(*flags: str) -> dict[str, str]:
        out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "stuck-running",
                              "--database-url", database_url, "--json", "-v", *flags],
                             capture_output=True, text=True, timeout=60, env=env)
        data = json.loads(out.stdout)
        found = {row["job_id"]: row.get("class") for f in data["findings"]
                 for row in f["evidence"] if "job_id" in row}
        # (alive attempts are listed only when nothing is wrong: not listed reads alive; the
        # flagged run below lists all four, so each is read)
        return {name: found.get(job_id, "alive") for name, job_id in ids.items()}

    # The fast runtime's 6 s cutoff and 1 s grace; the slow one's 90 s and 30 s.
    assert classes() == {"fast_silent": "stale", "slow_silent": "alive",
                         "fast_late": "deadline overdue", "slow_late": "alive"}
    # Flags override every runtime's own values.
    assert classes("--heartbeat-staleness", "10", "--heartbeat-interval", "2") == {
        "fast_silent": "stale", "slow_silent": "stale",
        "fast_late": "deadline overdue", "slow_late": "deadline overdue"}


async def test_exporter_counts_overdue_with_a_grace_of_its_runtimes_heartbeat_interval(
        database_url, db):
    """The exporter's deadline_overdue uses the console's and stuck-running's rule: past
    the deadline by more than one heartbeat interval of the attempt's runtime."""
    add_runtime(db, host="fast-w", queue="fast", staleness_ms=6_000, interval_ms=1_000)
    add_runtime(db, host="slow-w", queue="slow", staleness_ms=90_000, interval_ms=30_000)
    add_silent_attempt(db, "fast", 0, deadline_in_s=-4)  # 4 s past: beyond 1 s
    add_silent_attempt(db, "slow", 0, deadline_in_s=-4)  # within 30 s
    add_silent_attempt(db, "slow", 0, deadline_in_s=-60)  # beyond 30 s

    families = await scrape(database_url)
    overdue = per_queue(families, "awa_db_running_deadline_overdue")
    assert (overdue["fast"], overdue["slow"]) == (1, 1)
    assert per_queue(families, "awa_db_running_heartbeat_stale") == {
        **per_queue(families, "awa_db_running_heartbeat_stale"), "fast": 0, "slow": 0}


def test_heartbeats_check_judges_each_attempt_by_its_runtimes_staleness(database_url, db,
                                                                          tmp_path):
    """Not the largest staleness any runtime publishes (90 s here): the fast queue's
    attempt, 20 s silent, is stale by its own runtime's 6 s."""
    add_runtime(db, host="fast-w", queue="fast", staleness_ms=6_000, interval_ms=1_000)
    add_runtime(db, host="slow-w", queue="slow", staleness_ms=90_000, interval_ms=30_000)
    add_silent_attempt(db, "fast", 20)
    add_silent_attempt(db, "slow", 20)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def findings(*flags: str) -> list[dict]:
        out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "heartbeats",
                              "--database-url", database_url, "--json", *flags],
                             capture_output=True, text=True, timeout=60, env=env)
        return json.loads(out.stdout)["findings"]

    stale = [f for f in findings() if f["severity"] != "ok"]
    assert [f["evidence"][0]["queue"] for f in stale] == ["fast"], stale
    assert "1 of 1 running jobs" in stale[0]["summary"] and "cutoff 6.0s" in stale[0]["summary"]
    # A flag overrides every runtime's own cutoff.
    stale = [f for f in findings("--heartbeat-staleness", "10") if f["severity"] != "ok"]
    assert sorted(f["evidence"][0]["queue"] for f in stale) == ["fast", "slow"], stale


def test_diagnose_names_the_lock_holder_before_any_snapshot_does(database_url, db, tmp_path):
    """Several live runtimes, none flagged yet: `diagnose runtime` names the one whose lock
    connection says ``awa-leader <instance id>``; a holder that does not name itself is said
    to be unknown, not guessed."""
    from awa.runtime.leader import leader_application_name

    add_runtime(db, host="first-w", queue="default", staleness_ms=6_000, interval_ms=1_000)
    second = add_runtime(db, host="second-w", queue="default", staleness_ms=6_000,
                         interval_ms=1_000)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def runtime_check() -> dict:
        out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "runtime",
                              "--database-url", database_url, "--json"],
                             capture_output=True, text=True, timeout=60, env=env)
        return json.loads(out.stdout)

    for name, expect in ((leader_application_name(second), "leader second-w:4242"),
                         ("psql", "which does not name its runtime")):
        with psycopg.connect(database_url, autocommit=True, application_name=name) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", [config.ADVISORY_LOCK_LEADER])
            data = runtime_check()
        summaries = [f["summary"] for f in data["findings"]]
        assert any(expect in s for s in summaries), summaries
        if name != "psql":  # (unnamed, and no flag for the hour these rows ran: critical)
            assert all(f["severity"] == "ok" for f in data["findings"]), data["findings"]


@pytest.mark.engine("canonical")  # arranges claimed_by on jobs_hot rows directly
async def test_attempts_of_one_queue_are_judged_each_by_the_runtime_that_claimed_it(
        database_url, db, tmp_path):
    """Two runtimes serve one queue with different timing: each attempt is judged by the one
    that claimed it (recorded at claim), in the exporter and the heartbeats check alike."""
    fast = add_runtime(db, host="fast-w", queue="mixed", staleness_ms=6_000, interval_ms=1_000)
    slow = add_runtime(db, host="slow-w", queue="mixed", staleness_ms=90_000,
                       interval_ms=30_000)
    now = datetime.now(UTC)

    def attempt(claimer: str, silent_s: float, deadline_in_s: float) -> None:
        insert_job(db, "running", kind="k", queue="mixed", attempt=1, claimed_by=claimer,
                   attempted_at=now - timedelta(minutes=1),
                   heartbeat_at=now - timedelta(seconds=silent_s),
                   deadline_at=now + timedelta(seconds=deadline_in_s))

    attempt(fast, 20, 3600)  # stale by its runtime's 6 s
    attempt(slow, 20, 3600)  # within its runtime's 90 s
    attempt(fast, 0, -4)  # overdue past its runtime's 1 s grace
    attempt(slow, 0, -4)  # within its runtime's 30 s grace

    families = await scrape(database_url)
    assert per_queue(families, "awa_db_running_heartbeat_stale")["mixed"] == 1
    assert per_queue(families, "awa_db_running_deadline_overdue")["mixed"] == 1

    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "heartbeats",
                          "--database-url", database_url, "--json"],
                         capture_output=True, text=True, timeout=60, env=env)
    [stale] = [f for f in json.loads(out.stdout)["findings"] if f["severity"] != "ok"]
    assert "1 of 4 running jobs" in stale["summary"] and "cutoff 6.0s" in stale["summary"], stale
