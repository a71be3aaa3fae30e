"""Conformance: the ops read side (``OpsReads``) of every engine.

Each test arranges state through the engine's ``Arrange`` (below: how a job
is enqueued, claimed, aged, dead-lettered on that engine) and asserts only
what the read methods return, so a second engine adds its ``Arrange`` and
passes these tests unchanged.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from awa.liveness import live_window_s, runtime_live
from awa.storage.canonical import CanonicalEngine
from awa.storage.engine import DlqCursor, DlqPageQuery, JobListQuery
from awa_ops.runtimes import (
    ALIVE,
    ORPHANED,
    OVERDUE,
    STALE,
    classify_attempt,
)
from support.arrange import canonical_job, db_now

DEADLINE_MS = 300_000


class CanonicalArrange:
    """How the canonical engine's state is set up for a test: jobs enqueued by the engine and
    given their state, claimed, aged and cancelled through the engine and the ``awa.jobs``
    view."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def enqueue(self, kind: str = "k", queue: str = "q", *, state: str = "available",
                      age_s: float = 0.0, run_in_s: float | None = None, priority: int = 2,
                      unique_key: bytes | None = None, unique_states: str | None = None,
                      tags: list[str] | None = None) -> int:
        now = await db_now(self.conn)
        run_at = now + timedelta(seconds=run_in_s if run_in_s is not None else -age_s)
        return await canonical_job(
            self.conn, state, kind=kind, queue=queue, priority=priority, run_at=run_at,
            created_at=now - timedelta(seconds=age_s), unique_key=unique_key,
            unique_states=unique_states if unique_key else None, tags=tags or [])

    async def claim(self, queue: str = "q", n: int = 1) -> list[int]:
        return [j.id for j in await CanonicalEngine().claim_batch(self.conn, queue, n,
                                                                  DEADLINE_MS)]

    async def age(self, job_id: int, *, heartbeat_age_s: float | None = None,
                  deadline_in_s: float | None = None, running_for_s: float | None = None) -> None:
        await self.conn.execute(
            """UPDATE awa.jobs SET
                   heartbeat_at = coalesce(now() - make_interval(secs => %s), heartbeat_at),
                   deadline_at = coalesce(now() + make_interval(secs => %s), deadline_at),
                   attempted_at = coalesce(now() - make_interval(secs => %s), attempted_at)
                WHERE id = %s""", (heartbeat_age_s, deadline_in_s, running_for_s, job_id))

    async def cancel_running(self, job_id: int, *, ago_s: float) -> None:
        await self.conn.execute(
            """UPDATE awa.jobs SET state = 'cancelled',
                   finalized_at = now() - make_interval(secs => %s)
                WHERE id = %s""", (ago_s, job_id))

    async def dead_letter(self, job_id: int, *, kind: str = "k", queue: str = "q",
                          reason: str = "max_attempts_exhausted", ago_s: float = 0.0,
                          error: str = "boom", attempts: int = 1) -> None:
        errors = [json.dumps({"error": error, "attempt": n}) for n in range(1, attempts + 1)]
        await self.conn.execute(
            """INSERT INTO awa.dlq_entries (job_id, kind, queue, args, state, attempt, errors,
                   dlq_reason, dlq_at, created_at, run_at)
               VALUES (%s, %s, %s, '{}', 'failed', %s, %s::jsonb[], %s,
                       now() - make_interval(secs => %s), now(), now())""",
            (job_id, kind, queue, attempts, errors, reason, ago_s))

    async def runtime(self, *, host: str = "h", leader: bool = False, seen_ago_s: float = 0.0,
                      snapshot_interval_ms: int = 10_000, queues: Any = None,
                      shutting_down: bool = False) -> str:
        instance = str(uuid.uuid4())
        await self.conn.execute(
            """INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version, started_at,
                   last_seen_at, snapshot_interval_ms, leader, maintenance_alive, shutting_down,
                   queues)
               VALUES (%s, %s, 1, '0', now() - interval '1 hour',
                       now() - make_interval(secs => %s), %s, %s, %s, %s, %s)""",
            (instance, host, seen_ago_s, snapshot_interval_ms, leader, leader, shutting_down,
             json.dumps(queues if queues is not None else ["q"])))
        return instance


ARRANGE = {"canonical": CanonicalArrange}


@pytest.fixture
def arrange(engine_name: str, aconn: psycopg.AsyncConnection[Any]) -> Any:
    return ARRANGE[engine_name](aconn)


def near(value: float | None, expected: float, slack: float = 5.0) -> bool:
    return value is not None and abs(value - expected) <= slack


