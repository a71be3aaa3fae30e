"""Versions in the fleet: what each runtime speaks, the contract step's refusal, a newer
database left alone, and the migration's locks (expand/contract, docs/architecture.md).

The older runtime here is a registry row as a release before 0.2.0 writes it (no versions);
tests/upgrade/test_rolling.py runs real older workers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest

import awa
from awa.schema import current_migration_version
from awa.schema.layout import QUEUE_STORAGE_LAYOUT_VERSION
from upgrade import manifest
from upgrade.releases import build
from upgrade.rolling import CURRENT, Code


def add_older_runtime(db, host: str) -> None:
    """A live registry row of an older release (no schema or layout version)."""
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version,
                      last_seen_at, snapshot_interval_ms, queues)
                  VALUES (%s, %s, 4242, '0.1.0', now(), 10000, '[]')""",
               [str(uuid.uuid4()), host])


def awa_db(database_url: str) -> str:
    """`awa db`'s output."""
    done = subprocess.run(CURRENT.awa(database_url, "db"), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def diagnose_runtime(database_url: str, tmp_path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "runtime",
                          "--database-url", database_url, "--json"], capture_output=True,
                         text=True, timeout=60,
                         env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    return [f["summary"] for f in json.loads(out.stdout)["findings"]]


async def test_contract_waits_for_the_older_runtimes_and_the_fleet_says_it_is_mixed(
        database_url, db, test_engine, tmp_path):
    client = awa.AsyncClient(database_url)

    @client.task(dict, kind="k")
    async def k(job):
        return None

    await client.start([("default", 2)], snapshot_interval_ms=500)
    try:
        row = db.execute("SELECT schema_version, layout_version FROM awa.runtime_instances "
                         "WHERE instance_id = %s", [client.runtime.instance_id]).fetchone()
        layout = QUEUE_STORAGE_LAYOUT_VERSION if test_engine == "queue_storage" else None
        assert row == {"schema_version": current_migration_version(), "layout_version": layout}

        add_older_runtime(db, "old-host")
        # The commands run beside the loop, which keeps the runtime's snapshots going.
        rc, said = await asyncio.to_thread(CURRENT.contract, database_url)
        assert rc == 1 and said == (
            "error: contract refused: 1 live runtime(s) speak an older layout: old-host:4242 "
            "(awa-py 0.1.0, a release before versions were recorded); roll them to this "
            "release (or stop them), then run `awa migrate --contract` again")
        speaks = f"layout {layout}" if layout else f"schema {current_migration_version()}"
        said_db = await asyncio.to_thread(awa_db, database_url)
        assert (f"fleet:    1 runtime(s) on awa-py 0.1.0 (layout not recorded), 1 runtime(s) "
                f"on awa-py {awa.__version__} ({speaks})") in said_db
        assert ("contract: pending: 4 object(s) kept for older releases' runtimes"
                in said_db) == bool(layout)
        summaries = await asyncio.to_thread(diagnose_runtime, database_url, tmp_path)
        assert (f"mixed fleet (a rolling upgrade): 1 runtime on awa-py 0.1.0, layout not "
                f"recorded, 1 runtime on awa-py {awa.__version__}, {speaks}") in summaries

        # The older runtime stopped a minute ago.
        db.execute("UPDATE awa.runtime_instances SET last_seen_at = now() - interval '1 minute' "
                   "WHERE hostname = 'old-host'")
        summaries = await asyncio.to_thread(diagnose_runtime, database_url, tmp_path)
        pending = [s for s in summaries if s.startswith("contract step pending")]
        assert pending == ([f"contract step pending: 4 objects kept for older releases' "
                            f"runtimes, and every live runtime speaks awa-py "
                            f"{awa.__version__}, {speaks}"] if layout else []), summaries
        rc, said = await asyncio.to_thread(CURRENT.contract, database_url)
        assert rc == 0, said
        assert said.startswith("contracted: dropped 4 object(s)" if layout else
                               "nothing to contract: the canonical engine"), said
        summaries = await asyncio.to_thread(diagnose_runtime, database_url, tmp_path)
        assert not any("mixed fleet" in s or "contract step" in s for s in summaries), summaries
        assert "contract:" not in await asyncio.to_thread(awa_db, database_url)
    finally:
        await client.shutdown(5_000)
        await client.close()


def test_a_database_migrated_by_a_newer_release_is_left_unchanged(database_url, db):
    newer = current_migration_version() + 1
    db.execute("INSERT INTO awa.schema_version (version, description) VALUES (%s, 'newer')",
               [newer])
    before = manifest.installed(database_url)
    done = CURRENT.migrate(database_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and done.stdout.startswith(
        f"database is ahead of this awa-py (schema version {newer}"), done.stdout
    assert "nothing changed" in done.stdout
    assert manifest.installed(database_url) == before


def test_a_second_migrate_takes_no_lock(database_url, db):
    """The same install again is skipped: a table locked by a long transaction does not
    hold `awa migrate` up (nor would the migration hold the fleet up)."""
    with psycopg.connect(database_url) as holder:
        holder.execute("LOCK TABLE awa.queue_meta IN ACCESS SHARE MODE")
        started = time.monotonic()
        done = CURRENT.migrate(database_url)
        assert done.returncode == 0 and "already up to date" in done.stdout, done.stderr
        assert time.monotonic() - started < 10
        holder.rollback()


@pytest.mark.engine("queue_storage")
def test_an_install_another_release_changed_is_run_again(database_url, db):
    """bb0ffc4's `awa migrate` on this code's database drops the per-destination functions
    kept for 32a8704 (its install has the DROPs): this code's next `awa migrate` sees the
    objects changed and installs them again, where the same script alone would be skipped."""
    wrappers = "SELECT count(*) AS n FROM pg_proc WHERE proname = ANY('{qs_finalize,qs_retry}')"
    assert db.execute(wrappers).fetchone() == {"n": 2}
    older = Code.of(build("bb0ffc4")).migrate(database_url)
    assert older.returncode == 0, older.stderr
    assert db.execute(wrappers).fetchone() == {"n": 0}
    again = CURRENT.migrate(database_url)
    assert again.returncode == 0, again.stderr
    assert db.execute(wrappers).fetchone() == {"n": 2}


@pytest.mark.engine("queue_storage")
def test_a_migration_step_waits_behind_a_long_transaction_then_applies(database_url, db):
    """A step that cannot take its locks rolls back and tries again (never queued behind a
    long transaction with the fleet queued behind it); it applies once the holder ends."""
    db.execute("DELETE FROM awa.layout_installs")  # the install runs again, step by step
    holder = psycopg.connect(database_url)
    holder.execute("SELECT count(*) FROM awa.queue_meta")  # AccessShare, held
    release = threading.Timer(1.5, holder.rollback)
    release.start()
    try:
        # While the holder lives, a worker's statement on the same table is never stuck
        # behind the migration for longer than the lock timeout: probe it meanwhile.
        done: list[subprocess.CompletedProcess[str]] = []
        migrating = threading.Thread(target=lambda: done.append(CURRENT.migrate(database_url)))
        migrating.start()
        slowest = 0.0
        with psycopg.connect(database_url, autocommit=True) as probe:
            while migrating.is_alive():
                t = time.monotonic()
                probe.execute("SELECT count(*) FROM awa.queue_meta")
                slowest = max(slowest, time.monotonic() - t)
                time.sleep(0.01)
        migrating.join()
        assert done[0].returncode == 0, done[0].stderr
        assert slowest < 1.0, slowest
    finally:
        release.cancel()
        holder.close()
