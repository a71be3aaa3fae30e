"""Promotion of due scheduled/retryable jobs: batches, paused queues, NOTIFY, the wedge."""

from __future__ import annotations

import psycopg

from awa.runtime.maintenance import promote

from .conftest import insert_job, job


async def test_due_jobs_become_available_and_future_ones_wait(db, pool):
    due = [insert_job(db, state="scheduled", attempt=0, run_at_offset_s=-1) for _ in range(7)]
    retry = insert_job(db, state="retryable", attempt=2, run_lease=2, run_at_offset_s=-5)
    future = insert_job(db, state="scheduled", attempt=0, run_at_offset_s=3600)
    out = await promote.promote(pool, batch_size=3)
    assert out.promoted == 8 and out.batches == 3
    for i in due + [retry]:
        assert job(db, i)["state"] == "available"
    moved = job(db, retry)
    assert moved["attempt"] == 2 and moved["run_lease"] == 2  # the same job, id kept
    assert job(db, future)["state"] == "scheduled"
    assert db.execute("SELECT count(*) AS n FROM awa.jobs "
                      "WHERE state IN ('scheduled', 'retryable')").fetchone()["n"] == 1


async def test_paused_queue_is_skipped(db, pool):
    held = insert_job(db, state="scheduled", queue="held", attempt=0, run_at_offset_s=-1)
    free = insert_job(db, state="scheduled", queue="free", attempt=0, run_at_offset_s=-1)
    db.execute("INSERT INTO awa.queue_meta (queue, paused) VALUES ('held', true)")
    await promote.promote(pool)
    assert job(db, held)["state"] == "scheduled"
    assert job(db, free)["state"] == "available"


async def test_promotion_wakes_listeners_of_the_queue(db, pool, database_url):
    insert_job(db, state="scheduled", queue="wake", attempt=0, run_at_offset_s=-1)
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute('LISTEN "awa:wake"')
        await promote.promote(pool)
        notes = list(listener.notifies(timeout=2, stop_after=1))
    assert [n.channel for n in notes] == ["awa:wake"]


async def test_retryable_colliding_with_newer_holder_is_cancelled_not_wedged(db, pool):
    """Mask {available} only: a retryable attempt holds no claim, a newer job took it."""
    mask = "01000000"
    key = b"\x02" * 16
    old = insert_job(db, state="retryable", run_at_offset_s=-1, unique_key=key,
                     unique_states=mask)
    newer = insert_job(db, state="available", unique_key=key, unique_states=mask)
    others = [insert_job(db, state="scheduled", attempt=0, run_at_offset_s=-1)
              for _ in range(4)]
    out = await promote.promote(pool)
    assert out.duplicates == 1 and out.promoted == 4
    cancelled = job(db, old)
    assert cancelled["state"] == "cancelled"
    assert cancelled["errors"][-1]["error"] == "rescued as duplicate"
    assert job(db, newer)["state"] == "available"
    assert {job(db, i)["state"] for i in others} == {"available"}
    assert (await promote.promote(pool)).promoted == 0
