"""The live switch's steps one by one, without load (tests/upgrade/test_engine_switch.py runs
them under load): what each refuses and says in one line, where jobs go in each state, the
0.6.9 storage_status document, and the finding `awa-ops diagnose schema` makes of it.

The runtimes here are registry rows (a live one of this release, one of an older release);
the load test runs real workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest

import awa
from awa import config
from awa.schema import current_migration_version
from upgrade.rolling import CURRENT


@dataclass
class Ping:
    n: int = 0


def storage(url: str, *args: str) -> tuple[int, str]:
    done = subprocess.run(CURRENT.awa(url, "storage", *args), capture_output=True, text=True,
                          timeout=60)
    return done.returncode, (done.stdout or done.stderr).strip()


def add_runtime(db, host: str, schema_version: int | None) -> None:
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version,
                      last_seen_at, snapshot_interval_ms, queues, schema_version)
                  VALUES (%s, %s, 4242, '0.x', now() + interval '1 hour', 10000, '[]', %s)""",
               [str(uuid.uuid4()), host, schema_version])


def diagnose_schema(url: str, tmp_path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "schema",
                          "--database-url", url, "--json"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "XDG_STATE_HOME": str(tmp_path)})
    return [f["severity"] + " " + f["summary"] for f in json.loads(out.stdout)["findings"]]


def in_queue_storage(db, job_id: int) -> bool:
    return db.execute("SELECT count(*) AS n FROM awa.ready_entries WHERE job_id = %s",
                      (job_id,)).fetchone()["n"] == 1


@pytest.mark.engine("canonical")
async def test_each_step_refuses_in_one_line_and_jobs_go_where_the_state_says(
        database_url, db, tmp_path):
    url = database_url
    rc, said = storage(url, "status")
    assert rc == 0 and said.startswith("canonical serves this database"), said
    assert storage(url, "finalize") == (1, "error: finalize refused: state is canonical, not "
                                           "mixed_transition")
    rc, said = storage(url, "prepare", "--dry-run")
    assert rc == 0 and said.startswith("dry run: would lay queue storage out in schema 'awa'")
    assert "it would be refused now: no live runtime of this release" in said
    assert db.execute("SELECT state FROM awa.storage_transition").fetchone()["state"] == (
        "canonical")
    assert storage(url, "prepare", "--schema", "Bad-Name")[0] == 1
    assert storage(url, "prepare")[1].startswith("prepared: queue storage laid out in schema 'awa'")

    client = awa.AsyncClient(url)
    try:
        before = await client.insert(Ping(1), queue="q")  # canonical, the state says
        rc, said = storage(url, "enter-mixed")
        assert (rc, said) == (1, "error: enter-mixed refused: no live runtime of this release "
                                 "claims from queue storage (role auto or queue_storage_target):"
                                 " start one first, or new jobs would wait")
        add_runtime(db, "new-host", current_migration_version())
        add_runtime(db, "old-host", None)
        rc, said = storage(url, "enter-mixed")
        assert rc == 1 and "\n" not in said and said.startswith(
            "error: enter-mixed refused: 1 live runtime(s) of a release that knows nothing of "
            "the transition: old-host:4242 (awa-py 0.x)"), said
        db.execute("DELETE FROM awa.runtime_instances WHERE hostname = 'old-host'")
        rc, said = storage(url, "enter-mixed")
        assert rc == 0 and said.startswith("mixed transition entered"), said
        assert storage(url, "enter-mixed") == (0, "already in mixed_transition")

        # The running client learns the state within the refresh interval, with no restart.
        time.sleep(config.STORAGE_TRANSITION_REFRESH_S)
        after = await client.insert(Ping(2), queue="q")
        assert in_queue_storage(db, after.id) and not in_queue_storage(db, before.id)
        status = json.loads(await client.storage_status())
        assert (status["state"], status["current_engine"], status["active_engine"],
                status["canonical_live_backlog"], status["can_finalize"]) == (
            "mixed_transition", "canonical", "queue_storage", 1, False)
        assert status["finalize_blockers"][0] == ("canonical still holds 1 live job(s) "
                                                  "(1 available)")
        assert status["live_runtime_capability_counts"] == {"queue_storage": 1}
        rc, said = storage(url, "finalize")
        assert rc == 1 and said.startswith("error: finalize refused: canonical still holds 1 "
                                           "live job(s) (1 available)"), said
        found = diagnose_schema(url, tmp_path)
        assert any(f.startswith("ok storage switch in progress: mixed transition in progress")
                   for f in found), found

        # Admin reaches the canonical job (its statement touches canonical's tables only).
        assert (await client.cancel(before.id)).state is awa.JobState.Cancelled
        assert (await client.get_job(after.id)).state is awa.JobState.Available
        assert {s.queue: s.available for s in await client.queue_stats()} == {"q": 1}
        time.sleep(config.STORAGE_TRANSITION_SETTLE_S)
        rc, said = storage(url, "finalize", "--dry-run")
        assert (rc, said) == (0, "dry run: finalize would succeed now")
        assert storage(url, "finalize") == (0, "finalized: queue storage (schema 'awa') serves "
                                               "this database")
        status = json.loads(await client.storage_status())
        assert (status["state"], status["current_engine"], status["details"]) == (
            "active", "queue_storage", {"schema": "awa"})
        assert storage(url, "abort") == (1, "error: abort refused: state is active: there is no "
                                            "transition to abort (a finalized switch is not "
                                            "undone live)")
        assert not any("storage switch" in f for f in diagnose_schema(url, tmp_path))
    finally:
        await client.close()