# --- running attempts ----------------------------------------------------------------

async def test_running_attempt_of_a_claimed_job_has_its_claim_and_ages(engine, aconn, arrange):
    job = await arrange.enqueue("send", "mail")
    await arrange.enqueue("send", "mail")  # stays available
    assert await arrange.claim("mail") == [job]
    await arrange.age(job, heartbeat_age_s=40, deadline_in_s=60, running_for_s=100)

    [a] = await engine.running_attempts(aconn, limit=10)
    assert (a.id, a.kind, a.queue, a.attempt, a.run_lease) == (job, "send", "mail", 1, 1)
    assert a.attempted_at is not None and a.heartbeat_at is not None and a.deadline_at is not None
    assert near(a.heartbeat_age_s, 40) and near(a.deadline_remaining_s, 60)
    assert near(a.running_for_s, 100)

    assert [x.id for x in await engine.running_attempts(aconn, job_ids=[job], limit=10)] == [job]
    assert await engine.running_attempts(aconn, job_ids=[job + 1000], limit=10) == []
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    assert await engine.running_attempts(aconn, started_before=long_ago, limit=10) == []


async def test_running_attempts_oldest_heartbeat_first_and_bounded(engine, aconn, arrange):
    ids = [await arrange.enqueue() for _ in range(3)]
    assert sorted(await arrange.claim(n=3)) == sorted(ids)
    for age, job in zip((10, 30, 20), ids):
        await arrange.age(job, heartbeat_age_s=age)
    attempts = await engine.running_attempts(aconn, limit=2)
    assert [a.id for a in attempts] == [ids[1], ids[2]]


async def test_stale_and_overdue_counted_and_classified(engine, aconn, arrange):
    fresh, stale, overdue = [await arrange.enqueue(queue="w") for _ in range(3)]
    await arrange.claim("w", 3)
    await arrange.age(stale, heartbeat_age_s=120)
    await arrange.age(overdue, deadline_in_s=-5)

    [counts] = await engine.running_counts(aconn, stale_after_s=90)
    assert (counts.queue, counts.running, counts.stale, counts.overdue) == ("w", 3, 1, 1)
    assert near(counts.oldest_heartbeat_s, 120)
    assert await engine.running_counts(aconn, stale_after_s=90, queue="other") == []

    classes = {a.id: classify_attempt(heartbeat_age_s=a.heartbeat_age_s,
                                      deadline_remaining_s=a.deadline_remaining_s,
                                      stale_after_s=90, owner_gone=False, served=True)
               for a in await engine.running_attempts(aconn, limit=10)}
    assert classes == {fresh: ALIVE, stale: STALE, overdue: OVERDUE}
    # The runtime that ran the stale one is gone, or nobody serves the queue: orphaned.
    assert classify_attempt(heartbeat_age_s=120, deadline_remaining_s=30, stale_after_s=90,
                            owner_gone=True, served=True) == ORPHANED
    assert classify_attempt(heartbeat_age_s=1, deadline_remaining_s=30, stale_after_s=90,
                            owner_gone=False, served=False) == ORPHANED
    # the runtime that claimed it is gone: orphaned at once, before its heartbeat is stale
    # (no beat will come; "alive" here once hid a SIGKILLed worker's jobs)
    assert classify_attempt(heartbeat_age_s=1, deadline_remaining_s=30, stale_after_s=90,
                            owner_gone=True, served=True) == ORPHANED


async def test_cancelled_while_running_is_listed_until_its_deadline(engine, aconn, arrange):
    job = await arrange.enqueue()
    await arrange.claim()
    await arrange.age(job, heartbeat_age_s=5)  # its last heartbeat came before the cancel
    await arrange.cancel_running(job, ago_s=3)
    [c] = await engine.cancelled_while_running(aconn, window_s=600, stale_after_s=90, limit=10)
    assert c.job_id == job and c.run_lease == 1 and near(c.cancelled_age_s, 3)
    assert c.heartbeat_after_cancel is False
    assert await engine.cancelled_while_running(aconn, window_s=1, stale_after_s=90,
                                                limit=10) == []


# --- queue depth and lag ---------------------------------------------------------------

