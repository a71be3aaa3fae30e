"""Retention (bounded, per-queue overrides) and priority aging."""

from __future__ import annotations

import pytest

from awa.config import QueueConfig, RetentionPolicy, RuntimeSettings
from awa.runtime.maintenance import aging, retention

from .conftest import insert_job, job


async def test_retention_deletes_old_finished_rows_only(db, pool):
    settings = RuntimeSettings(completed_retention_hours=1, failed_retention_hours=2,
                               dlq_retention_days=1, cleanup_batch_size=2)
    old_done = [insert_job(db, state="completed", finalized_age_s=7200) for _ in range(5)]
    fresh_done = insert_job(db, state="completed", finalized_age_s=60)
    failed_in_floor = insert_job(db, state="failed", finalized_age_s=5400)
    old_failed = insert_job(db, state="failed", finalized_age_s=8000)
    old_cancelled = insert_job(db, state="cancelled", finalized_age_s=7200)
    running = insert_job(db, state="running")
    db.execute("""INSERT INTO awa.dlq_entries (job_id, kind, queue, dlq_reason, dlq_at)
                  VALUES (9001, 'k', 'maint', 'manual', now() - interval '2 days'),
                         (9002, 'k', 'maint', 'manual', now() - interval '1 hour')""")
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, last_seen_at)
                  VALUES (gen_random_uuid(), now() - interval '25 hours'),
                         (gen_random_uuid(), now())""")
    db.execute("""INSERT INTO awa.queue_descriptors (queue, descriptor_hash, last_seen_at)
                  VALUES ('gone', 'h', now() - interval '31 days'), ('here', 'h', now())""")
    out = await retention.clean(pool, settings)
    assert out.deleted["completed"] == 5 and out.deleted["failed"] == 1
    assert all(job(db, i) is None for i in old_done + [old_failed, old_cancelled])
    for kept in (fresh_done, failed_in_floor, running):
        assert job(db, kept) is not None
    assert [r["job_id"] for r in db.execute("SELECT job_id FROM awa.dlq_entries")] == [9002]
    assert db.execute("SELECT count(*) AS n FROM awa.runtime_instances").fetchone()["n"] == 1
    assert [r["queue"] for r in db.execute("SELECT queue FROM awa.queue_descriptors")] == ["here"]


async def test_per_queue_retention_override(db, pool):
    settings = RuntimeSettings(completed_retention_hours=24)
    queues = {"short": QueueConfig("short", max_workers=1,
                                   retention=RetentionPolicy(completed_hours=0.01))}
    short = insert_job(db, state="completed", queue="short", finalized_age_s=120)
    default = insert_job(db, state="completed", queue="other", finalized_age_s=120)
    await retention.clean(pool, settings, queues)
    assert job(db, short) is None
    assert job(db, default) is not None


# Canonical rewrites waiting rows; queue storage ages at claim time and moves nothing
# (tests/storage/test_maintenance.py checks both).
@pytest.mark.engine("canonical")
async def test_waiting_jobs_rise_one_step_per_interval_and_keep_their_original(db, pool):
    waited_2 = insert_job(db, state="available", priority=4, run_at_offset_s=-2.5,
                          attempt=0)
    waited_10 = insert_job(db, state="available", priority=3, run_at_offset_s=-10,
                           attempt=0)
    fresh = insert_job(db, state="available", priority=4, run_at_offset_s=0, attempt=0)
    changed = await aging.age_priorities(pool, default_interval_ms=1_000)
    assert changed == 2
    a, b = job(db, waited_2), job(db, waited_10)
    assert a["priority"] == 2 and a["metadata"][aging.ORIGINAL_PRIORITY_KEY] == 4
    assert b["priority"] == 1 and b["metadata"][aging.ORIGINAL_PRIORITY_KEY] == 3
    assert job(db, fresh)["priority"] == 4
    # Idempotent: nothing more until another interval has passed.
    assert await aging.age_priorities(pool, default_interval_ms=1_000) == 0


# Canonical rewrites waiting rows; queue storage ages at claim time and moves nothing
# (tests/storage/test_maintenance.py checks both).
@pytest.mark.engine("canonical")
async def test_aging_uses_the_queue_interval_and_zero_disables(db, pool):
    slow = insert_job(db, state="available", queue="slow", priority=4, run_at_offset_s=-5,
                      attempt=0)
    off = insert_job(db, state="available", queue="off", priority=4, run_at_offset_s=-5,
                     attempt=0)
    queues = {"slow": QueueConfig("slow", priority_aging_interval_ms=60_000),
              "off": QueueConfig("off", priority_aging_interval_ms=0)}
    await aging.age_priorities(pool, default_interval_ms=1_000, queues=queues)
    assert job(db, slow)["priority"] == 4
    assert job(db, off)["priority"] == 4


async def test_retention_is_bounded_per_tick(db, pool):
    settings = RuntimeSettings(completed_retention_hours=1, cleanup_batch_size=2)
    ids = [insert_job(db, state="completed", finalized_age_s=7200) for _ in range(5)]
    first = await retention.clean(pool, settings, max_batches=2)
    assert first.deleted["completed"] == 4
    second = await retention.clean(pool, settings, max_batches=2)
    assert second.deleted["completed"] == 1
    assert all(job(db, i) is None for i in ids)
