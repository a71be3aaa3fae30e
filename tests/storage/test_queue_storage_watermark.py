"""Queue storage only: the open receipts are found from the gaps between closed receipt
ranges past a watermark the maintenance leader moves (awa.qs_advance_receipt_watermark).

The watermark must never pass a receipt that is open, or that a claim still running will
commit; it may pass the ids of a claim that rolled back once no transaction of that time
is left.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.storage.common.enqueue import InsertOptions, build_batch
from awa.storage.engine import AttemptWrite
from awa.storage.queue_storage.schema import in_schema

pytestmark = pytest.mark.parametrize("engine_name", ["queue_storage", "queue_storage@awa_qs"])

ADVANCE = "SELECT awa.qs_advance_receipt_watermark() AS w"
OPEN = "SELECT job_id FROM awa.qs_open_receipts ORDER BY receipt_id"


async def one(aconn: psycopg.AsyncConnection[Any], schema: str, sql: str) -> Any:
    cur = await aconn.execute(in_schema(sql, schema))
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


async def open_jobs(aconn: psycopg.AsyncConnection[Any], schema: str) -> list[int]:
    cur = await aconn.execute(in_schema(OPEN, schema))
    return [r["job_id"] for r in await cur.fetchall()]


async def receipt_of(aconn: psycopg.AsyncConnection[Any], schema: str, job_id: int) -> int:
    cur = await aconn.execute(in_schema(
        "SELECT receipt_id FROM awa.lease_claims WHERE job_id = %s", schema), [job_id])
    row = await cur.fetchone()
    assert row is not None
    return int(row["receipt_id"])


async def test_the_watermark_stops_at_the_first_open_receipt(engine, aconn):
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(8)],
                                                 InsertOptions(kind="k")))
    jobs = await engine.claim_batch(aconn, "default", 8, 60_000)
    first_open = jobs[3]
    done = [j for j in jobs if j.id != first_open.id and j.id != jobs[6].id]
    assert len((await engine.complete_batch(
        aconn, [AttemptWrite(j.id, j.run_lease) for j in done])).applied) == 6

    w = await one(aconn, engine.schema, ADVANCE)
    assert w == await receipt_of(aconn, engine.schema, first_open.id)
    # Past the watermark the open receipts are still found, and only they.
    assert await open_jobs(aconn, engine.schema) == [first_open.id, jobs[6].id]

    await engine.complete_batch(aconn, [AttemptWrite(first_open.id, first_open.run_lease)])
    w = await one(aconn, engine.schema, ADVANCE)
    assert w == await receipt_of(aconn, engine.schema, jobs[6].id)
    assert await open_jobs(aconn, engine.schema) == [jobs[6].id]
    await engine.complete_batch(aconn, [AttemptWrite(jobs[6].id, jobs[6].run_lease)])
    assert await one(aconn, engine.schema, ADVANCE) == await receipt_of(
        aconn, engine.schema, jobs[7].id) + 1
    assert await open_jobs(aconn, engine.schema) == []


async def test_a_rolled_back_claim_holds_the_watermark_until_its_time_has_passed(
        engine, aconn, engine_url):
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(6)],
                                                 InsertOptions(kind="k")))
    [a] = await engine.claim_batch(aconn, "default", 1, 60_000)
    # A claim that rolls back: its receipt ids are taken and never used.
    async with await psycopg.AsyncConnection.connect(engine_url, row_factory=dict_row) as other:
        rolled = await engine.claim_batch(other, "default", 2, 60_000)
        assert len(rolled) == 2
        await other.rollback()
    [b] = await engine.claim_batch(aconn, "default", 1, 60_000)
    await engine.complete_batch(aconn, [AttemptWrite(a.id, a.run_lease),
                                        AttemptWrite(b.id, b.run_lease)])
    hole = await receipt_of(aconn, engine.schema, a.id) + 1
    # A transaction that was running when the hole was first seen (it could be the claim
    # that took those ids, still to commit): the watermark waits at the hole.
    async with await psycopg.AsyncConnection.connect(engine_url) as witness:
        await witness.execute("SELECT pg_current_xact_id()")  # holds an xid, open
        assert await one(aconn, engine.schema, ADVANCE) == hole
        assert await one(aconn, engine.schema, ADVANCE) == hole
        await witness.rollback()
    # Every transaction of that time has ended: the ids are dead, the watermark passes.
    assert await one(aconn, engine.schema, ADVANCE) == await receipt_of(
        aconn, engine.schema, b.id) + 1
    # The rolled-back claim's jobs stayed claimable: later claims took them.
    again = await engine.claim_batch(aconn, "default", 10, 60_000)
    assert {j.id for j in rolled} <= {b.id} | {j.id for j in again}
    assert sorted(await open_jobs(aconn, engine.schema)) == sorted(j.id for j in again)