async def test_queue_lag_and_details(engine, aconn, arrange):
    for age in (30, 10, 5):
        await arrange.enqueue(queue="d", age_s=age)
    await arrange.enqueue(queue="d", state="scheduled", run_in_s=3600)
    await arrange.enqueue(queue="d", state="retryable", run_in_s=60)
    await arrange.enqueue(queue="d", state="completed")
    await arrange.enqueue(queue="e", state="failed")
    await arrange.claim("d")  # the oldest available

    now = datetime.now(UTC)
    details = {q.queue: q for q in await engine.queue_details(
        aconn, ["d", "e"], since=now - timedelta(minutes=5), until=now + timedelta(minutes=1),
        cap=100)}
    assert near(details["d"].lag_s, 10) and details["d"].oldest_available is not None
    assert details["e"].lag_s is None and details["e"].oldest_available is None
    assert details["d"].completed == 1 and details["d"].paused is False
    assert (await engine.queue_details(aconn, ["d"], cap=100))[0].completed == 0


async def test_recently_completed_queues(engine, aconn, arrange):
    """A queue known only from its completions is found (issue 33); failed or waiting jobs,
    completions outside the window and queues past the limit are not."""
    for queue in ("b", "a", "b"):
        await arrange.enqueue(queue=queue, state="completed")
    await arrange.enqueue(queue="c", state="failed")
    await arrange.enqueue(queue="d")
    assert await engine.recently_completed_queues(aconn, within_s=3600, limit=10) == ["a", "b"]
    assert await engine.recently_completed_queues(aconn, within_s=3600, limit=1) == ["a"]
    assert await engine.recently_completed_queues(aconn, within_s=0, limit=10) == []


# --- the REST API's summaries ----------------------------------------------------------------

async def test_kind_counts_are_read_by_index_and_capped(engine, aconn, arrange):
    for _ in range(2):
        await arrange.enqueue("a", "q1")
    await arrange.enqueue("a", "q1", state="scheduled", run_in_s=600)
    await arrange.enqueue("a", "q2", state="completed")
    await arrange.enqueue("b", "q3", state="failed")
    await arrange.enqueue("c", "q1", state="completed")
    counts = {k.kind: k for k in await engine.kind_counts(aconn, cap=100)}
    assert {k: (c.job_count, c.queue_count, c.completed_last_hour, c.capped)
            for k, c in counts.items()} == {"a": (4, 2, 1, False), "b": (1, 1, 0, False),
                                            "c": (1, 1, 1, False)}
    # Each part of the read stops at the cap: the counts are lower bounds, and say so.
    capped = {k.kind: k for k in await engine.kind_counts(aconn, cap=1)}
    assert capped["a"].capped and capped["a"].job_count < 4
    assert all(c.job_count <= counts[k].job_count for k, c in capped.items())


async def test_created_timeseries_reads_the_newest_jobs_up_to_the_cap(engine, aconn, arrange):
    await arrange.enqueue(age_s=600)  # created before the window
    for _ in range(2):
        await arrange.enqueue()
    await arrange.enqueue(state="completed")
    series = await engine.created_timeseries(aconn, minutes=5, cap=100)
    by_state: dict[str, int] = {}
    for p in series:
        by_state[p.state] = by_state.get(p.state, 0) + p.count
    assert by_state == {"available": 2, "completed": 1}
    assert not any(p.capped for p in series)
    # Three jobs in the window, two read: the count stops there and the oldest minute says so.
    short = await engine.created_timeseries(aconn, minutes=5, cap=2)
    assert sum(p.count for p in short) == 2 and short[0].capped
    # The cap reached exactly at the window's end: nothing is short.
    whole = await engine.created_timeseries(aconn, minutes=5, cap=4)
    assert sum(p.count for p in whole) == 3 and not any(p.capped for p in whole)


# --- DLQ ------------------------------------------------------------------------------------

