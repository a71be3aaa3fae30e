"""`awa adopt` on databases built by real awa-pg 0.6.9 workers (queue storage and canonical).

Per Rust-core layout: ``populate.py`` (awa-pg 0.6.9) leaves jobs in every
state, a DLQ entry (queue storage; 0.6.9 has no DLQ on canonical), a unique
claim, a cron schedule and descriptors, its worker still running.  Then:

1. while that worker is live, `awa adopt` is refused with one line and changes nothing;
2. the worker is SIGKILLed (its attempts become orphans); `--dry-run` lists per state;
3. `awa adopt`: per-state counts equal the dry run's; every job keeps its columns;
   the callback id and timeout, the DLQ entry, the orphaned attempts (a
   zero-deadline one among them, which 0.6.9 keeps in its compact claim ledger), the
   unique claim, cron and descriptors came along; a new job's id is greater than every old one;
4. our worker drains every runnable job (available ones and the rescued orphans) once;
5. `--abort`: schema awa is 0.6.9's again, exactly as before, and a 0.6.9 worker runs it;
6. `awa adopt --force` again (canonical layout) then `--finalize` drops the Rust tables.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import awa
from support.awa_pg import awa_pg_python
from support.rust_awa import as_url

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("adopt")]

POPULATE = Path(__file__).with_name("populate.py")
AWA = Path(sys.executable).with_name("awa")
RUST_ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "RUST_LOG": "warn"}
KEPT = ("id", "kind", "queue", "args", "metadata", "tags", "priority", "attempt",
        "max_attempts", "run_at", "errors", "progress")
RUST_VIEW = f"SELECT {', '.join(KEPT)}, state::text AS state, callback_id, callback_timeout_at " \
            "FROM awa.jobs ORDER BY id"
DESCRIPTORS = """
SELECT 'queue' AS what, queue AS name, descriptor_hash, display_name, owner, description
  FROM awa.queue_descriptors
