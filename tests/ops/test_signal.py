"""Signal, not noise (issue 33): `diagnose all` is one line per check plus each problem's
evidence once, one row per runtime; dead runtimes read dead (not their last flags); a
completed failover is fixed; the exporter has no negative ages nor empty label values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest

import awa
from awa_ops.diagnose import CHECKS
from awa_ops.exporter import DatabaseCollector
from support.arrange import insert_job
from support.processes import start_worker
from support.server_connections import with_worker_processes


def add_runtime(db, *, host: str, age_s: float, leader: bool = False,
                shutting_down: bool = False, interval_ms: int = 200) -> str:
    instance = str(uuid.uuid4())
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version,
                      started_at, last_seen_at, snapshot_interval_ms, leader, maintenance_alive,
                      shutting_down, queues)
                  VALUES (%s, %s, 4242, '0.1.0', now() - interval '2 hours',
                          now() - make_interval(secs => %s), %s, %s, %s, %s, '["default"]')""",
               [instance, host, age_s, interval_ms, leader, leader, shutting_down])
    return instance


def diagnose_all(database_url: str, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "all",
                           "--database-url", database_url, "--heartbeat-staleness", "5",
                           "--election-interval", "0.2"],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.connections(with_worker_processes(1))
def test_diagnose_all_is_short_and_dead_runtimes_read_dead(database_url, db, tmp_path):
    worker = start_worker(database_url, "default:4")
    try:
        with awa.Client(database_url) as client:
            client.insert_many([{}] * 50, kind="fast")
        # Ten runtimes of an old demo run (history), and a former leader killed a minute ago.
        for i in range(10):
            add_runtime(db, host=f"old-{i}", age_s=7200, leader=(i == 0))
        add_runtime(db, host="killed", age_s=60, leader=True)
        add_runtime(db, host="stopped", age_s=60, shutting_down=True)
        out = diagnose_all(database_url, tmp_path)
        lines = out.stdout.splitlines()
        assert len(lines) <= 40, out.stdout
        # One line per check, each of the eleven.
        summary = lines[1:lines.index("")] if "" in lines else lines[1:]
        assert len(summary) == len(CHECKS), out.stdout  # one line per check
        # The killed runtime: one evidence row, read as gone (its leader flag is history);
        # the one that shut down reads stopped; no dead runtime shows flags as current.
        killed = [line for line in lines if "killed:4242" in line and " gone " in line]
        assert killed and all("was leader" in line for line in killed), out.stdout
        assert "True" not in "\n".join(line for line in lines if " gone " in line)
        # The failover is over (a live leader exists): no warning about it.
        assert "leader failover:" not in out.stdout
    finally:
        worker.terminate()


async def test_exporter_has_no_negative_ages_nor_empty_labels(database_url, db):
    # A heartbeat "in the future" (clock skew between a worker and the database).
    insert_job(db, "running", kind="fast", queue="mail", attempt=1,
               attempted_at=datetime.now(UTC), heartbeat_at=datetime.now(UTC) + timedelta(
                   seconds=5), deadline_at=datetime.now(UTC) + timedelta(hours=1))
    collector = DatabaseCollector(database_url)
    try:
        families = await collector.scrape()
    finally:
        await collector.close()
    samples = [s for f in families for s in f.samples]
    assert samples
    assert all(v != "" for s in samples for v in s.labels.values()), \
        [s for s in samples if "" in s.labels.values()]
    ages = [s for s in samples if s.name.endswith(("_age_seconds", "_age"))]
    assert ages and all(s.value >= 0 for s in ages), ages
    json.dumps([s.labels for s in samples])


@pytest.mark.connections(with_worker_processes(1))
async def test_runtimes_publish_their_heartbeat_timing_and_checks_use_it(database_url, tmp_path):
    from awa_ops.diagnose import Options, resolve_timing
    from awa_ops.session import OpsSession
    from awa_ops.storage import storage_engine

    worker = start_worker(database_url, "default:2")  # SHORT_INTERVALS: 100 ms / 1 s
    try:
        async with await OpsSession.open(database_url) as session:
            engine = await storage_engine(session)
            async with session.read():
                [instance] = await engine.runtime_instances(session.conn)
            assert (instance.heartbeat_interval_ms, instance.heartbeat_staleness_ms) == (100, 1000)
            resolved = await resolve_timing(session, Options())
            assert (resolved.heartbeat_interval_s, resolved.heartbeat_staleness_s) == (0.1, 1.0)
            # A flag overrides what the runtimes publish.
            flagged = await resolve_timing(session, Options(heartbeat_staleness_s=30))
            assert flagged.heartbeat_staleness_s == 30
        env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
        out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "heartbeats",
                              "--database-url", database_url], capture_output=True, text=True,
                             timeout=60, env=env)
        assert "1.0s" in out.stdout and "1.5m" not in out.stdout, out.stdout  # not the 90 s default
    finally:
        worker.terminate()


def test_overdue_needs_a_grace_of_one_heartbeat_interval(database_url, db, tmp_path):
    add_runtime(db, host="leader", age_s=0, leader=True, interval_ms=60_000)
    just_past = insert_job(db, "running", kind="k", queue="default", attempt=1,
                           attempted_at=datetime.now(UTC) - timedelta(minutes=1),
                           heartbeat_at=datetime.now(UTC),
                           deadline_at=datetime.now(UTC) - timedelta(seconds=2))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def classes(*flags: str) -> dict[int, str]:
        out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "stuck-running",
                              "--database-url", database_url, "--json", "-v", *flags],
                             capture_output=True, text=True, timeout=60, env=env)
        data = json.loads(out.stdout)
        return {row["job_id"]: row.get("class") for f in data["findings"]
                for row in f["evidence"] if "job_id" in row}

    assert classes("--heartbeat-interval", "10")[just_past] == "alive"  # within the grace
    assert classes("--heartbeat-interval", "0.5")[just_past] == "deadline overdue"
