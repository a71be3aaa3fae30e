"""The remaining checks, each against real rows that create its condition, and its clean state."""

from __future__ import annotations

import uuid
from datetime import timedelta

from psycopg.types.json import Jsonb

from awa.lifecycle import error_entry
from ops.ops_helpers import summaries
from support.arrange import insert_job


def add_runtime(db, *, leader=True, age_s=0.0, hashes=None, queues=("default",)) -> str:
    instance = str(uuid.uuid4())
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,
                  last_seen_at, snapshot_interval_ms, leader, maintenance_alive, queues,
                  descriptor_hashes)
                  VALUES (%s, 'host', 4242, now() - interval '1 minute',
                          now() - make_interval(secs => %s), 10000, %s, %s, %s, %s)""",
               (instance, age_s, leader, leader, Jsonb([{"queue": q} for q in queues]),
                Jsonb(hashes or {})))
    return instance


def add_dlq(db, job_id: int, message: str, attempts: int, queue="email",
            reason="max_attempts_exhausted"):
    errors = [Jsonb(error_entry(message, n)) for n in range(1, attempts + 1)]
    db.execute("""INSERT INTO awa.dlq_entries (job_id, kind, queue, dlq_reason, attempt, errors)
                  VALUES (%s, 'send_email', %s, %s, %s, %s::jsonb[])""",
               (job_id, queue, reason, attempts, errors))


def test_dlq_depth_growth_and_poison_job(ops, db):
    assert ops("dlq").findings()[0]["summary"] == "the DLQ is empty"
    for i in range(3):
        add_dlq(db, 1000 + i, "SMTP 550: mailbox does not exist", attempts=4)
    first = ops("dlq")
    assert first.code == 1
    text = summaries(first.data)
    assert "the DLQ grew by 3 since the previous run" in text
    poison = next(f for f in first.findings() if "repeated error" in f["summary"])
    assert "SMTP 550" in poison["summary"] and "up to 4 identical attempts" in poison["summary"]
    assert "job dump 1002" in poison["next_step"]

    add_dlq(db, 2000, "timeout talking to smtp", attempts=1)
    add_dlq(db, 2001, "timeout talking to smtp", attempts=1, queue="sms")
    second = ops("dlq")
    grew = second.findings()[0]
    assert "the DLQ grew by 2" in grew["summary"] and "email +1" in grew["summary"]
    assert "sms +1" in grew["summary"]
    steady = ops("dlq")  # no growth since the last run, but recent arrivals still warn
    assert "5 jobs reached the DLQ in the last 1.0h" in summaries(steady.data)


def test_descriptors_stale_and_drifted(ops, db):
    add_runtime(db, hashes={"queues": {"email": "aaa"}, "kinds": {}})
    assert ops("descriptors").code == 0
    db.execute("""INSERT INTO awa.queue_descriptors (queue, descriptor_hash, last_seen_at)
                  VALUES ('email', 'aaa', now()), ('retired', 'bbb', now() - interval '1 hour')""")
    stale = ops("descriptors")
    assert stale.code == 1
    assert "1 stale descriptor (queue retired)" in stale.findings()[0]["summary"]
    assert "DELETE FROM awa.queue_descriptors" in stale.findings()[0]["next_step"]
    db.execute("DELETE FROM awa.queue_descriptors WHERE queue = 'retired'")
    add_runtime(db, leader=False, hashes={"queues": {"email": "ccc"}, "kinds": {}})
    drift = ops("descriptors")
    assert drift.code == 1 and "drifted" in drift.findings()[0]["summary"]
    assert drift.findings()[0]["evidence"][0]["key"] == "email"


def test_cancel_listener_missing(ops, db):
    add_runtime(db)
    result = ops("cancel-listener")
    assert result.code == 2
    assert "1 live runtime but 0 listener connections" in result.findings()[0]["summary"]


def test_stuck_running_deadline_overdue_stale_and_cancelled(ops, db):
    add_runtime(db)  # a live leader serving "default": attempts are not orphaned
    now = db.execute("SELECT now() AS now").fetchone()["now"]
    overdue = insert_job(db, "running", kind="k", queue="default", heartbeat_at=now,
                         deadline_at=now - timedelta(seconds=5),
                         attempted_at=now - timedelta(minutes=1))
    stale = insert_job(db, "running", kind="k", queue="default",
                       heartbeat_at=now - timedelta(seconds=60),
                       deadline_at=now + timedelta(minutes=1), attempted_at=now)
    cancelled = insert_job(db, "cancelled", kind="k", queue="default", attempt=1,
                           heartbeat_at=now - timedelta(seconds=4),
                           deadline_at=now + timedelta(minutes=1),
                           attempted_at=now - timedelta(seconds=10),
                           finalized_at=now - timedelta(seconds=3))
    # A generous cutoff keeps the fresh heartbeats fresh however slow this machine is.
    flags = ("--heartbeat-staleness", "30", "--heartbeat-interval", "1")
    result = ops("stuck-running", *flags)
    classes = {row["job_id"]: row["class"] for f in result.findings() for row in f["evidence"]}
    assert classes[overdue] == "deadline overdue"
    assert classes[stale] == "stale"
    assert classes[cancelled] == "cancelled but still running"
    assert result.code == 1, summaries(result.data)

    db.execute("UPDATE awa.jobs SET heartbeat_at = now() WHERE id = %s", (overdue,))
    heartbeats = ops("heartbeats", *flags)
    assert heartbeats.code == 1
    assert "queue default: 1 of 2 running jobs have a stale heartbeat" in summaries(heartbeats.data)

    only_other_queue = ops("stuck-running", *flags, "--queue", "other")
    assert only_other_queue.code == 0


def test_schema_not_migrated_and_missing_objects(empty_database_url, database_url, db, tmp_path):
    from ops.ops_helpers import run_ops

    empty = run_ops("diagnose", "schema", "--database-url", empty_database_url, "--json")
    assert empty.code == 2
    finding = empty.data["findings"][0]
    assert finding["summary"].startswith("SchemaNotMigrated: database has no awa schema")
    assert finding["next_step"].endswith("migrate")
    # Every other check refuses with the same fix, as "could not run".
    other = run_ops("diagnose", "stuck-running", "--database-url", empty_database_url)
    assert other.code == 3 and "awa migrate" not in other.stderr and "migrate" in other.stdout

    ok = run_ops("diagnose", "schema", "--database-url", database_url, "--json")
    assert ok.code == 0 and "matches this code" in ok.data["findings"][0]["summary"]
    db.execute("DROP SEQUENCE awa.jobs_id_seq CASCADE")
    broken = run_ops("diagnose", "schema", "--database-url", database_url, "--json")
    assert broken.code == 2
    assert "sequence awa.jobs_id_seq" in summaries(broken.data)


PRODUCER = """
import asyncio, sys, time
import awa
from awa import telemetry

