"""Conformance: the maintenance group (rescues, promotion, retention, aging, cron CAS,
descriptors, queue depths), through the engine interface.

State is arranged by the engine's ``Arrange`` helper below (rows as a runtime would
have left them, with clocks set in the past, which no interface method can do) and
observed through the engine's return values and the ``awa.jobs`` view.  An engine
added to ``ENGINES`` adds its arranger to ``ARRANGERS``; the tests stay as they are.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg.rows import dict_row

from awa import lifecycle
from awa.storage.engine import ORIGINAL_PRIORITY_KEY, Descriptor, Engine, QueueDepth
from support.arrange import aged_columns, canonical_job, db_now


def NO_DLQ(queue: str) -> bool:
    """No queue has the DLQ enabled."""
    return False



class CanonicalArrange:
    """Rows in any state on the canonical engine: jobs enqueued by the engine and given their
    state through the ``awa.jobs`` view (``support.arrange.canonical_job``)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def job(self, *, state: str = "running", kind: str = "work", queue: str = "maint",
                  attempt: int = 1, max_attempts: int = 5, run_lease: int = 1,
                  priority: int = 2, heartbeat_age_s: float = 0.0,
                  deadline_in_s: float = 300.0, run_at_offset_s: float = 0.0,
                  finalized_age_s: float | None = None, unique_key: bytes | None = None,
                  unique_states: str | None = None,
                  callback_timeout_in_s: float | None = None) -> int:
        columns = aged_columns(
            await db_now(self.conn), state=state, kind=kind, queue=queue, attempt=attempt,
            max_attempts=max_attempts, run_lease=run_lease, priority=priority,
            heartbeat_age_s=heartbeat_age_s, deadline_in_s=deadline_in_s,
            run_at_offset_s=run_at_offset_s, finalized_age_s=finalized_age_s,
            unique_key=unique_key, unique_states=unique_states,
            callback_timeout_in_s=callback_timeout_in_s)
        return await canonical_job(self.conn, state, **columns)

    async def dlq_entry(self, job_id: int, *, queue: str = "maint", age_s: float = 0.0) -> None:
        await self.conn.execute(
            "INSERT INTO awa.dlq_entries (job_id, kind, queue, dlq_reason, dlq_at) "
            "VALUES (%s, 'k', %s, 'manual', now() - make_interval(secs => %s))",
            (job_id, queue, age_s))

    async def runtime(self, *, unseen_s: float) -> UUID:
        instance = uuid4()
        await self.conn.execute(
            "INSERT INTO awa.runtime_instances (instance_id, last_seen_at) "
            "VALUES (%s, now() - make_interval(secs => %s))", (instance, unseen_s))
        return instance

    async def runtimes(self) -> int:
        cur = await self.conn.execute("SELECT count(*) AS n FROM awa.runtime_instances")
        row = await cur.fetchone()
        assert row is not None
        return int(row["n"])

    async def runtime_descriptor_hashes(self, instance: UUID) -> Any:
        cur = await self.conn.execute("SELECT descriptor_hashes FROM awa.runtime_instances "
                                      "WHERE instance_id = %s", (instance,))
        row = await cur.fetchone()
        assert row is not None
        return row["descriptor_hashes"]

    async def descriptor(self, catalogue: str, name: str, *, unseen_s: float) -> None:
        table, key = (("awa.queue_descriptors", "queue") if catalogue == "queues"
                      else ("awa.job_kind_descriptors", "kind"))
        await self.conn.execute(
            f"INSERT INTO {table} ({key}, descriptor_hash, last_seen_at) "
            "VALUES (%s, 'h', now() - make_interval(secs => %s))", (name, unseen_s))

    async def descriptors(self, catalogue: str) -> dict[str, dict[str, Any]]:
        table, key = (("awa.queue_descriptors", "queue") if catalogue == "queues"
                      else ("awa.job_kind_descriptors", "kind"))
        cur = await self.conn.execute(f"SELECT *, {key} AS name FROM {table}")
        return {r["name"]: r for r in await cur.fetchall()}

    async def pause(self, queue: str) -> None:
        await self.conn.execute("INSERT INTO awa.queue_meta (queue, paused) VALUES (%s, true)",
                                (queue,))

    async def cron(self, name: str, *, queue: str = "reports",
                   last_enqueued_at: datetime | None = None) -> None:
        await self.conn.execute(
            """INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, args,
                   priority, max_attempts, tags, metadata, missed_fire_policy,
                   last_enqueued_at)
               VALUES (%s, '* * * * *', 'UTC', 'report', %s, '{"team": "ops"}', 2, 25,
                       '{}', '{}', 'coalesce', %s)""", (name, queue, last_enqueued_at))


