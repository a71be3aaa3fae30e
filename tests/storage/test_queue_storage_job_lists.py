"""Queue storage's engine-side job lists, queue details, queue stats and state counts give
what the ``awa.jobs`` view gives.

The lists (``job_page``, ``list_jobs``), ``queue_details``, ``queue_stats`` and
``state_counts`` read each part of the layout by its own index
(``awa.storage.queue_storage.reads``, ``.admin``); here they are compared, filter by filter,
with the same reads run against the view, on a database holding jobs in every state --
several queues, kinds, tags and priorities; receipts, materialized leases, a parked
attempt, tombstoned, retried (re-placed) and dead-lettered jobs -- written through
the engine's own paths.  Every way of reading the available part is compared: by lane, by
job id, and by job id with the walk cut short (then by lane).
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from awa import callbacks, config
from awa.job import JOB_COLUMNS, Job, JobState
from awa.storage.canonical import admin as canonical_admin
from awa.storage.canonical import reads as canonical
from awa.storage.common import reads as common
from awa.storage.common.fetch import fetch_all
from awa.storage.engine import AttemptWrite, JobListQuery, QueueStat
from awa.storage.queue_storage import reads

DEADLINE_MS = 60_000
QUEUES = ("alpha", "beta", "gamma")
KINDS = ("resize", "send", "index")

# The reads as they were: canonical's statements on the awa.jobs view.
VIEW_PAGE = f"""
SELECT t.* FROM (
    SELECT {common.JOB_LIST_COLUMNS}, {common.ARGS_MATCH} FROM awa.jobs t
     WHERE (%(state)s::text IS NULL OR t.state::text = %(state)s)
       AND (%(queue)s::text IS NULL OR t.queue = %(queue)s)
       AND (%(kind)s::text IS NULL OR t.kind = %(kind)s)
       AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
     ORDER BY t.id DESC
     LIMIT CASE WHEN %(args)s::text IS NULL THEN %(page)s ELSE %(window)s END
) t
 WHERE t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s"""
VIEW_LIST = f"""
SELECT {", ".join(JOB_COLUMNS)} FROM awa.jobs
 WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR tags @> ARRAY[%(tag)s::text])
   AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s)
 ORDER BY id DESC LIMIT %(limit)s"""
VIEW_QUEUE_DETAILS = canonical.QUEUE_DETAILS.replace("awa.jobs_hot", "awa.jobs")
VIEW_QUEUE_STATS = (canonical_admin.QUEUE_STATS.replace("FROM awa.jobs_hot", "FROM awa.jobs")
                    .replace("FROM awa.scheduled_jobs", "FROM awa.jobs"))


# Queue storage's own reads: its two layouts (schema awa, and a schema of its own).
pytestmark = pytest.mark.parametrize("engine_name", ["queue_storage", "queue_storage@awa_qs"])


@pytest.fixture
def qs_engine(engine: Any) -> Any:
    return engine


@pytest.fixture
async def client(engine_url: str):
    c = awa.AsyncClient(engine_url)
    yield c
    await c.close()


def write(job: Job[Any], **kw: Any) -> AttemptWrite:
    return AttemptWrite(job.id, job.run_lease, attempt=job.attempt, **kw)


async def every_state(engine: Any, aconn: psycopg.AsyncConnection[Any],
                      client: awa.AsyncClient) -> None:
    """Jobs in every state over QUEUES, KINDS, tags and priorities."""
    n = itertools.count()
    for queue, kind, priority in itertools.product(QUEUES, KINDS, (1, 2, 4)):
        tags = [["vip"], [], ["vip", "bulk"], ["bulk"]][next(n) % 4]
        await client.insert_many_copy([{"n": next(n), "who": f"{kind}-{queue}"}
                                       for _ in range(4)], kind=kind, queue=queue,
                                      priority=priority, tags=tags)
    for queue in QUEUES:
        await client.insert({"n": "later"}, kind="report", queue=queue, tags=["vip"],
                            run_at=datetime.now(UTC) + timedelta(hours=1))
    for queue in QUEUES:
        jobs = await engine.claim_batch(aconn, queue, 30, DEADLINE_MS, uuid.uuid4())
        done, failed, retried, snoozed, cancelled, dead, beat, parked, dropped = jobs[:9]
        await engine.complete_batch(aconn, [write(j) for j in jobs[9:16]] + [write(done)])
        await engine.fail_batch(aconn, [write(failed, error={"error": "boom"})])
        await engine.retry_batch(aconn, [write(retried, error={"error": "again"},
                                               delay_s=600)])
        await engine.snooze_batch(aconn, [write(snoozed, delay_s=600)])
        await engine.cancel_batch(aconn, [write(cancelled, error={"error": "stop"})])
        await engine.dead_letter_batch(aconn, [write(dead, reason="poison",
                                                     error={"error": "bad"})])
        await engine.heartbeat_batch(aconn, [write(beat, progress={"at": 1})])
        token = await callbacks.register_callback(await client._get_pool(), parked.id,
                                                  parked.run_lease, 60)
        await engine.park_batch(aconn, [write(parked, callback_id=token.id)])
        await engine.fail_batch(aconn, [write(dropped, error={"error": "boom"})])
        # A failed job run again: appended to its lane afresh, with its old (low) id.
        assert await engine.retry(aconn, dropped.id) is not None
    # A job whose run_at is long past, made available behind the others of its lane.
    late = await client.insert({"n": "late"}, kind="send", queue="alpha", priority=2,
                               run_at=datetime.now(UTC) - timedelta(hours=2))
    await aconn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (late.id,))
    # An available job cancelled (tombstoned) and one deleted through the view.
    cur = await aconn.execute("SELECT id FROM awa.jobs WHERE state = 'available' "
                              "ORDER BY id LIMIT 2")
    first, second = [r["id"] for r in await cur.fetchall()]
    assert await engine.cancel(aconn, first) is not None
    await aconn.execute("DELETE FROM awa.jobs WHERE id = %s", (second,))
    cur = await aconn.execute("SELECT state::text AS state, count(*) AS n FROM awa.jobs "
                              "GROUP BY 1")
    states = {r["state"]: r["n"] for r in await cur.fetchall()}
    assert set(states) == {"available", "running", "waiting_external", "completed", "failed",
                           "cancelled", "retryable", "scheduled"}, states


QUERIES = [
    JobListQuery(), JobListQuery(page=7), JobListQuery(page=1000),
    *(JobListQuery(state=s.value, page=p) for s in JobState for p in (3, 100)),
    *(JobListQuery(queue=q, page=5) for q in (*QUEUES, "nowhere")),
    *(JobListQuery(kind=k) for k in (*KINDS, "report")),
    JobListQuery(tag="vip", page=11), JobListQuery(tag="bulk", state="available"),
    JobListQuery(state="available", queue="beta", kind="send", tag="vip"),
    JobListQuery(state="running", queue="gamma"), JobListQuery(args="alpha"),
    JobListQuery(args="RESIZE-b", page=4, window=20), JobListQuery(args="late"),
    JobListQuery(state="available", args="gamma", window=9),
]


def _query_params(q: JobListQuery) -> dict[str, Any]:
    return {"state": q.state, "queue": q.queue,
            "kind": q.kind, "tag": q.tag, "args": q.args, "page": q.page,
            "window": q.window}


@pytest.mark.parametrize("lane_max, scan_max", [(1_000_000, 50_000), (-1, 50_000), (-1, 3)],
                         ids=["by-lane", "by-id", "by-id-cut-short"])
async def test_job_lists_match_the_view(qs_engine, aconn, client, monkeypatch, lane_max,
                                        scan_max):
    engine = qs_engine
    await every_state(engine, aconn, client)
    monkeypatch.setattr(reads, "AVAILABLE_BY_LANE_MAX", lane_max)
    monkeypatch.setattr(reads, "AVAILABLE_SCAN_MAX", scan_max)
    for q in QUERIES:
        want = [common.job_summary(r)
                for r in await fetch_all(aconn, VIEW_PAGE, _query_params(q))]
        assert await engine.job_page(aconn, q) == want, q
    states: list[str | None] = [None, *(s.value for s in JobState)]
    for state, queue, kind, tag, limit in itertools.product(
            states, (None, "beta"), (None, "send"), (None, "vip"), (4, 100)):
        params = {"state": state, "queue": queue, "kind": kind, "tag": tag}
        before: int | None = None
        while True:  # every keyset page, as the REST API pages
            want_rows = await fetch_all(aconn, VIEW_LIST, {**params, "before_id": before,
                                                           "limit": limit})
            got = await engine.list_jobs(aconn, state=None if state is None else JobState(state),
                                         kind=kind, queue=queue, tag=tag, limit=limit,
                                         before_id=before)
            assert [j.__dict__ for j in got] == [Job.from_row(r).__dict__ for r in want_rows], \
                (params, before)
            if len(got) < limit:
                break
            before = got[-1].id


async def test_queue_details_match_the_view(qs_engine, aconn, client):
    engine = qs_engine
    await every_state(engine, aconn, client)
    await client.pause_queue("beta")
    now = datetime.now(UTC)
    for since, until in ((now - timedelta(minutes=5), now + timedelta(minutes=1)),
                         (None, None), (now + timedelta(minutes=1), now + timedelta(minutes=2))):
        for cap in (2, 100):
            asked = [*QUEUES, "nowhere"]
            want = await fetch_all(aconn, VIEW_QUEUE_DETAILS, {
                "queues": asked, "since": since, "until": until, "cap": cap,
                "priorities": list(range(config.MIN_PRIORITY, config.MAX_PRIORITY + 1))})
            got = await engine.queue_details(aconn, asked, since=since, until=until, cap=cap)
            assert [(d.queue, d.oldest_available, d.completed, d.paused, d.paused_by)
                    for d in got] == [(r["queue"], r["oldest_available"], int(r["completed"]),
                                       bool(r["paused"]), r["paused_by"]) for r in want]
            assert all((d.lag_s is None) == (r["lag_s"] is None) for d, r in zip(got, want))
    alpha = next(d for d in got if d.queue == "alpha")
    assert alpha.oldest_available is not None and alpha.lag_s is not None
    assert alpha.lag_s > 3600  # the job enqueued with a run_at two hours back


async def test_queue_stats_and_state_counts_match_the_view(qs_engine, aconn, client):
    engine = qs_engine
    await every_state(engine, aconn, client)
    await client.pause_queue("gamma")
    async with aconn.transaction():  # one now() for both
        want = [QueueStat(**r) for r in await fetch_all(aconn, VIEW_QUEUE_STATS)]
        got = await engine.queue_stats(aconn)
    assert got == want
    # canonical's STATE_COUNTS reads awa.jobs (and the DLQ)
    by_state: dict[str, int] = {}
    for r in await fetch_all(aconn, canonical.STATE_COUNTS):
        by_state[r["state"]] = by_state.get(r["state"], 0) + int(r["n"])
    assert await engine.state_counts(aconn) == by_state
    assert set(by_state) == {"available", "running", "waiting_external", "completed", "failed",
                             "cancelled", "retryable", "scheduled"}
    assert {s.queue for s in got} == set(QUEUES)
    assert all(s.available and s.running and s.failed and s.scheduled and s.retryable
               and s.waiting_external and s.completed_last_hour for s in got)