async def main():
    endpoint = telemetry.serve_prometheus("127.0.0.1:0")
    client = awa.AsyncClient(sys.argv[1])
    for _ in range(20):  # tiny batches: the failure mode the guide describes first
        await client.enqueue_many_copy([{"n": 1}, {"n": 2}], kind="tiny")
    print(f"READY http://127.0.0.1:{endpoint.port}/metrics", flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def test_enqueue_reads_the_producer_histograms(ops, database_url):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, database_url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), proc.stderr.read()
        url = line.split()[1]
        result = ops("enqueue", "--metrics-url", url)
        finding = result.findings()[0]
        assert result.code == 1 and finding["summary"].startswith("enqueue batches are tiny: p50")
        assert "over 20 batches" in finding["summary"]
        assert ({row["histogram"] for row in finding["evidence"]}
                == {"batch_size", "duration_seconds"})
    finally:
        proc.kill()
        proc.wait()
    clean = ops("enqueue")
    assert clean.code == 0 and "pass --metrics-url" in clean.findings()[0]["summary"]
    assert "INSERT INTO awa.queue_meta" in clean.findings()[0]["next_step"]


def test_stopped_reporting_counts_only_runtimes_gone_within_the_window(ops, db):
    """Runtimes gone long ago (a demo's SIGKILLed workers) are history, not a growing alarm."""
    from awa import config
    add_runtime(db, leader=True)
    for _ in range(5):
        add_runtime(db, leader=False, age_s=config.OPS_RUNTIME_GONE_S + 3600)
    assert "stopped reporting" not in summaries(ops("runtime").data)
    recent = add_runtime(db, leader=False, age_s=60)
    result = ops("runtime")
    finding = next(f for f in result.findings() if "stopped reporting" in f["summary"])
    assert finding["summary"].startswith("1 runtime stopped reporting in the last 15.0m")
    assert "(+5 gone before, not counted)" in finding["summary"]
    assert [e["instance_id"] for e in finding["evidence"]] == [recent]


def test_ten_dlq_entries_of_one_poison_bug_are_one_finding_of_ten(ops, db):
    """The error names a different file per job: still one cause, one finding."""
    for n in range(10):
        add_dlq(db, 3000 + n, f"upload-{n * 15}.csv: unexpected byte 0xff at offset {1337 + n}",
                attempts=3, queue="imports")
    add_dlq(db, 4000, "mailbox 'bob' does not exist", attempts=1)
    result = ops("dlq")
    poison = [f for f in result.findings() if "repeated error" in f["summary"]]
    assert len(poison) == 1, summaries(result.data)
    [finding] = poison
    assert "10 jobs" in finding["summary"]
    assert "up to 3 identical attempts in one job" in finding["summary"]
    assert 'one cause: "<file>: unexpected byte <hex> at offset <n>"' in finding["summary"]
    assert "first seen" in finding["summary"] and "last seen" in finding["summary"]
    [group] = finding["evidence"]
    assert group["jobs"] == 10 and group["kinds"] == ["send_email"]
    assert group["queues"] == ["imports"]
    assert group["sample_job_ids"] == [3009, 3008, 3007, 3006, 3005]
    assert "--queue imports" in finding["next_step"]
