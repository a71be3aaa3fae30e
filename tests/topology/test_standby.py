"""Ops tools pointed at a hot standby (issue 35): a private primary + standby pair
(``pg_basebackup -R``, the ``replica_pair`` fixture of tests/conftest.py).

`awa-ops diagnose all` runs on the standby without attempting a write (the standby
would refuse it and say so in its log), reports that it is a standby and its lag,
and names the command for the checks only the primary can answer -- or runs them
there with ``--primary-url``.  The exporter reports the standby and its lag.  The
console opens read-only on its own and shows the lag.  ``hot_standby_feedback`` is
named as a horizon source on the primary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import psycopg
import pytest

import awa
from awa_ops.exporter import DatabaseCollector
from support.polling import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("standby")]

NEEDS_PRIMARY = ("mvcc-horizon", "cancel-listener", "dead-tuples", "enqueue")
# What a standby says when anything tries to write (or NOTIFY) on it.
REFUSED_WRITE = ("read-only transaction", "during recovery")


@dataclass
class Ping:
    n: int


@pytest.fixture(scope="module")
def primary_with_workers(replica_pair):
    """A runtime on the primary that has run a few jobs and is still running."""
    import asyncio
    import threading

    ready = threading.Event()
    stop = threading.Event()

    async def run() -> None:
        client = awa.AsyncClient(replica_pair.primary_url)

        @client.task(Ping)
        async def handle(job):  # noqa: ANN001 -- awa hands a Job[Ping]
            return None

        await client.insert_many([Ping(n=i) for i in range(20)])
        await client.start([("default", 4)], poll_interval_ms=50, snapshot_interval_ms=200,
                           leader_election_interval_ms=100)
        while not stop.is_set():
            if client.runtime is not None and client.runtime.health.leader:
                ready.set()
            await asyncio.sleep(0.05)
        await client.close()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(60), "the primary's runtime never led"
    replica_pair.wait_replayed()
    yield replica_pair
    stop.set()
    thread.join(30)


def _standby_log(pair) -> str:
    return (pair.standby.base / "log").read_text(errors="replace")


def _ops(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "awa_ops.cli", *args], capture_output=True,
                          text=True, timeout=120)


def _checks(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    data = json.loads(done.stdout)
    return {r["check"]: r for r in data.get("checks", [data])}


def test_diagnose_all_on_the_standby_reads_only_and_says_what_to_run_on_the_primary(
        primary_with_workers):
    pair = primary_with_workers
    before = len(_standby_log(pair))
    done = _ops("diagnose", "all", "--database-url", pair.standby_url, "--json")
    assert done.returncode in (0, 1, 2), done.stderr  # not "could not run"
    results = _checks(done)
    assert all(r["status"] != "could not run" for r in results.values()), results
    replication = results["replication"]["findings"][0]
    assert replication["summary"].startswith("this is a hot standby (read-only): replay lag")
    assert "--primary-url" in replication["next_step"]
    for name in NEEDS_PRIMARY:
        finding = results[name]["findings"][0]
        assert finding["summary"].startswith(f"{name} not checked: this is a hot standby")
        assert finding["next_step"].startswith(f"awa-ops diagnose {name} --database-url")
    # The replicated tables were read: the primary's live runtime is seen from here.
    assert any("live" in f["summary"] for f in results["runtime"]["findings"])
    written = _standby_log(pair)[before:]
    assert not any(word in written for word in REFUSED_WRITE), written[-2000:]


def test_diagnose_with_primary_url_runs_those_checks_on_the_primary(primary_with_workers):
    pair = primary_with_workers
    done = _ops("diagnose", "all", "--database-url", pair.standby_url, "--primary-url",
                pair.primary_url, "--json")
    assert done.returncode in (0, 1, 2), done.stderr
    results = _checks(done)
    for name in NEEDS_PRIMARY:
        assert "(on the primary, --primary-url)" in results[name]["engine"]
        assert not results[name]["findings"][0]["summary"].endswith("are the primary's")
    summary = results["replication"]["findings"][0]["summary"]
    assert "bytes behind the primary" in summary
    # The leader lock is read from the primary's pg_locks: held by the running leader.
    runtime = " ".join(f["summary"] for f in results["runtime"]["findings"])
    assert "leader" in runtime
    # A --primary-url that is a standby too is refused in one line.
    wrong = _ops("diagnose", "mvcc-horizon", "--database-url", pair.standby_url,
                 "--primary-url", pair.standby_url, "--json")
    message = _checks(wrong)["mvcc-horizon"]["error"]
    assert "reaches a hot standby too" in message and "\n" not in message


async def test_exporter_on_the_standby_reports_it_and_its_lag(primary_with_workers):
    pair = primary_with_workers
    collector = DatabaseCollector(pair.standby_url)
    try:
        families = {f.name: f for f in await collector.scrape()}
    finally:
        await collector.close()
    success = families["awa_db_exporter_scrape_success"].samples[0].value
    assert success == 1.0
    assert families["awa_db_replication_standby"].samples[0].value == 1.0
    assert families["awa_db_replication_replay_lag_seconds"].samples[0].value >= 0.0
    assert "awa_db_queue_depth" in families
    primary = DatabaseCollector(pair.primary_url)
    try:
        on_primary = {f.name: f for f in await primary.scrape()}
    finally:
        await primary.close()
    assert on_primary["awa_db_replication_standby"].samples[0].value == 0.0
    # On the primary: its furthest-behind standby (this one), a number.
    assert on_primary["awa_db_replication_replay_lag_bytes"].samples[0].value >= 0.0


async def test_console_on_the_standby_opens_read_only_on_its_own_and_shows_lag(
        primary_with_workers):
    from tui.conftest import running_console, screen_text

    pair = primary_with_workers
    async with running_console(pair.standby_url) as (app, pilot):
        assert app.read_only
        text = screen_text(app)
        assert "READ-ONLY" in text and "STANDBY" in text and "replay lag" in text
        assert app.refused_read_only("pause")
        assert app.notice.startswith("pause: not available: the console is read-only "
                                     "(a hot standby")


def test_hot_standby_feedback_is_named_as_a_horizon_source(primary_with_workers):
    pair = primary_with_workers
    pair.set_hot_standby_feedback(True)
    with psycopg.connect(pair.standby_url) as reader:
        # A snapshot held on the standby: its xmin reaches the primary through feedback.
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM awa.runtime_instances")
        wait_until(lambda: _feedback_xmin(pair.primary_url), timeout=30,
                   message="the standby's feedback xmin on the primary")
        done = _ops("diagnose", "mvcc-horizon", "--database-url", pair.primary_url, "--json")
        reader.rollback()
    findings = _checks(done)["mvcc-horizon"]["findings"]
    named = [f for f in findings if "hot_standby_feedback" in f["summary"]]
    assert named, findings
    standby_side = _ops("diagnose", "replication", "--database-url", pair.standby_url, "--json")
    pair.set_hot_standby_feedback(False)
    why = _checks(standby_side)["replication"]["findings"][0]["why"]
    assert "hot_standby_feedback = on" in why


def _feedback_xmin(primary_url: str) -> bool:
    with psycopg.connect(primary_url, autocommit=True) as conn:
        row = conn.execute("SELECT bool_or(backend_xmin IS NOT NULL) FROM pg_stat_replication"
                           ).fetchone()
    return bool(row and row[0])


async def test_workers_pointed_at_the_standby_are_refused_in_one_line(primary_with_workers):
    client = awa.AsyncClient(primary_with_workers.standby_url)

    @client.task(Ping)
    async def handle(job):  # noqa: ANN001 -- awa hands a Job[Ping]
        return None

    try:
        with pytest.raises(awa.DatabaseError, match="reaches a hot standby") as err:
            await client.start([("default", 1)])
    finally:
        await client.close()
    assert "\n" not in str(err.value)