@pytest.mark.engine("canonical")
async def test_abort_goes_back_the_way_it_came(database_url, db):
    url = database_url
    assert storage(url, "prepare")[0] == 0
    assert storage(url, "abort") == (0, "aborted: canonical serves this database again")
    add_runtime(db, "new-host", current_migration_version())
    assert storage(url, "prepare")[0] == 0
    assert storage(url, "enter-mixed")[0] == 0
    client = awa.AsyncClient(url)
    try:
        queued = await client.insert(Ping(1), queue="q")
        assert in_queue_storage(db, queued.id)
        rc, said = storage(url, "abort")
        assert rc == 0 and said.startswith("aborting: new jobs go to canonical again"), said
        time.sleep(config.STORAGE_TRANSITION_REFRESH_S)
        back = await client.insert(Ping(2), queue="q")
        assert not in_queue_storage(db, back.id)
        rc, said = storage(url, "abort")
        assert rc == 1 and said.startswith("error: abort refused: queue storage still holds 1 "
                                           "live job(s)"), said
        assert (await client.cancel(queued.id)).state is awa.JobState.Cancelled
        time.sleep(config.STORAGE_TRANSITION_SETTLE_S)
        assert storage(url, "abort") == (0, "aborted: canonical serves this database again")
        status = json.loads(await client.storage_status())
        assert (status["state"], status["current_engine"], status["canonical_live_backlog"]) == (
            "canonical", "canonical", 1)
        fresh = awa.AsyncClient(url)  # a new process's view: canonical again
        try:
            third = await fresh.insert(Ping(3), queue="q")
            assert not in_queue_storage(db, third.id)
        finally:
            await fresh.close()
    finally:
        await client.close()


@pytest.mark.engine("queue_storage")
async def test_a_database_in_no_switch_gets_its_engine_itself(database_url):
    """Queue storage with no switch in progress: open_engine returns queue storage's engine,
    so its hot path sends exactly its own statements."""
    from awa import db as awa_db
    from awa.storage import open_engine
    from awa.storage.queue_storage import QueueStorageEngine

    conn = await awa_db.connect(database_url, config.APP_NAME_CLI)
    try:
        assert isinstance(await open_engine(conn), QueueStorageEngine)
    finally:
        await conn.close()


@pytest.mark.engine("canonical")
async def test_the_transition_role_picks_the_engines_a_runtime_claims_from(database_url, db):
    """While both engines hold jobs: auto claims the draining engine's first, then fills the
    batch from the other; canonical_drain and queue_storage_target claim from one only; every
    write of an attempt goes to the engine that claimed it."""
    from awa import db as awa_db
    from awa.storage import open_engine
    from awa.storage.engine import AttemptWrite

    url = database_url
    add_runtime(db, "new-host", current_migration_version())
    client = awa.AsyncClient(url)
    conn = await awa_db.connect(url, config.APP_NAME_CLI)
    try:
        old = [await client.insert(Ping(i), queue="q") for i in range(2)]
        assert storage(url, "prepare")[0] == 0 and storage(url, "enter-mixed")[0] == 0
        time.sleep(config.STORAGE_TRANSITION_REFRESH_S)
        new = [await client.insert(Ping(i), queue="q") for i in range(2)]
        assert all(in_queue_storage(db, j.id) for j in new)

        engine = await open_engine(conn)
        engine.set_transition_role("queue_storage_target")
        got = await engine.claim_batch(conn, "q", 10, None)
        assert [j.id for j in got] == [new[0].id, new[1].id]
        engine.set_transition_role("canonical_drain")
        got += await engine.claim_batch(conn, "q", 1, None)
        assert got[-1].id == old[0].id
        engine.set_transition_role("auto")
        assert [j.id for j in await engine.claim_batch(conn, "q", 10, None)] == [old[1].id]

        # Each attempt ends where it was claimed: both complete in one call.
        done = await engine.complete_batch(conn, sorted(
            (AttemptWrite(j.id, j.run_lease) for j in got[:3]), key=lambda a: a.id))
        assert sorted(done.applied) == sorted(j.id for j in got[:3])
        states = {r["id"]: r["state"] for r in db.execute(
            "SELECT id, state::text FROM awa.jobs WHERE id = ANY(%s)",
            ([j.id for j in old + new],)).fetchall()}
        assert states == {old[0].id: "completed", old[1].id: "running",
                          new[0].id: "completed", new[1].id: "completed"}
        assert db.execute("SELECT state::text FROM awa.jobs_hot WHERE id = %s",
                          (old[0].id,)).fetchone()["state"] == "completed"
    finally:
        await conn.close()
        await client.close()
