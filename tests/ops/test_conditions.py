"""Each real condition the troubleshooting guide names, created for real, and found."""

from __future__ import annotations

import time

import psycopg
import pytest

from ops.ops_helpers import FAST_FLAGS, run_ops, summaries
from support.arrange import insert_job as arrange_job
from support.processes import start_worker


def insert_job(db, kind: str, queue: str = "default", **cols) -> int:
    """An available job, written the way the database's engine keeps it."""
    return arrange_job(db, "available", kind=kind, queue=queue, **cols)


def enqueue(database_url: str, kind: str, queue: str = "default") -> int:
    """A job through the public API (either engine lays it out its own way)."""
    import awa
    with awa.Client(database_url) as client:
        return client.insert({}, kind=kind, queue=queue).id


def state_of(db, job_id: int) -> str | None:
    row = db.execute("SELECT state::text AS state FROM awa.jobs WHERE id = %s",
                     (job_id,)).fetchone()
    return None if row is None else row["state"]


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not reached")


def test_unreachable_database_exits_3_with_one_line():
    result = run_ops("diagnose", "all", "--database-url", "postgresql://postgres@127.0.0.1:1/nope")
    assert result.code == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0] and "Traceback" not in result.stderr
    bad = run_ops("diagnose", "no-such-check", "--database-url", "postgresql://x@127.0.0.1:1/x")
    assert bad.code == 2 and "no-such-check" in bad.stderr  # click usage error, no traceback


def test_sigkilled_worker_leaves_a_stale_job_and_a_dead_runtime(ops, database_url, db):
    worker = start_worker(database_url, "default:2")
    job = enqueue(database_url, "hang")
    wait_for(lambda: state_of(db, job) == "running")
    alive = ops("stuck-running", *FAST_FLAGS)
    assert alive.code == 0, summaries(alive.data)
    worker.kill()
    time.sleep(2.5)  # past the 1 s staleness cutoff and the runtime's live window (2 s floor)

    stuck = ops("stuck-running", *FAST_FLAGS)
    assert stuck.code >= 1
    orphaned = [f for f in stuck.findings() if "orphaned" in f["summary"]]
    assert orphaned, summaries(stuck.data)
    row = orphaned[0]["evidence"][0]
    assert row["job_id"] == job and row["class"] == "orphaned"
    assert row["heartbeat_age_s"] > 1.0
    assert str(worker.pid) in row["runtime"] and "gone" in row["runtime"]
    # rescue retries an orphaned attempt: never advise cancelling (it discards the job)
    assert "cancel" not in orphaned[0]["next_step"]
    assert "rescue retries it" in orphaned[0]["summary"]

    runtime = ops("runtime", *FAST_FLAGS)
    assert runtime.code == 2  # its only runtime is gone: no live runtime at all
    assert worker.instance_id in str(runtime.findings())


def test_a_real_runtime_that_never_leads_is_a_critical_no_leader(ops, database_url):
    worker = start_worker(database_url, "default:2", settings={"run_maintenance": False})
    try:
        time.sleep(1.5)  # longer than the 0.2 s election interval plus one snapshot
        result = ops("runtime", *FAST_FLAGS)
        assert result.code == 2, summaries(result.data)
        finding = result.findings()[0]
        assert finding["summary"].startswith("no live runtime is leader for")
        assert finding["evidence"][0]["instance_id"] == worker.instance_id
        assert "pg_locks" in finding["next_step"]
    finally:
        worker.terminate()


