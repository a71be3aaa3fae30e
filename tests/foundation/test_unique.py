"""Unique jobs: one claim per key, conflicts on single inserts, skips in bulk, races."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest

import awa
from awa.unique import UniqueOpts, unique_key

from .conftest import SendEmail, count_jobs


def test_key_parts_follow_the_options():
    base = unique_key("send_email", args={"b": 1, "a": 2})
    assert len(base) == 16
    # canonical JSON: key order does not matter
    assert base == unique_key("send_email", args={"a": 2, "b": 1})
    assert base != unique_key("send_email", args={"a": 2, "b": 2})
    assert base != unique_key("send_email", queue="q", args={"a": 2, "b": 1})
    assert base != unique_key("send_email", args={"a": 2, "b": 1}, period_bucket=7)
    assert unique_key("k") != unique_key("k2")


def test_states_mask_and_validation():
    assert UniqueOpts.parse({}).states_mask == "11111000"
    assert UniqueOpts.parse({"states": ["available", "running"]}).states_mask == "01100000"
    with pytest.raises(awa.ValidationError, match="unknown state"):
        UniqueOpts.parse({"states": ["done"]})
    with pytest.raises(awa.ValidationError, match="by_period"):
        UniqueOpts.parse({"by_period": 0})


async def test_single_insert_conflict_names_the_holder(client, db):
    first = await client.insert(SendEmail("a"), unique_opts={})
    with pytest.raises(awa.UniqueConflict, match=f"job {first.id} \\(available\\)") as info:
        await client.insert(SendEmail("a"), unique_opts={})
    assert "\n" not in str(info.value)
    # different args, or a different queue with by_queue, are different keys
    await client.insert(SendEmail("b"), unique_opts={})
    await client.insert(SendEmail("a"), queue="other", unique_opts={"by_queue": True})
    assert count_jobs(db) == 3


async def test_scheduled_duplicate_conflicts_too(client):
    await client.insert(SendEmail("s"), unique_opts={}, run_at=timedelta(hours=1))
    with pytest.raises(awa.UniqueConflict, match="scheduled"):
        await client.insert(SendEmail("s"), unique_opts={})


async def test_key_is_free_again_outside_the_mask(client, db):
    first = await client.insert(SendEmail("a"), unique_opts={"by_args": True})
    await client.cancel(first.id)  # cancelled is not in the default mask
    second = await client.insert(SendEmail("a"), unique_opts={})
    assert second.id != first.id
    assert db.execute("SELECT job_id FROM awa.job_unique_claims").fetchall() == [
        {"job_id": second.id}]


async def test_by_period_buckets(client):
    opts = {"by_period": 3600, "by_args": False}
    await client.insert(SendEmail("a"), unique_opts=opts)
    with pytest.raises(awa.UniqueConflict):
        await client.insert(SendEmail("other args, same kind"), unique_opts=opts)


async def test_bulk_paths_skip_duplicates_and_report(client, db):
    await client.insert(SendEmail("taken"), unique_opts={})
    batch = [SendEmail("taken"), SendEmail("new"), SendEmail("new"), SendEmail("other")]
    jobs = await client.insert_many(batch, unique_opts={})
    assert [j.args["to"] for j in jobs] == ["new", "other"] and jobs.skipped == 2
    copied = await client.insert_many_copy(batch + [SendEmail("fresh")], unique_opts={})
    assert [j.args["to"] for j in copied] == ["fresh"] and copied.skipped == 4
    count = await client.enqueue_many_copy(batch + [SendEmail("fresh2")] * 2, unique_opts={})
    assert count == 1 and count.skipped == 5
    assert count_jobs(db) == 5
    assert db.execute("SELECT count(*) AS n FROM awa.job_unique_claims").fetchone()["n"] == 5


def _race(database_url: str, insert) -> tuple[list[object], int]:
    """Run ``insert`` on 8 threads, each with its own connection, released together."""
    barrier = threading.Barrier(8)
    outcomes: list[object] = []
    lock = threading.Lock()

    def producer() -> None:
        with awa.Client(database_url, max_connections=1) as client:
            client.queue_stats()  # open the pool before the race starts
            barrier.wait()
            try:
                result = insert(client)
            except awa.UniqueConflict as exc:
                result = exc
            with lock:
                outcomes.append(result)

    threads = [threading.Thread(target=producer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with psycopg.connect(database_url) as conn:
        count = conn.execute("SELECT count(*) FROM awa.jobs").fetchone()
        assert count is not None
        rows = count[0]
    return outcomes, rows


def test_eight_concurrent_single_inserts_leave_one_row(database_url):
    outcomes, rows = _race(database_url,
                           lambda c: c.insert(SendEmail("race"), unique_opts={}))
    assert rows == 1
    assert sum(isinstance(o, awa.Job) for o in outcomes) == 1
    assert sum(isinstance(o, awa.UniqueConflict) for o in outcomes) == 7


def test_eight_concurrent_bulk_inserts_leave_one_row_per_key(database_url):
    outcomes, rows = _race(database_url, lambda c: c.insert_many(
        [SendEmail("race"), SendEmail("race2")], unique_opts={}))
    assert rows == 2
    assert sum(len(o) for o in outcomes) == 2 and sum(o.skipped for o in outcomes) == 14
    outcomes, rows = _race(database_url, lambda c: c.enqueue_many_copy(
        [SendEmail("race3")], unique_opts={}))
    assert rows == 3 and sum(outcomes) == 1 and sum(o.skipped for o in outcomes) == 7
