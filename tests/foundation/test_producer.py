"""insert / insert_many / COPY: rows, states, validation before any write, NOTIFY."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import awa
from awa import config

from .conftest import HTMLToPDF, SendEmail, count_jobs


async def test_insert_derives_kind_and_applies_defaults(client, db):
    job = await client.insert(SendEmail("a@b"))
    assert (job.kind, job.queue, job.state, job.priority, job.max_attempts) == (
        "send_email", "default", awa.JobState.Available, 2, 25)
    assert job.args == {"to": "a@b", "subject": "hi"}  # the stored JSON, as awa-pg 0.6.9
    row = db.execute("SELECT *, state::text AS state FROM awa.jobs WHERE id = %s",
                     (job.id,)).fetchone()
    assert row["args"] == {"to": "a@b", "subject": "hi"} and row["state"] == "available"


async def test_insert_options_are_stored(client, db):
    job = await client.insert({"n": 1}, kind="raw", queue="email", priority=1, max_attempts=3,
                              tags=["a", 'we"ird,{tag}'], metadata={"tenant": 7},
                              ordering_key=b"\x01\x02")
    row = db.execute("SELECT * FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
    assert (row["kind"], row["queue"], row["priority"], row["max_attempts"]) == (
        "raw", "email", 1, 3)
    assert row["tags"] == ["a", 'we"ird,{tag}']
    assert row["metadata"] == {"tenant": 7, "ordering_key": "0102"}


async def test_future_run_at_goes_to_scheduled_jobs(client, db):
    when = datetime.now(UTC) + timedelta(hours=1)
    job = await client.insert(HTMLToPDF("u"), run_at=when)
    assert job.kind == "html_to_pdf" and job.state == awa.JobState.Scheduled
    row = db.execute("SELECT state::text AS state, run_at FROM awa.jobs WHERE id = %s",
                     (job.id,)).fetchone()
    assert row["state"] == "scheduled" and row["run_at"] == when
    past = await client.insert(HTMLToPDF("p"), run_at=datetime.now(UTC)
                               - timedelta(minutes=1))
    assert past.state == awa.JobState.Scheduled  # any explicit run_at (awa-pg 0.6.9)


async def test_insert_many_keeps_order_and_splits_by_run_at(client, db):
    later = timedelta(minutes=5)
    jobs = await client.insert_many(
        [SendEmail(str(i)) for i in range(2500)],
        opts=[{"run_at": later, "priority": 4} if i % 1000 == 0 else None for i in range(2500)])
    assert [j.args["to"] for j in jobs] == [str(i) for i in range(2500)]
    assert jobs.skipped == 0
    assert [j.state for j in jobs[:2]] == [awa.JobState.Scheduled, awa.JobState.Available]
    assert count_jobs(db, state="scheduled") == 3 and count_jobs(db, state="available") == 2497
    assert count_jobs(db, priority=4) == 3


async def test_empty_batches_write_nothing(client, db):
    assert await client.insert_many([]) == [] and await client.enqueue_many_copy([]) == 0
    assert await client.insert_many_copy([]) == [] and count_jobs(db) == 0


async def test_copy_paths(client, db):
    count = await client.enqueue_many_copy([SendEmail(str(i)) for i in range(1500)],
                                           queue="bulk", tags=["t"])
    assert count == 1500 and count.skipped == 0
    jobs = await client.insert_many_copy([SendEmail("c1"), SendEmail("c2")], queue="bulk",
                                         run_at=timedelta(hours=1))
    assert [j.state for j in jobs] == [awa.JobState.Scheduled] * 2
    assert [j.args["to"] for j in jobs] == ["c1", "c2"]
    plain = await client.insert_many_copy([SendEmail("p1"), SendEmail("p2")], queue="bulk",
                                          priority=3)
    assert [(j.args["to"], j.state, j.priority) for j in plain] == [
        ("p1", awa.JobState.Available, 3), ("p2", awa.JobState.Available, 3)]
    assert plain[0].id < plain[1].id and plain.skipped == 0
    assert count_jobs(db, queue="bulk") == 1504
    row = db.execute("SELECT tags, args FROM awa.jobs WHERE queue = 'bulk' LIMIT 1").fetchone()
    assert row["tags"] == ["t"] and set(row["args"]) == {"to", "subject"}


async def test_insert_notifies_the_queue_at_commit(client, listen):
    listener = listen("awa:email")
    await client.insert(SendEmail("x"), queue="email")
    assert listener.received() == [("awa:email", "")]
    listener2 = listen("awa:copyq")
    await client.enqueue_many_copy([SendEmail("x")] * 3, queue="copyq")
    assert listener2.received() == [("awa:copyq", "")]


async def test_scheduled_insert_does_not_notify(client, listen):
    listener = listen("awa:later")
    await client.insert(SendEmail("x"), queue="later", run_at=timedelta(hours=1))
    assert listener.received(timeout=0.3) == []


BAD_INPUT = [
    ({"priority": 0}, awa.ValidationError, "priority must be an integer from 1 to 4"),
    ({"priority": 5}, awa.ValidationError, "priority must be an integer from 1 to 4"),
    ({"max_attempts": 0}, awa.ValidationError, "max_attempts must be an integer from 1 to 1000"),
    ({"max_attempts": 1001}, awa.ValidationError, "max_attempts"),
    ({"queue": ""}, awa.ValidationError, "non-empty"),
    ({"queue": "q" * (config.MAX_QUEUE_NAME_BYTES + 1)}, awa.ValidationError, "LISTEN channel"),
    ({"queue": "é" * 30}, awa.ValidationError, "60 bytes"),
    ({"tags": "notalist"}, awa.ValidationError, "tags"),
    ({"metadata": {"x": object()}}, awa.SerializationError, "metadata"),
    ({"unique_opts": {"by_nothing": True}}, awa.ValidationError, "unknown unique_opts"),
    ({"run_at": "tomorrow"}, awa.ValidationError, "ISO 8601"),
]


@pytest.mark.parametrize("options, error, message", BAD_INPUT)
async def test_bad_input_is_one_line_and_writes_nothing(client, db, options, error, message):
    with pytest.raises(error, match=message) as info:
        await client.insert(SendEmail("x"), **options)
    assert "\n" not in str(info.value)
    with pytest.raises(error):
        await client.insert_many([SendEmail("ok"), SendEmail("ok2")], **options)
    with pytest.raises(error):
        await client.enqueue_many_copy([SendEmail("ok")], **options)
    assert count_jobs(db) == 0


async def test_longest_queue_name_that_fits_works(client, listen):
    name = "q" * config.MAX_QUEUE_NAME_BYTES
    listener = listen(f"awa:{name}")
    job = await client.insert(SendEmail("x"), queue=name)
    assert job.queue == name and listener.received() == [(f"awa:{name}", "")]


async def test_non_serializable_args_in_a_batch_write_nothing(client, db):
    rows = [{"n": 1}, {"n": 2}, {"n": object()}]
    for call in (client.insert_many, client.insert_many_copy, client.enqueue_many_copy):
        with pytest.raises(awa.SerializationError, match="not JSON-serializable") as info:
            await call(rows, kind="raw")
        assert "\n" not in str(info.value)
    with pytest.raises(awa.SerializationError):
        await client.insert(42)
    assert count_jobs(db) == 0


async def test_traceparent_is_stored_in_metadata(client):
    context = SpanContext(trace_id=0x1234, span_id=0x99, is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with trace.use_span(NonRecordingSpan(context)):
        job = await client.insert(SendEmail("traced"))
    assert job.metadata["traceparent"] == (
        "00-00000000000000000000000000001234-0000000000000099-01")
    plain = await client.insert(SendEmail("untraced"))
    assert "traceparent" not in plain.metadata


def test_sync_client_inserts(database_url, db):
    with awa.Client(database_url) as client:
        job = client.insert(SendEmail("sync"), queue="sync")
        jobs = client.insert_many([SendEmail("a"), SendEmail("b")], queue="sync")
        count = client.enqueue_many_copy([SendEmail("c")], queue="sync")
    assert job.state == awa.JobState.Available and len(jobs) == 2 and count == 1
    assert count_jobs(db, queue="sync") == 4


async def test_unmigrated_database_names_the_fix(empty_database_url, db):
    client = awa.AsyncClient(empty_database_url)
    try:
        with pytest.raises(awa.SchemaNotMigrated, match="awa migrate"):
            await client.insert(SendEmail("x"))
    finally:
        await client.close()


def test_unreachable_database_is_one_line():
    with pytest.raises(awa.DatabaseError, match="cannot connect") as info:
        awa.AsyncClient("postgresql://postgres@127.0.0.1:1/none")
    assert "\n" not in str(info.value)