def test_no_leader_is_critical(ops, db):
    # Two live runtimes that report no leader for far longer than the election interval.
    for host in ("a", "b"):
        db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,
                      last_seen_at, snapshot_interval_ms, leader, maintenance_alive)
                      VALUES (gen_random_uuid(), %s, 4242, now() - interval '1 minute', now(),
                      10000, false, false)""", (host,))
    result = ops("runtime")
    assert result.code == 2
    assert "no live runtime is leader" in result.findings()[0]["summary"]
    # A leader whose maintenance died is just as critical.
    db.execute("UPDATE awa.runtime_instances SET leader = true WHERE hostname = 'a'")
    result = ops("runtime")
    assert result.code == 2 and "maintenance_alive = false" in summaries(result.data)
    db.execute("UPDATE awa.runtime_instances SET maintenance_alive = true WHERE hostname = 'a'")
    assert ops("runtime").code == 0


@pytest.mark.engine("canonical")  # the wedge: canonical's rescue and triggers, shown by hand
def test_unique_wedge_is_found_with_the_safe_remedy(ops, db):
    key = b"\x01" * 16
    no_running = "11011000"  # scheduled, available, completed, retryable: running excluded
    old = insert_job(db, "wedged", unique_key=key, unique_states=no_running)
    db.execute("UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
               "heartbeat_at = now(), deadline_at = now() + interval '5 minutes', "
               "attempted_at = now() WHERE id = %s", (old,))
    newer = insert_job(db, "wedged", unique_key=key, unique_states=no_running)
    # issue 13: while the old attempt still heartbeats this is a transient supersession (info);
    # a wedge needs evidence that rescue fails: a heartbeat older than staleness + 2 rescue scans.
    transient = ops("unique-wedge")
    assert transient.code == 0 and "superseded" in summaries(transient.data)
    db.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '10 minutes' "
               "WHERE id = %s", (old,))
    # The wedge is real: rescuing the old attempt to retryable collides on the unique index.
    # Corruption on purpose: canonical's rescue move written out, to show it cannot succeed.
    with pytest.raises(psycopg.errors.UniqueViolation, match="idx_awa_jobs_unique"):
        db.execute("""WITH moved AS (DELETE FROM awa.jobs_hot WHERE id = %s RETURNING *)
                      INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, unique_key,
                                                      unique_states)
                      SELECT id, kind, queue, args, 'retryable', unique_key, unique_states
                      FROM moved""", (old,))
    result = ops("unique-wedge")
    assert result.code == 2
    finding = result.findings()[0]
    assert f"running job {old}" in finding["summary"] and f"job {newer} holds" in finding["summary"]
    assert "holder live (available)" in finding["summary"]
    assert f"job cancel {old}" in finding["next_step"] and "do NOT delete" in finding["next_step"]

    # Holder gone (deleted by hand, leaving its claim behind): deleting the claim is now safe.
    # Corruption on purpose: the claim's trigger disabled, so the check sees an orphaned claim.
    db.execute("ALTER TABLE awa.jobs_hot DISABLE TRIGGER awa_unique_claim_del")
    db.execute("DELETE FROM awa.jobs_hot WHERE id = %s", (newer,))
    db.execute("ALTER TABLE awa.jobs_hot ENABLE TRIGGER awa_unique_claim_del")
    gone = ops("unique-wedge").findings()[0]
    assert ("holder gone" in gone["summary"]
            and "DELETE FROM awa.job_unique_claims" in gone["next_step"])

    db.execute("UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() WHERE id = %s",
               (old,))
    assert ops("unique-wedge").code == 0


async def test_admin_cancel_of_a_handler_that_ignores_it(ops, database_url, client, db):
    worker = start_worker(database_url, "default:2")
    try:
        job = (await client.insert({}, kind="hang")).id
        wait_for(lambda: state_of(db, job) == "running")
        await client.cancel(job)  # durable, plus pg_notify('awa:cancel'); "hang" ignores the flag
        result = ops("stuck-running", "--heartbeat-staleness", "30")
        rows = [row for f in result.findings() for row in f["evidence"]]
        cancelled = next(r for r in rows if r["job_id"] == job)
        assert cancelled["class"] == "cancelled but still running"
        assert "is_cancelled()" in summaries(result.data)
    finally:
        worker.kill()