ARRANGERS = {"canonical": CanonicalArrange}


@pytest.fixture
def arrange(engine_name: str, aconn: psycopg.AsyncConnection[Any]) -> CanonicalArrange:
    return ARRANGERS[engine_name](aconn)


@pytest.fixture
async def conn2(engine_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A second connection, as a second runtime (or a second leader) would have."""
    async with await psycopg.AsyncConnection.connect(engine_url, autocommit=True,
                                                     row_factory=dict_row) as conn:
        yield conn


async def job(conn: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any] | None:
    """The job as the ``awa.jobs`` view shows it (state as text); None once it left."""
    cur = await conn.execute("SELECT *, state::text AS state FROM awa.jobs WHERE id = %s",
                             (job_id,))
    return await cur.fetchone()


async def state(conn: psycopg.AsyncConnection[Any], job_id: int) -> str | None:
    row = await job(conn, job_id)
    return None if row is None else str(row["state"])


def by_queue(depths: list[QueueDepth]) -> dict[str, QueueDepth]:
    return {d.queue: d for d in depths}


# -- rescue --------------------------------------------------------------------------------
async def test_stale_heartbeats_retry_fail_or_dead_letter_by_attempts_and_dlq(
        engine: Engine, aconn, arrange):
    retry = await arrange.job(heartbeat_age_s=120, attempt=1, run_lease=7)
    plain = await arrange.job(queue="plain", heartbeat_age_s=120, attempt=3, max_attempts=3,
                              run_lease=2)
    lettered = await arrange.job(queue="letters", heartbeat_age_s=120, attempt=3,
                                 max_attempts=3, run_lease=4)
    live = await arrange.job(heartbeat_age_s=5)
    done = await arrange.job(state="completed", heartbeat_age_s=500, finalized_age_s=1)

    batch = await engine.rescue_stale_heartbeats(
        aconn, staleness_s=60, limit=10, dlq_enabled=lambda q: q == "letters")

    assert batch.found == 3
    assert (batch.retried, batch.failed, batch.dead_lettered, batch.duplicates) == (1, 1, 1, 0)
    assert sorted(batch.ended) == sorted([(retry, 7), (plain, 2), (lettered, 4)])
    [dead] = [r for r in batch.rescued if r.action == "dlq"]
    assert (dead.id, dead.queue, dead.dlq_reason) == (lettered, "letters", "heartbeat_stale")

    retried = await job(aconn, retry)
    assert retried is not None and retried["state"] == "retryable"
    assert retried["errors"][-1]["error"] == lifecycle.HEARTBEAT_STALE_ERROR
    assert retried["errors"][-1]["attempt"] == 1
    assert (retried["attempt"], retried["run_lease"]) == (1, 7)
    wait = (retried["run_at"] - datetime.now(retried["run_at"].tzinfo)).total_seconds()
    assert 0.5 < wait <= 2 * 1.25 + 0.5  # 2^1 s plus at most 25 % jitter
    failed = await job(aconn, plain)
    assert failed is not None and failed["state"] == "failed"
    assert failed["finalized_at"] is not None and failed["errors"][-1]["terminal"] is True
    assert await job(aconn, lettered) is None
    assert by_queue(await engine.queue_depths(aconn))["letters"].dlq_depth == 1
    assert await state(aconn, live) == "running"
    assert await state(aconn, done) == "completed"
    # Nothing left: the next batch finds nothing.
    again = await engine.rescue_stale_heartbeats(aconn, staleness_s=60, limit=10,
                                                 dlq_enabled=NO_DLQ)
    assert (again.found, again.rescued) == (0, [])


async def test_rescue_batches_are_bounded(engine: Engine, aconn, arrange):
    ids = [await arrange.job(heartbeat_age_s=100) for _ in range(5)]
    first = await engine.rescue_stale_heartbeats(aconn, staleness_s=1, limit=3,
                                                 dlq_enabled=NO_DLQ)
    second = await engine.rescue_stale_heartbeats(aconn, staleness_s=1, limit=3,
                                                  dlq_enabled=NO_DLQ)
    assert (first.found, first.retried, second.found, second.retried) == (3, 3, 2, 2)
    assert {await state(aconn, i) for i in ids} == {"retryable"}


async def test_expired_deadlines_are_rescued_and_exhausted_ones_dead_lettered(
        engine: Engine, aconn, arrange):
    late = await arrange.job(deadline_in_s=-1, run_lease=2)
    exhausted = await arrange.job(queue="letters", deadline_in_s=-5, attempt=2, max_attempts=2)
    on_time = await arrange.job(deadline_in_s=60)
    batch = await engine.rescue_expired_deadlines(aconn, limit=10, dlq_enabled=lambda q: True)
    assert (batch.retried, batch.dead_lettered) == (1, 1)
    assert (late, 2) in batch.ended
    assert [r.dlq_reason for r in batch.rescued if r.action == "dlq"] == ["deadline_exceeded"]
    row = await job(aconn, late)
    assert row is not None and row["state"] == "retryable"
    assert row["errors"][-1]["error"] == lifecycle.DEADLINE_EXCEEDED_ERROR
    assert await job(aconn, exhausted) is None
    assert await state(aconn, on_time) == "running"


async def test_callback_timeouts_retry_then_fail(engine: Engine, aconn, arrange):
    waiting = await arrange.job(state="waiting_external", callback_timeout_in_s=-1)
    last = await arrange.job(state="waiting_external", callback_timeout_in_s=-1, attempt=5,
                             max_attempts=5)
    pending = await arrange.job(state="waiting_external", callback_timeout_in_s=600)
    running = await arrange.job(deadline_in_s=-1)  # not a callback wait: not this rescue
    batch = await engine.rescue_callback_timeouts(aconn, limit=10, dlq_enabled=NO_DLQ)
    assert (batch.found, batch.retried, batch.failed) == (2, 1, 1)
    retried = await job(aconn, waiting)
    assert retried is not None and retried["state"] == "retryable"
    assert retried["callback_id"] is None
    assert retried["errors"][-1]["error"] == lifecycle.CALLBACK_TIMEOUT_ERROR
    failed = await job(aconn, last)
    assert failed is not None and failed["state"] == "failed"
    assert failed["errors"][-1]["error"] == lifecycle.CALLBACK_TIMEOUT_ERROR
    assert await state(aconn, pending) == "waiting_external"
    assert await state(aconn, running) == "running"


async def test_rescue_colliding_with_a_newer_unique_holder_cancels_it_and_applies_the_rest(
        engine: Engine, aconn, arrange):
    mask = "11001000"  # scheduled, available, retryable -- running excluded
    key = b"\x01" * 16
    old = await arrange.job(heartbeat_age_s=300, unique_key=key, unique_states=mask,
                            run_lease=3)
    newer = await arrange.job(state="available", unique_key=key, unique_states=mask)
    others = [await arrange.job(heartbeat_age_s=300) for _ in range(3)]

    batch = await engine.rescue_stale_heartbeats(aconn, staleness_s=1, limit=10,
                                                 dlq_enabled=NO_DLQ)

    assert (batch.found, batch.duplicates, batch.retried, batch.left) == (4, 1, 3, 0)
    assert (old, 3) in batch.ended
    [dup] = [r for r in batch.rescued if r.action == "cancel"]
    assert dup.id == old
    stuck = await job(aconn, old)
    assert stuck is not None and stuck["state"] == "cancelled"
    assert stuck["errors"][-1]["error"] == lifecycle.RESCUED_AS_DUPLICATE
    assert stuck["errors"][-1]["cause"] == lifecycle.HEARTBEAT_STALE_ERROR
    assert await state(aconn, newer) == "available"
    assert {await state(aconn, i) for i in others} == {"retryable"}
    again = await engine.rescue_stale_heartbeats(aconn, staleness_s=1, limit=10,
                                                 dlq_enabled=NO_DLQ)
    assert again.rescued == []


async def test_a_row_that_can_be_neither_moved_nor_cancelled_is_left(
        engine: Engine, aconn, arrange):
    mask = "11001010"  # scheduled, available, retryable, cancelled
    key = b"\x03" * 16
    stuck = await arrange.job(heartbeat_age_s=300, unique_key=key, unique_states=mask)
    await arrange.job(state="available", unique_key=key, unique_states=mask)
    other = await arrange.job(heartbeat_age_s=300)
    batch = await engine.rescue_stale_heartbeats(aconn, staleness_s=1, limit=10,
                                                 dlq_enabled=NO_DLQ)
    assert (batch.retried, batch.duplicates, batch.left) == (1, 0, 1)
    assert await state(aconn, stuck) == "running"
    assert await state(aconn, other) == "retryable"


# -- promotion -------------------------------------------------------------------------
async def test_promote_moves_only_due_jobs_of_unpaused_queues(engine: Engine, aconn, arrange):
    due = [await arrange.job(state="scheduled", attempt=0, run_at_offset_s=-1)
           for _ in range(3)]
    retry = await arrange.job(state="retryable", attempt=2, run_lease=2, run_at_offset_s=-5)
    future = await arrange.job(state="scheduled", attempt=0, run_at_offset_s=3600)
    held = await arrange.job(state="scheduled", queue="held", attempt=0, run_at_offset_s=-1)
    await arrange.pause("held")

    first = await engine.promote_due(aconn, limit=3)
    rest = await engine.promote_due(aconn, limit=3)

    assert (first.found, rest.found) == (3, 1)
    promoted = [p.id for p in first.promoted + rest.promoted]
    assert sorted(promoted) == sorted(due + [retry])
    assert first.promoted_by_queue() == {"maint": 3}
    for i in due + [retry]:
        assert await state(aconn, i) == "available"
    moved = await job(aconn, retry)
    assert moved is not None and (moved["attempt"], moved["run_lease"]) == (2, 2)
    assert await state(aconn, future) == "scheduled"
    assert await state(aconn, held) == "scheduled"
    assert (await engine.promote_due(aconn, limit=3)).promoted == []


async def test_promote_cancels_a_retryable_superseded_by_a_newer_unique_holder(
        engine: Engine, aconn, arrange):
    mask = "01000000"  # available only: a retryable attempt holds no claim
    key = b"\x02" * 16
    old = await arrange.job(state="retryable", run_at_offset_s=-1, unique_key=key,
                            unique_states=mask)
    newer = await arrange.job(state="available", unique_key=key, unique_states=mask)
    others = [await arrange.job(state="scheduled", attempt=0, run_at_offset_s=-1)
              for _ in range(2)]
    batch = await engine.promote_due(aconn, limit=10)
    assert [d.id for d in batch.duplicates] == [old]
    assert sorted(p.id for p in batch.promoted) == sorted(others)
    cancelled = await job(aconn, old)
    assert cancelled is not None and cancelled["state"] == "cancelled"
    assert cancelled["errors"][-1]["error"] == lifecycle.RESCUED_AS_DUPLICATE
    assert await state(aconn, newer) == "available"


# -- retention -------------------------------------------------------------------------
async def test_retention_removes_only_aged_terminal_rows(engine: Engine, aconn, arrange):
    old_done = [await arrange.job(state="completed", finalized_age_s=7200) for _ in range(3)]
    fresh_done = await arrange.job(state="completed", finalized_age_s=60)
    old_failed = await arrange.job(state="failed", finalized_age_s=7200)
    old_cancelled = await arrange.job(state="cancelled", finalized_age_s=7200)
    other_queue = await arrange.job(state="completed", queue="kept", finalized_age_s=7200)
    running = await arrange.job(state="running", heartbeat_age_s=7200)
    waiting = await arrange.job(state="available", run_at_offset_s=-7200)

    assert await engine.purge_finalized(aconn, state="completed", older_than_s=3600, limit=2,
                                        exclude_queues=["kept"]) == 2
    assert await engine.purge_finalized(aconn, state="completed", older_than_s=3600, limit=2,
                                        exclude_queues=["kept"]) == 1
    assert await engine.purge_finalized(aconn, state="failed", older_than_s=3600,
                                        limit=10) == 1
    assert await engine.purge_finalized(aconn, state="cancelled", older_than_s=3600,
                                        limit=10, queue="kept") == 0
    assert await state(aconn, old_cancelled) == "cancelled"
    assert [await job(aconn, i) for i in old_done + [old_failed]] == [None] * 4
    for kept in (fresh_done, other_queue, running, waiting):
        assert await job(aconn, kept) is not None
    assert await engine.purge_finalized(aconn, state="completed", older_than_s=3600,
                                        limit=10, queue="kept") == 1
    with pytest.raises(ValueError):
        await engine.purge_finalized(aconn, state="running", older_than_s=0, limit=10)


async def test_retention_of_dlq_runtimes_and_descriptors(engine: Engine, aconn, arrange):
    await arrange.dlq_entry(9001, age_s=2 * 86400)
    await arrange.dlq_entry(9002, age_s=3600)
    await arrange.dlq_entry(9003, queue="other", age_s=2 * 86400)
    purged = await engine.purge_aged_dlq(aconn, older_than_s=86400, limit=10,
                                    exclude_queues=["other"])
    assert (purged.deleted, purged.by_queue) == (1, {"maint": 1})
    purged = await engine.purge_aged_dlq(aconn, older_than_s=86400, limit=10, queue="other")
    assert (purged.deleted, purged.by_queue) == (1, {"other": 1})
    assert {d.queue: d.dlq_depth for d in await engine.queue_depths(aconn)} == {"maint": 1}

    await arrange.runtime(unseen_s=25 * 3600)
    await arrange.runtime(unseen_s=0)
    assert await engine.purge_unseen_runtimes(aconn, older_than_s=24 * 3600, limit=10) == 1
    assert await arrange.runtimes() == 1

    await arrange.descriptor("queues", "gone", unseen_s=31 * 86400)
    await arrange.descriptor("queues", "here", unseen_s=0)
    await arrange.descriptor("kinds", "gone_kind", unseen_s=31 * 86400)
    assert await engine.purge_unseen_descriptors(aconn, catalogue="queues",
                                                 older_than_s=30 * 86400, limit=10) == 1
    assert await engine.purge_unseen_descriptors(aconn, catalogue="kinds",
                                                 older_than_s=30 * 86400, limit=10) == 1
    assert list(await arrange.descriptors("queues")) == ["here"]
    assert await arrange.descriptors("kinds") == {}


# -- priority aging --------------------------------------------------------------------
async def test_aging_raises_priority_of_long_waiting_available_jobs(
        engine: Engine, aconn, arrange):
    """Canonical rewrites the waiting rows' priority; queue storage moves nothing (its
    claim ages at claim time, tests/storage/test_queue_storage_layout.py) and says so."""
    waited_2 = await arrange.job(state="available", priority=4, run_at_offset_s=-2.5,
                                 attempt=0)
    waited_10 = await arrange.job(state="available", priority=3, run_at_offset_s=-10,
                                  attempt=0)
    fresh = await arrange.job(state="available", priority=4, attempt=0)
    off = await arrange.job(state="available", queue="off", priority=4, run_at_offset_s=-10,
                            attempt=0)
    scheduled = await arrange.job(state="scheduled", priority=4, run_at_offset_s=-10,
                                  attempt=0)
    intervals = {"off": 0}
    moved = await engine.age_priorities(aconn, default_interval_ms=1_000,
                                        queue_intervals_ms=intervals, limit=10)
    a, b = await job(aconn, waited_2), await job(aconn, waited_10)
    assert a is not None and b is not None
    if engine.name == "queue_storage":
        assert moved == 0
        assert (a["priority"], b["priority"]) == (4, 3)
        assert ORIGINAL_PRIORITY_KEY not in a["metadata"]
    else:
        assert moved == 2
        assert a["priority"] == 2 and a["metadata"][ORIGINAL_PRIORITY_KEY] == 4
        assert b["priority"] == 1 and b["metadata"][ORIGINAL_PRIORITY_KEY] == 3
    for unchanged in (fresh, off, scheduled):
        row = await job(aconn, unchanged)
        assert row is not None and row["priority"] == 4
    # Idempotent: nothing more until another interval has passed.
    assert await engine.age_priorities(aconn, default_interval_ms=1_000,
                                       queue_intervals_ms=intervals, limit=10) == 0
    assert await engine.age_priorities(aconn, default_interval_ms=0,
                                       queue_intervals_ms={}, limit=10) == 0


# -- cron ------------------------------------------------------------------------------
async def test_cron_cas_two_concurrent_advances_of_one_slot_insert_one_job(
        engine: Engine, aconn, conn2, arrange):
    await arrange.cron("nightly")
    await arrange.cron("paused")
    await aconn.execute("UPDATE awa.cron_jobs SET paused_at = now() WHERE name = 'paused'")
    [mine] = await engine.list_active_cron_jobs(aconn)
    [theirs] = await engine.list_active_cron_jobs(conn2)
    assert mine.name == "nightly" and mine.last_enqueued_at is None
    assert mine.args == {"team": "ops"} and mine.queue == "reports"
    slot = mine.db_now.replace(second=0, microsecond=0)

    results = await asyncio.gather(engine.fire_cron(aconn, mine, [slot]),
                                   engine.fire_cron(conn2, theirs, [slot]))

    assert sorted(r.advanced for r in results) == [False, True]
    [won] = [r for r in results if r.advanced]
    assert len(won.job_ids) == 1
    cur = await aconn.execute("SELECT *, state::text AS state FROM awa.jobs "
                              "WHERE metadata->>'cron_name' = 'nightly'")
    [fired] = await cur.fetchall()
    assert fired["id"] == won.job_ids[0] and fired["state"] == "available"
    assert fired["kind"] == "report" and fired["queue"] == "reports"
    assert fired["run_at"] == slot
    [after] = await engine.list_active_cron_jobs(aconn)
    assert after.last_enqueued_at == slot
    # A stale view of the schedule (the previous value) fires nothing.
    assert not (await engine.fire_cron(aconn, mine, [slot + timedelta(minutes=1)])).advanced
    # The current view fires each slot it is given, once.
    slots = [slot + timedelta(minutes=1), slot + timedelta(minutes=2)]
    fired_two = await engine.fire_cron(aconn, after, slots)
    assert fired_two.advanced and len(fired_two.job_ids) == 2


# -- descriptors -----------------------------------------------------------------------
async def test_descriptor_upsert_and_runtime_hashes(engine: Engine, aconn, arrange):
    email = Descriptor("email", descriptor_hash="h1", display_name="Email", owner="growth",
                       tags=["customer"])
    send = Descriptor("send_email", descriptor_hash="h2", extra={"sla": "5m"})
    assert await engine.upsert_descriptors(aconn, queues=[email], kinds=[send]) == 2
    queues = await arrange.descriptors("queues")
    assert queues["email"]["owner"] == "growth" and queues["email"]["tags"] == ["customer"]
    assert (await arrange.descriptors("kinds"))["send_email"]["extra"] == {"sla": "5m"}
    changed = Descriptor("email", descriptor_hash="h3", display_name="E-mail")
    await engine.upsert_descriptors(aconn, queues=[changed], kinds=[])
    assert (await arrange.descriptors("queues"))["email"]["descriptor_hash"] == "h3"

    instance = await arrange.runtime(unseen_s=0)
    hashes = {"queues": {"email": "h3"}, "kinds": {"send_email": "h2"}}
    assert await engine.set_runtime_descriptor_hashes(aconn, instance, hashes) is True
    assert await engine.set_runtime_descriptor_hashes(aconn, instance, hashes) is False
    assert await arrange.runtime_descriptor_hashes(instance) == hashes


# -- queue depths ----------------------------------------------------------------------
async def test_queue_depths_by_state_lag_and_dlq(engine: Engine, aconn, arrange):
    for _ in range(3):
        await arrange.job(state="available", queue="busy", attempt=0, run_at_offset_s=-30)
    await arrange.job(state="available", queue="busy", priority=1, attempt=0,
                      run_at_offset_s=-5)
    await arrange.job(state="running", queue="busy")
    await arrange.job(state="scheduled", queue="busy", attempt=0, run_at_offset_s=60)
    await arrange.job(state="retryable", queue="busy", run_at_offset_s=60)
    await arrange.job(state="waiting_external", queue="busy", callback_timeout_in_s=60)
    await arrange.job(state="failed", queue="busy", finalized_age_s=1)
    for terminal in ("completed", "cancelled"):
        await arrange.job(state=terminal, queue="busy", finalized_age_s=1)
    await arrange.job(state="running", queue="working")
    await arrange.job(state="completed", queue="history", finalized_age_s=1)
    await arrange.dlq_entry(9101, queue="busy")
    await arrange.dlq_entry(9102, queue="dead")

    depths = by_queue(await engine.queue_depths(aconn))

    assert sorted(depths) == ["busy", "dead", "working"]  # terminal history is not depth
    busy = depths["busy"]
    assert busy.depth == {"available": 4, "running": 1, "scheduled": 1, "retryable": 1,
                          "waiting_external": 1, "failed": 1}
    assert set(busy.depth) <= set(lifecycle.DEPTH_STATES)
    assert busy.count("completed") == 0 and busy.total == 9
    assert busy.lag_s is not None and 29 <= busy.lag_s < 60
    assert busy.oldest_available_at is not None
    assert busy.dlq_depth == 1 and busy.capped == frozenset()
    working = depths["working"]
    assert working.depth == {"running": 1} and working.lag_s is None
    assert working.dlq_depth == 0
    dead = depths["dead"]
    assert dead.depth == {} and dead.dlq_depth == 1 and dead.lag_s is None

    capped = by_queue(await engine.queue_depths(aconn, cap=2))["busy"]
    assert capped.count("available") == 2 and capped.count("running") == 1
    assert capped.capped == frozenset({"available"})
    assert capped.lag_s is not None and capped.lag_s >= 29


async def test_queue_depths_of_an_empty_database(engine: Engine, aconn):
    assert await engine.queue_depths(aconn) == []


def test_depth_states_are_the_lifecycle_s() -> None:
    assert lifecycle.DEPTH_STATES == ("available", "scheduled", "retryable", "running",
                                      "waiting_external", "failed")
    assert json.dumps(lifecycle.DEPTH_STATES)  # plain strings, usable as SQL parameters
