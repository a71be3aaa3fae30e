"""Queue storage only: ring rotation and prune (TRUNCATE of sealed, provably dead slots),
with the layout in schema awa and in a schema of its own (the partitions' names follow it)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from awa import lifecycle
from awa.storage.common.enqueue import InsertOptions, build_batch
from awa.storage.engine import AttemptWrite
from awa.storage.queue_storage import rings

pytestmark = pytest.mark.parametrize("engine_name", ["queue_storage", "queue_storage@awa_qs"])
KEEP = 3600.0


async def count(aconn: psycopg.AsyncConnection[Any], sql: str) -> int:
    cur = await aconn.execute(sql)
    row = await cur.fetchone()
    assert row is not None  # an aggregate query always returns a row
    return int(next(iter(row.values())))


async def states(aconn: psycopg.AsyncConnection[Any]) -> dict[int, str]:
    cur = await aconn.execute("SELECT id, state::text AS state FROM awa.jobs")
    return {r["id"]: r["state"] for r in await cur.fetchall()}


async def slots(aconn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, int]:
    return {k: int(v["current_slot"])
            for k, v in (await rings.ring_state(aconn, schema=schema)).items()}


async def test_finished_history_is_truncated_and_live_rows_survive(engine, aconn):
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(6)],
                                                 InsertOptions(kind="k")))
    done, failed, running, *waiting = await engine.claim_batch(aconn, "default", 3, 60_000)
    jobs = [done, failed, running]
    assert (await engine.complete_batch(aconn, [AttemptWrite(done.id, done.run_lease)])).applied
    assert (await engine.fail_batch(aconn, [AttemptWrite(
        failed.id, failed.run_lease, error=lifecycle.error_entry("x", 1))])).applied
    before = await states(aconn)
    assert sorted(before.values()) == ["available"] * 3 + ["completed", "failed", "running"]

    report = await engine.rotate_and_prune(aconn, completed_retention_s=0,
                                           failed_retention_s=KEEP)
    assert report.truncated == []  # slot 0 was current: sealed only now
    assert await slots(aconn, engine.schema) == {"queue": 1, "claim": 1, "lease": 1}
    report = await engine.rotate_and_prune(aconn, completed_retention_s=0,
                                           failed_retention_s=KEEP)
    # Available jobs and an open receipt keep their slots alive.
    assert ("queue", 0) in report.live and ("claim", 0) in report.live
    assert await states(aconn) == before

    # Finish everything: the slots become dead history and are truncated.
    rest = await engine.claim_batch(aconn, "default", 10, 60_000)
    assert len(rest) == 3
    await engine.complete_batch(aconn, [AttemptWrite(j.id, j.run_lease)
                                        for j in rest + [running]])
    report = await engine.rotate_and_prune(aconn, completed_retention_s=0,
                                           failed_retention_s=KEEP)
    assert ("queue", 0) in report.truncated and ("claim", 0) in report.truncated
    assert report.carried_failed == 1
    assert await count(aconn, engine.sql("SELECT count(*) FROM awa.ready_entries_0")) == 0
    assert await count(aconn, engine.sql("SELECT count(*) FROM awa.lease_claims_0")) == 0
    # The first completion went with its slot; the failed job (inside its floor) was carried;
    # the later completions are in the slot that was current then, reclaimed once sealed.
    assert done.id not in await states(aconn)
    assert (await states(aconn))[failed.id] == "failed"
    for _ in range(2):
        await engine.rotate_and_prune(aconn, completed_retention_s=0, failed_retention_s=KEEP)
    assert await states(aconn) == {failed.id: "failed"}
    assert all(j.id in before for j in jobs)


async def test_retention_keeps_young_history(engine, aconn):
    await engine.insert_batch(aconn, build_batch([{"n": 1}], InsertOptions(kind="k")))
    [job] = await engine.claim_batch(aconn, "default", 1, 60_000)
    await engine.complete_batch(aconn, [AttemptWrite(job.id, job.run_lease)])
    for _ in range(2):
        await engine.rotate_and_prune(aconn, completed_retention_s=KEEP, failed_retention_s=KEEP)
    # The queue ring keeps writing slot 0 for KEEP / (slots - 2): nothing there is reclaimed.
    assert (await slots(aconn, engine.schema))["queue"] == 0
    assert await states(aconn) == {job.id: "completed"}


async def test_the_queue_ring_rotates_once_a_slot_has_covered_its_share_of_retention(
        engine, aconn):
    """Retention by rotation: with slots covering retention / (slots - 2) each, the slot next
    in line is past retention when its turn comes, so it is truncated whole, never row by row."""
    keep = 0.4  # four slots: a slot is written for 0.2 s
    await engine.insert_batch(aconn, build_batch([{"n": 1}], InsertOptions(kind="k")))
    [job] = await engine.claim_batch(aconn, "default", 1, 60_000)
    await engine.complete_batch(aconn, [AttemptWrite(job.id, job.run_lease)])
    seen: list[int] = []
    for _ in range(8):
        await engine.rotate_and_prune(aconn, completed_retention_s=keep, failed_retention_s=keep)
        seen.append((await slots(aconn, engine.schema))["queue"])
        await asyncio.sleep(0.12)
    assert len(set(seen)) > 1, seen  # it moved on, one slot at a time
    assert all((b - a) % 4 in (0, 1) for a, b in zip(seen, seen[1:])), seen
    assert await states(aconn) == {}  # the completed row went with its truncated slot


async def test_a_reader_on_a_sealed_slot_makes_prune_skip_not_block_claims(
        engine, engine_url, aconn):
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(3)],
                                                 InsertOptions(kind="k")))
    jobs = await engine.claim_batch(aconn, "default", 3, 60_000)
    await engine.complete_batch(aconn, [AttemptWrite(j.id, j.run_lease) for j in jobs])
    await engine.rotate_and_prune(aconn, completed_retention_s=0, failed_retention_s=0)
    async with await psycopg.AsyncConnection.connect(engine_url) as reader:
        # ACCESS SHARE, held
        await reader.execute(engine.sql("SELECT count(*) FROM awa.ready_entries_0"))
        await engine.insert_batch(aconn, build_batch([{"n": 9}], InsertOptions(kind="k")))

        async def claim_soon() -> float:
            async with await psycopg.AsyncConnection.connect(engine_url,
                                                             autocommit=True) as conn:
                await asyncio.sleep(0.01)
                started = time.monotonic()
                claimed = await engine.claim_batch(conn, "default", 1, 60_000)
                assert len(claimed) == 1
                return time.monotonic() - started

        started = time.monotonic()
        report, waited = await asyncio.gather(
            engine.rotate_and_prune(aconn, completed_retention_s=0, failed_retention_s=0,
                                    lock_timeout_ms=200),
            claim_soon())
        assert ("queue", 0) in report.busy
        assert time.monotonic() - started < 2.0
        assert waited < 1.0  # at most about the prune's lock timeout
        await reader.rollback()
    report = await engine.rotate_and_prune(aconn, completed_retention_s=0, failed_retention_s=0)
    assert ("queue", 0) in report.truncated