async def test_dlq_pages_with_cursors_and_filters(engine, aconn, arrange):
    for i, (queue, kind, reason) in enumerate([
            ("a", "k1", "terminal_error"), ("a", "k2", "max_attempts_exhausted"),
            ("b", "k1", "terminal_error"), ("a", "k1", "manual"), ("b", "k2", "terminal_error")]):
        await arrange.dead_letter(100 + i, kind=kind, queue=queue, reason=reason, ago_s=100 - i)

    first = await engine.dlq_page(aconn, DlqPageQuery(page=2))
    assert [e.job_id for e in first.entries] == [104, 103]
    assert first.next_before == DlqCursor(first.entries[-1].dlq_at, 103)
    second = await engine.dlq_page(aconn, DlqPageQuery(page=2, before=first.next_before))
    assert [e.job_id for e in second.entries] == [102, 101]
    last = await engine.dlq_page(aconn, DlqPageQuery(page=2, before=second.next_before))
    assert [e.job_id for e in last.entries] == [100] and last.next_before is None
    assert last.entries[0].last_error == "boom" and last.entries[0].dlq_reason == "terminal_error"

    by_queue = await engine.dlq_page(aconn, DlqPageQuery(queue="a"))
    assert [e.job_id for e in by_queue.entries] == [103, 101, 100]
    by_kind = await engine.dlq_page(aconn, DlqPageQuery(kind="k2"))
    assert [e.job_id for e in by_kind.entries] == [104, 101]
    both = await engine.dlq_page(aconn, DlqPageQuery(queue="b", reason="terminal_error", page=1))
    assert [e.job_id for e in both.entries] == [104]
    rest = await engine.dlq_page(aconn, DlqPageQuery(queue="b", reason="terminal_error",
                                                     before=both.next_before))
    assert [e.job_id for e in rest.entries] == [102]

    per_queue = {d.queue: d for d in await engine.dlq_depths_by_queue(aconn, cap=3,
                                                                      max_queues=10)}
    assert (per_queue["a"].count, per_queue["a"].capped) == (3, True)
    assert (per_queue["b"].count, per_queue["b"].capped) == (2, False)
    per_reason = {(d.queue, d.reason): d.count for d in await engine.dlq_depths(aconn)}
    assert per_reason == {("a", "terminal_error"): 1, ("a", "max_attempts_exhausted"): 1,
                          ("a", "manual"): 1, ("b", "terminal_error"): 2}
    recent = await engine.dlq_depths(aconn, queue="b", recent_s=98)
    assert sum(d.recent for d in recent) == 1 and all(d.queue == "b" for d in recent)


async def test_repeated_errors_find_the_poison_job(engine, aconn, arrange):
    for job_id in (1, 2, 3):
        await arrange.dead_letter(job_id, kind="parse", queue="in", error="bad json", attempts=4)
    [e] = await engine.repeated_errors(aconn, sample=50)
    assert (e.kind, e.queue, e.message, e.jobs, e.max_repeats_in_one_job) == (
        "parse", "in", "bad json", 3, 4)
    assert e.sample_job_ids == [3, 2, 1] and e.places == ["dlq"]


# --- jobs ------------------------------------------------------------------------------------

async def test_job_pages_and_job_record(engine, aconn, arrange):
    a = await arrange.enqueue("send", "mail", tags=["vip"])
    b = await arrange.enqueue("send", "mail", state="scheduled", run_in_s=60)
    c = await arrange.enqueue("resize", "img", state="failed")
    assert [j.id for j in await engine.job_page(aconn, JobListQuery())] == [c, b, a]
    assert [j.id for j in await engine.job_page(aconn, JobListQuery(state="scheduled"))] == [b]
    assert [j.id for j in await engine.job_page(aconn, JobListQuery(queue="mail"))] == [b, a]
    assert [j.id for j in await engine.job_page(aconn, JobListQuery(kind="resize"))] == [c]
    assert [j.id for j in await engine.job_page(aconn, JobListQuery(tag="vip"))] == [a]
    assert [j.id for j in await engine.job_page(aconn, JobListQuery(page=1))] == [c]
    [row] = await engine.job_page(aconn, JobListQuery(state="failed"))
    assert (row.kind, row.queue, row.state, row.tags) == ("resize", "img", "failed", [])

    record = await engine.job_record(aconn, a)
    assert record is not None and record.job.id == a and record.job.tags == ["vip"]
    assert not record.in_dlq and record.job.state.value == "available"
    await arrange.dead_letter(777, kind="gone", reason="terminal_error")
    dead = await engine.job_record(aconn, 777)
    assert dead is not None and dead.in_dlq and dead.dlq_reason == "terminal_error"
    assert dead.job.kind == "gone" and dead.dlq_at is not None
    assert await engine.job_record(aconn, 10**9) is None


async def test_job_page_filters_by_args_text(engine, engine_url, aconn):
    """The console's ``/`` text: jobs whose args contain it (case-insensitive), alone or
    with the other filters (within the newest ``window`` rows, like kind and tag)."""
    import awa

    async with awa.AsyncClient(engine_url) as client:
        alice = (await client.insert({"to": "Alice@example.com", "n": 1}, kind="send",
                                     queue="mail")).id
        bob = (await client.insert({"to": "bob@example.com"}, kind="send", queue="mail")).id
        other = (await client.insert({"note": "alice again"}, kind="resize", queue="img",
                                     run_at=datetime.now(UTC) + timedelta(hours=1))).id

    def page(**kw: Any) -> Any:
        return engine.job_page(aconn, JobListQuery(**kw))

    assert [j.id for j in await page(args="alice")] == [other, alice]
    assert [j.id for j in await page(args="ALICE", queue="mail")] == [alice]
    assert [j.id for j in await page(args="alice", state="scheduled")] == [other]
    assert [j.id for j in await page(args="example.com", kind="send")] == [bob, alice]
    assert [j.id for j in await page(args='"n": 1')] == [alice]
    assert await page(args="nobody") == []
    assert JobListQuery(args="x").post_filtered