UNION ALL
SELECT 'kind', kind, descriptor_hash, display_name, owner, description
  FROM awa.job_kind_descriptors ORDER BY 1, 2"""
SCHEMAS = "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'awa%%' ORDER BY 1"


@dataclass
class Drain:
    n: int = 0


def rows(url: str, query: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query).fetchall()


def our_awa(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AWA), "--database-url", url, *args],
                          capture_output=True, text=True, timeout=120)


def adopt_json(url: str, *args: str) -> dict[str, Any]:
    proc = our_awa(url, "adopt", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def wait_for(what: str, probe: Any, timeout: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def populate(url: str, layout: str, log: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([str(awa_pg_python()), "-W", "ignore", str(POPULATE), url, layout],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
                            cwd=POPULATE.parent, env=RUST_ENV)
    try:
        wait_for("0.6.9 jobs in every state", lambda: "ready" in log.read_text()
                 or proc.poll() is not None, 90)
    except AssertionError:
        proc.kill()
        raise
    assert proc.poll() is None, log.read_text()[-3000:]
    ids = next(json.loads(line) for line in log.read_text().splitlines()
               if line.startswith("{"))
    return proc, ids


async def drain_with_our_worker(url: str, runnable: set[int]) -> Counter[int]:
    """Our runtime (on the adopted database) on both queues until every runnable job ran."""
    client = awa.AsyncClient(url)
    ran: Counter[int] = Counter()

    @client.task(Drain, kind="drain", queue="adopt_hold")
    async def drain(job: awa.Job[Drain]) -> None:
        ran[job.id] += 1

    @client.task(Drain, kind="hang", queue="adopt_run")
    async def hang(job: awa.Job[Drain]) -> None:
        ran[job.id] += 1

    @client.task(Drain, kind="hang_fast", queue="adopt_fast")
    async def hang_fast(job: awa.Job[Drain]) -> None:
        ran[job.id] += 1

    await client.start([("adopt_hold", 4), ("adopt_run", 4), ("adopt_fast", 2)],
                       poll_interval_ms=100, heartbeat_interval_ms=200, heartbeat_staleness_ms=1000,
                       heartbeat_rescue_interval_ms=300, promote_interval_ms=100,
                       leader_election_interval_ms=300)
    try:
        deadline = time.monotonic() + 60
        while not runnable <= set(ran) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # a second run of anything would show up now
    finally:
        await client.shutdown(2000)
    return ran


@pytest.mark.parametrize(("layout", "target"), [
    ("queue_storage", "queue_storage"), ("canonical", "queue_storage"),
    ("queue_storage", "canonical"), ("canonical", "canonical")])
@pytest.mark.connections(19)
def test_adopt_a_real_069_database(layout: str, target: str, empty_database_url: str,
                                   tmp_path: Path) -> None:
    """``layout``: the Rust core's engine; ``target``: ours (``awa adopt --engine``)."""
    url = empty_database_url
    proc, ids = populate(as_url(url), layout, tmp_path / "populate.log")
    try:
        # --- 1. refused while the 0.6.9 worker is live ---------------------------------
        before = rows(url, SCHEMAS), rows(url, "SELECT count(*) AS n FROM awa.schema_version")
        snapshot = rows(url, RUST_VIEW)
        descriptors = rows(url, DESCRIPTORS)
        refused = our_awa(url, "adopt")
        assert refused.returncode == 1, refused.stdout
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "still live" in refused.stderr and "nothing changed" in refused.stderr
        assert (rows(url, SCHEMAS), rows(url, "SELECT count(*) AS n FROM awa.schema_version")) \
            == before
        assert rows(url, RUST_VIEW) == snapshot
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    # --- 2. the dry run, once the dead runtime is seen gone --------------------------------
    # On the canonical layout, the completed job is made older than our retention: history
    # past it stays behind (and the dry run says why).
    aged = ids["completed"] if layout == "canonical" else []
    if aged:
        with psycopg.connect(url, autocommit=True) as conn:
            # awa-pg's own table: the database is awa-pg's until adopted, no engine of ours.
            conn.execute("UPDATE awa.jobs_hot SET finalized_at = now() - interval '3 days' "
                         "WHERE id = %s", (aged[0],))
    dry = wait_for("the killed runtime seen gone", lambda: (
        lambda d: d if not d["live_runtimes"] else None)(
            adopt_json(url, "--dry-run", "--engine", target)), 45, 1)
    assert rows(url, SCHEMAS) == before[0] and rows(url, RUST_VIEW) == snapshot  # unchanged
    dlq = 1 if layout == "queue_storage" else 0
    expected = {"available": 6, "cancelled": 1, "completed": 1 - len(aged), "failed": 3 - dlq,
                "retryable": 1, "running": 3, "scheduled": 1, "waiting_external": 1}
    if dlq:
        expected["dlq"] = 1
    expected = {k: v for k, v in expected.items() if v}
    assert dry["states"] == dict(sorted(expected.items())), dry
    if aged:
        assert ("completed", "jobs_hot", 1) in {(c["state"], c["from"], c["count"])
                                               for c in dry["cannot"]}, dry["cannot"]
    assert dry["tables"]["unique_claims"] == 1 and dry["tables"]["cron_jobs"] == 1
    assert dry["tables"]["queue_meta"] >= 1
    assert any(c["from"] == "runtime_instances" for c in dry["cannot"]), dry["cannot"]
    text = our_awa(url, "adopt", "--dry-run", "--engine", target)
    assert "running" in text.stdout and "cannot move:" in text.stdout, text.stdout
    old_max = max(max(v) for v in ids.values())
    assert dry["next_id_after"] >= old_max

    # --- 3. adopt ------------------------------------------------------------------------
    done = adopt_json(url, "--engine", target)
    assert done["states"] == dry["states"] and done["tables"] == dry["tables"]
    assert rows(url, SCHEMAS) == [{"nspname": n} for n in ("awa", "awa_adopt", "awa_rust_core")]
    for args, says in ((("--dry-run",), "already under way"), ((), "already adopted")):
        twice = our_awa(url, "adopt", *args)
        assert twice.returncode == 1 and says in twice.stderr, twice.stderr
        assert len(twice.stderr.strip().splitlines()) == 1
    ours = {r["id"]: r for r in rows(url, RUST_VIEW)}
    dlq_rows = {r["id"]: r for r in rows(url, RUST_VIEW.replace("awa.jobs", "awa.dlq_entries")
                                         .replace("SELECT id,", "SELECT job_id AS id,")
                                         .replace("ORDER BY id", "ORDER BY job_id"))}
    for old in snapshot:
        if old["id"] in aged:
            assert old["id"] not in ours
            continue
        new = ours.get(old["id"]) or dlq_rows[old["id"]]
        assert {k: new[k] for k in KEPT} == {k: old[k] for k in KEPT}, old["id"]
        assert new["state"] == old["state"]
    waiting = ours[ids["waiting"][0]]
    old_waiting = next(r for r in snapshot if r["id"] == ids["waiting"][0])
    assert waiting["callback_id"] is not None
    assert (waiting["callback_id"], waiting["callback_timeout_at"]) == \
        (old_waiting["callback_id"], old_waiting["callback_timeout_at"])
    for job_id in ids["running"]:  # orphans, with their progress
        assert ours[job_id]["state"] == "running" and ours[job_id]["attempt"] == 1
        if ours[job_id]["kind"] == "hang":
            assert ours[job_id]["progress"]["percent"] == 40
    if layout == "queue_storage":  # 0.6.9's compact claim (deadline 0), listed apart
        assert ("running", "lease_claim_batches", 1) in {
            (m["state"], m["from"], m["jobs"]) for m in dry["moves"]}, dry["moves"]
    if dlq:
        assert list(dlq_rows) == ids["dlq"] and dlq_rows[ids["dlq"][0]]["errors"]

    async def after_adoption() -> tuple[int, list[str]]:
        client = awa.AsyncClient(url)
        try:
            with pytest.raises(awa.UniqueConflict):  # the claim came along
                await client.insert(Drain(11), kind="drain", queue="adopt_hold",
                                    unique_opts={"by_args": True})
            new = await client.insert(Drain(99), kind="drain", queue="adopt_hold")
            cron = [c["name"] for c in await client.list_cron_jobs()]
            return new.id, cron
        finally:
            await client.close()

    new_id, cron = asyncio.run(after_adoption())
    assert new_id > old_max and new_id > dry["next_id_after"]
    assert cron == ["adopt_nightly"]
    # adopt_run, adopt_fast and the 6 kinds, as 0.6.9 catalogued them (hashes included)
    assert rows(url, DESCRIPTORS) == descriptors and len(descriptors) == 2 + 6

    paused = rows(url, "SELECT paused, paused_by FROM awa.queue_meta WHERE queue = 'adopt_paused'")
    assert paused == [{"paused": True, "paused_by": "ops"}]

    # --- 4. our workers drain every runnable job exactly once -----------------------------
    runnable = set(ids["available"]) | set(ids["unique"]) | set(ids["running"]) | {new_id}
    ran = asyncio.run(drain_with_our_worker(url, runnable))
    assert set(ran) == runnable and set(ran.values()) == {1}, ran
    states = {r["id"]: r["state"] for r in rows(url, "SELECT id, state::text FROM awa.jobs")}
    assert {states[i] for i in runnable} == {"completed"}
    assert states[ids["retryable"][0]] == "retryable"
    assert states[ids["waiting"][0]] == "waiting_external"

    async def resolve_callback() -> str:
        client = awa.AsyncClient(url)
        try:  # the adopted callback id is the one an external system holds
            job = await client.complete_external(str(waiting["callback_id"]), {"paid": True})
            return job.state.value
        finally:
            await client.close()

    assert asyncio.run(resolve_callback()) == "completed"

    # --- 5. --abort: 0.6.9's again, as it was, and 0.6.9 workers run on it -----------------
    aborted = our_awa(url, "adopt", "--abort")
    assert aborted.returncode == 0 and "aborted" in aborted.stdout, aborted.stderr
    assert rows(url, SCHEMAS) == before[0]
    assert rows(url, RUST_VIEW) == snapshot
    resumed = subprocess.run([str(awa_pg_python()), "-W", "ignore", str(POPULATE), as_url(url),
                              "drain", "6"], capture_output=True, text=True, timeout=120,
                             cwd=POPULATE.parent, env=RUST_ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    drained = json.loads(resumed.stdout.split("drained ", 1)[1])
    assert drained == sorted(set(ids["available"]) | set(ids["unique"]))

    # --- 6. adopt again (the 0.6.9 runtime just stopped: --force), then --finalize -------
    if layout == "canonical":
        # 0.6.9 keeps a cleanly stopped runtime's fresh row (shutting_down): still live
        # for two snapshot intervals, unless --force says it is gone.
        fresh = our_awa(url, "adopt", "--engine", target)
        assert fresh.returncode == 1 and "shutting down" in fresh.stderr, fresh.stderr
        again = adopt_json(url, "--force", "--engine", target)
        assert again["states"]["completed"] == 1 - len(aged) + 6
        final = our_awa(url, "adopt", "--finalize")
        assert final.returncode == 0, final.stderr
        assert rows(url, SCHEMAS) == [{"nspname": "awa"}]
        db_info = json.loads(our_awa(url, "db", "--json").stdout)
        assert (db_info["engine"], db_info["foreign"]) == (target, False)
        again_abort = our_awa(url, "adopt", "--abort")
        assert again_abort.returncode == 1
        assert len(again_abort.stderr.strip().splitlines()) == 1


def test_adopt_refuses_a_database_not_laid_out_by_the_rust_core(database_url: str) -> None:
    for args in ((), ("--dry-run",)):
        proc = our_awa(database_url, "adopt", *args)
        assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
        assert "nothing to adopt" in proc.stderr, proc.stderr
    proc = our_awa(database_url, "adopt", "--finalize")
    assert proc.returncode == 1 and "no adoption to finalize" in proc.stderr, proc.stderr


def test_each_phase_resumes_and_aborts(empty_database_url: str, tmp_path: Path) -> None:
    """Stopped after each phase (as a crash between phases leaves it), `awa adopt --abort`
    gives 0.6.9 its database back unchanged and `awa adopt` continues from that phase."""
    from awa import adopt as adoption

    url = empty_database_url
    proc, ids = populate(as_url(url), "queue_storage", tmp_path / "populate.log")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    snapshot = rows(url, RUST_VIEW)
    rust_schemas = rows(url, SCHEMAS)
    # The killed runtime's row is still fresh: force, as for a runtime known dead.
    for phase, schemas in ((adoption.STAGED, ["awa_adopt", "awa_rust_core"]),
                           (adoption.LAID_OUT, ["awa", "awa_adopt", "awa_rust_core"])):
        assert asyncio.run(adoption.adopt(url, force=True, until=phase)) is None
        assert [r["nspname"] for r in rows(url, SCHEMAS)] == schemas
        assert rows(url, "SELECT phase FROM awa_adopt.adoption") == [{"phase": phase}]
        aborted = our_awa(url, "adopt", "--abort")
        assert aborted.returncode == 0, aborted.stderr
        assert rows(url, SCHEMAS) == rust_schemas and rows(url, RUST_VIEW) == snapshot
    assert asyncio.run(adoption.adopt(url, force=True, until=adoption.STAGED)) is None
    unfinished = our_awa(url, "adopt", "--finalize")  # nothing dropped before adoption ends
    assert unfinished.returncode == 1 and "not finished" in unfinished.stderr
    done = adopt_json(url)  # resumes from the recorded phase
    assert done["states"]["running"] == len(ids["running"])
    assert sum(done["states"].values()) == len(snapshot) + len(ids["running"])