# --- uniqueness --------------------------------------------------------------------------------

async def test_unique_claim_holder_lookup_and_wedge(engine, aconn, arrange):
    key = b"k" * 16
    holder = await arrange.enqueue("u", "uq", unique_key=key, unique_states="11111000")
    [h] = await engine.unique_claim_holders(aconn, [key])
    assert (h.unique_key, h.job_id, h.state, h.in_dlq) == (key, holder, "available", False)
    assert await engine.unique_claim_holders(aconn, [b"x" * 16]) == []
    assert await engine.unique_claim_holders(aconn, []) == []
    assert await engine.wedged_claims(aconn) == []

    # A duplicate whose mask leaves out running runs while the holder keeps the key.
    stuck = await arrange.enqueue("u", "uq", unique_key=key, unique_states="10000000")
    await arrange.claim("uq", 2)
    assert {a.id for a in await engine.running_attempts(aconn, limit=10)} == {holder, stuck}
    assert [(w.queue, w.wedged) for w in await engine.wedged_claims(aconn)] == [("uq", 1)]
    [h] = await engine.unique_claim_holders(aconn, [key])
    assert (h.job_id, h.state) == (holder, "running")


# --- runtimes -----------------------------------------------------------------------------------

async def test_runtime_list_and_liveness(engine, aconn, arrange):
    leader = await arrange.runtime(host="lead", leader=True, seen_ago_s=5)
    live = await arrange.runtime(host="live", seen_ago_s=1, queues=[{"name": "a"}, "b"])
    dead = await arrange.runtime(host="dead", seen_ago_s=600, queues={"c": {"weight": 1}})
    fast = await arrange.runtime(host="fast", seen_ago_s=2, snapshot_interval_ms=10)

    runtimes = await engine.runtime_instances(aconn)
    assert [r.instance_id for r in runtimes] == [leader, live, fast, dead]
    by_id = {r.instance_id: r for r in runtimes}
    assert by_id[live].queues == ["a", "b"] and by_id[dead].queues == ["c"]
    assert near(by_id[dead].last_seen_age_s, 600) and near(by_id[leader].uptime_s, 3600)
    assert by_id[leader].leader and by_id[leader].maintenance_alive
    assert len(await engine.runtime_instances(aconn, limit=2)) == 2

    alive = {r.instance_id for r in runtimes
             if runtime_live(r.last_seen_age_s, r.snapshot_interval_ms, 90)}
    assert alive == {leader, live}  # fast promised a snapshot every 10 ms: 1 s of silence is death
    # issue 13: live within 2 x the runtime's own snapshot interval (was 3 x)
    assert live_window_s(10_000) == 20.0
    assert live_window_s(200) == 2.0 and live_window_s(200, stale_after_s=1.0) == 0.75


async def test_capped_job_record_leaves_big_values_out(engine, engine_url, aconn, arrange):
    """``job_record(cap_bytes=...)``: values over the cap arrive as their head and size."""
    import awa

    async with awa.AsyncClient(engine_url) as client:
        big = (await client.insert({"blob": "x" * 50_000}, kind="blob",
                                   metadata={"small": True})).id
        small = (await client.insert({"n": 1}, kind="blob")).id
    record = await engine.job_record(aconn, big, cap_bytes=1_000)
    assert record is not None and set(record.oversized) == {"args"}
    args = record.oversized["args"]
    assert args.head.startswith('{"blob": "xxx') and len(args.head) == 1_000
    assert args.total_bytes > 50_000 and args.more_bytes == args.total_bytes - 1_000
    assert record.job.args == {} and record.job.metadata == {"small": True}
    whole = await engine.job_record(aconn, small, cap_bytes=1_000)
    assert whole is not None and whole.oversized == {} and whole.job.args == {"n": 1}
    await arrange.dead_letter(778, kind="gone", reason="terminal_error")
    dead = await engine.job_record(aconn, 778, cap_bytes=1_000)
    assert dead is not None and dead.in_dlq and dead.oversized == {}
