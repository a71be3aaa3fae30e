"""Queue storage only: the layout the troubleshooting guide reads, and the append-only property.

The guide's queue-storage queries (``awa.leases``, the ``lease_claims``
anti-join with ``lease_claim_closures`` / ``lease_claim_closure_batches``,
``runtime_storage_backends``, the table-churn query) run here verbatim.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.schema.layout import QUEUE_STORAGE_LAYOUT_VERSION
from awa.storage.common.enqueue import InsertOptions, build_batch
from awa.storage.engine import AttemptWrite
from awa.storage.queue_storage import QueueStorageEngine, install_queue_storage

QS = pytest.mark.parametrize("engine_name", ["queue_storage"])

GUIDE_LEASES = """
SELECT
    job_id,
    queue,
    attempt,
    heartbeat_at,
    deadline_at,
    EXTRACT(EPOCH FROM (now() - heartbeat_at)) AS heartbeat_age_s,
    EXTRACT(EPOCH FROM (deadline_at - now())) AS deadline_remaining_s
FROM awa.leases
WHERE state = 'running'
ORDER BY heartbeat_at ASC;
"""

GUIDE_RECEIPTS = """
SELECT
    c.job_id,
    c.queue,
    c.attempt,
    c.claimed_at,
    c.deadline_at,
    EXTRACT(EPOCH FROM (now() - c.claimed_at)) AS claimed_age_s,
    EXTRACT(EPOCH FROM (c.deadline_at - now())) AS deadline_remaining_s
FROM awa.lease_claims c
WHERE NOT EXISTS (
    SELECT 1 FROM awa.lease_claim_closures cx
    WHERE cx.claim_slot = c.claim_slot
      AND cx.job_id = c.job_id
      AND cx.run_lease = c.run_lease
)
AND NOT EXISTS (
    SELECT 1 FROM awa.lease_claim_closure_batches cb
    WHERE cb.receipt_ranges @> c.receipt_id
)
ORDER BY c.claimed_at ASC;
"""

GUIDE_CANONICAL_RUNNING = """
SELECT id, kind, queue, attempt, heartbeat_at, deadline_at
FROM awa.jobs
WHERE state = 'running'
ORDER BY heartbeat_at ASC;
"""

GUIDE_BACKENDS = """
SELECT
    backend,
    schema_name,
    updated_at
FROM awa.runtime_storage_backends;
"""

GUIDE_CHURN = """
SELECT
    relname,
    n_live_tup,
    n_dead_tup,
    vacuum_count,
    autovacuum_count,
    last_vacuum,
    last_autovacuum
FROM pg_stat_user_tables
WHERE schemaname = '<schema>'
  AND (
      relname = 'attempt_state'
      OR relname = 'deferred_jobs'
      OR relname = 'dlq_entries'
      OR relname LIKE 'ready_segments_%'
      OR relname LIKE 'ready_entries%'
      OR relname LIKE 'ready_tombstones%'
      OR relname LIKE 'done_entries%'
      OR relname LIKE 'queue_terminal_count_deltas%'
      OR relname LIKE 'leases%'
  )
ORDER BY n_dead_tup DESC, relname;
"""


async def _all(conn: psycopg.AsyncConnection[Any], sql: str) -> list[dict[str, Any]]:
    cur = await conn.execute(sql)
    return await cur.fetchall()


@QS
async def test_install_is_idempotent_and_names_the_backend(engine_url, aconn):
    await install_queue_storage(aconn)
    rows = await _all(aconn, GUIDE_BACKENDS)
    assert [(r["backend"], r["schema_name"]) for r in rows] == [("queue_storage", "awa")]
    [row] = await _all(aconn, "SELECT awa.active_queue_storage_schema() AS s")
    assert row["s"] == "awa"


@QS
async def test_the_guides_queries_return_the_running_attempts(engine, aconn):
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(3)],
                                                 InsertOptions(kind="k")))
    short, long_, done = await engine.claim_batch(aconn, "default", 3, 60_000)
    # One finishes, one heartbeats (materializes into leases), one stays a bare receipt.
    assert (await engine.complete_batch(aconn, [AttemptWrite(done.id, done.run_lease)])).applied
    assert await engine.heartbeat_batch(aconn, [AttemptWrite(long_.id, long_.run_lease)])
    leases = await _all(aconn, GUIDE_LEASES)
    assert [(r["job_id"], r["attempt"]) for r in leases] == [(long_.id, 1)]
    assert leases[0]["heartbeat_age_s"] < 60 and leases[0]["deadline_remaining_s"] > 0
    receipts = await _all(aconn, GUIDE_RECEIPTS)
    assert [(r["job_id"], r["queue"], r["attempt"]) for r in receipts] == [(short.id, "default", 1)]
    running = await _all(aconn, GUIDE_CANONICAL_RUNNING)
    assert sorted(r["id"] for r in running) == sorted([short.id, long_.id])
    assert {r["kind"] for r in running} == {"k"}
    churn = await _all(aconn, GUIDE_CHURN.replace("<schema>", "awa"))
    assert {"ready_entries_0", "done_entries_0", "leases_0", "attempt_state"} <= {
        r["relname"] for r in churn}


@QS
async def test_the_hot_path_only_appends(engine, aconn):
    """Enqueue, claim and complete leave the canonical tables alone and never update or
    delete a ready, receipt, closure or done row (pg_stat counters, per table); the 50
    completions close their receipts with one compact closure row."""
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(50)],
                                                 InsertOptions(kind="k")))
    jobs = await engine.claim_batch(aconn, "default", 50, 60_000)
    assert len(jobs) == 50
    applied = await engine.complete_batch(aconn, [AttemptWrite(j.id, j.run_lease) for j in jobs])
    assert len(applied.applied) == 50
    cur = await aconn.execute("SELECT count(*) AS n FROM awa.jobs_hot")
    assert (await cur.fetchone())["n"] == 0
    await aconn.execute("SELECT pg_stat_force_next_flush()")
    stats = await _all(aconn, """
        SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables
         WHERE false""")
    assert stats == []
    async with await psycopg.AsyncConnection.connect(aconn.info.dsn, autocommit=True,
                                                     row_factory=dict_row) as other:
        rows = await _all(other, """
            SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables
             WHERE schemaname = 'awa' AND (relname LIKE 'ready_entries_%'
                OR relname LIKE 'lease_claims_%' OR relname LIKE 'lease_claim_closure%'
                OR relname LIKE 'done_entries_%')""")
    written = {r["relname"]: r["n_tup_ins"] for r in rows if r["n_tup_ins"]}
    assert written == {"ready_entries_0": 50, "lease_claims_0": 50,
                       "lease_claim_closure_batches_0": 1, "done_entries_0": 50}
    assert all(r["n_tup_upd"] == 0 and r["n_tup_del"] == 0 for r in rows), rows


@QS
async def test_engine_selection_finds_this_engine(engine_url, aconn):
    from awa.storage import describe_layout, open_engine
    layout = await describe_layout(aconn)
    assert (layout.engine, layout.schema, layout.foreign) == ("queue_storage", "awa", False)
    assert isinstance(await open_engine(aconn), QueueStorageEngine)


@QS
async def test_a_layout_older_than_the_code_is_refused_until_migrated(engine_url, aconn):
    """A database laid out by older code (here: before layouts carried a version) is
    refused with `awa migrate` at the client's first use, not at its first failing
    statement; migrating brings it up to date and the same client call then works."""
    import awa
    from awa.schema.layout import QUEUE_STORAGE_LAYOUT_VERSION as LAYOUT_VERSION
    from awa.storage import describe_layout

    await aconn.execute("DROP FUNCTION awa.qs_layout_version()")
    layout = await describe_layout(aconn)
    assert (layout.engine_layout, layout.engine_layout_needed) == (0, LAYOUT_VERSION)
    assert layout.behind
    async with awa.AsyncClient(engine_url) as client:
        with pytest.raises(awa.SchemaNotMigrated,
                           match=rf"queue_storage layout version 0, this code needs version "
                                 rf"{LAYOUT_VERSION}: run `awa migrate`"):
            await client.insert({"n": 1}, kind="k", queue="q")
    async with awa.AsyncClient(engine_url) as client:
        await client.migrate()
        job = await client.insert({"n": 1}, kind="k", queue="q")
        assert job.state.value == "available"
    assert not (await describe_layout(aconn)).behind


_PER_DESTINATION = ("qs_finalize", "qs_retry", "qs_snooze", "qs_dead_letter")
# As layout 6 installed them (names included: a replacement keeps a parameter's name).
_ENDING_ARGS = ("p_ids bigint[], p_leases bigint[], p_delay float8[], p_error jsonb[], "
                "p_progress jsonb[], p_meta jsonb[], p_reason text[], p_outcome text, "
                "p_from_states awa.job_state[], p_to_state awa.job_state")


@QS
async def test_migrating_a_layout_6_database_keeps_the_per_destination_functions_until_contract(
        engine_url, aconn):
    """Layout 7 ends every attempt through awa.qs_end_attempts; a layout-6 database's four
    functions, one per destination, which runtimes of that release still call, become
    wrappers over it (expand), and go only with `awa migrate --contract` (contract), after
    which a later `awa migrate` leaves them out."""
    import awa
    from awa.statements import run_async
    from awa.storage import contract_steps

    await aconn.execute("CREATE OR REPLACE FUNCTION awa.qs_layout_version() RETURNS int "
                        "LANGUAGE sql IMMUTABLE AS $$ SELECT 6 $$")
    for name in _PER_DESTINATION:
        await aconn.execute(f"CREATE OR REPLACE FUNCTION awa.{name}({_ENDING_ARGS}) "
                            f"RETURNS SETOF bigint LANGUAGE sql AS $$ SELECT 1::bigint $$")

    async def installed() -> dict[str, str]:
        rows = await (await aconn.execute(
            "SELECT proname::text AS name, prosrc FROM pg_proc "
            "WHERE pronamespace = 'awa'::regnamespace AND proname = ANY(%s)",
            (list(_PER_DESTINATION) + ["qs_end_attempts"],))).fetchall()
        return {row["name"]: row["prosrc"] for row in rows}

    async with awa.AsyncClient(engine_url) as client:
        await client.migrate()
    kept = await installed()
    assert sorted(kept) == sorted([*_PER_DESTINATION, "qs_end_attempts"])
    assert all("awa.qs_end_attempts(" in kept[name] for name in _PER_DESTINATION)
    version = await (await aconn.execute("SELECT awa.qs_layout_version() AS v")).fetchone()
    assert version == {"v": QUEUE_STORAGE_LAYOUT_VERSION} and QUEUE_STORAGE_LAYOUT_VERSION >= 7

    said = await run_async(aconn, contract_steps())
    assert said.startswith("contracted: dropped 4 object(s)"), said
    assert list(await installed()) == ["qs_end_attempts"]
    async with awa.AsyncClient(engine_url) as client:
        await client.migrate()
    assert list(await installed()) == ["qs_end_attempts"]


@QS
async def test_an_attempt_cannot_end_in_a_state_that_is_not_an_ending(engine_url, aconn):
    with pytest.raises(psycopg.errors.RaiseException,
                       match="an attempt cannot end as running"):
        await aconn.execute("SELECT * FROM awa.qs_end_attempts('{}', '{}', '{}', '{}', "
                            "'{}', '{}', '{}', 'x', '{running}', 'running')")


@QS
async def test_a_new_lane_is_never_claimed_twice(engine, engine_url, aconn):
    """Claimers racing the producer that creates a lane: each job is claimed once."""
    import asyncio

    conns = [await psycopg.AsyncConnection.connect(engine_url, autocommit=True)
             for _ in range(4)]
    try:
        for round_ in range(20):
            queue = f"fresh{round_}"
            stop = asyncio.Event()
            claimed: list[int] = []

            async def claimer(conn: psycopg.AsyncConnection[Any], queue: str = queue,
                              stop: asyncio.Event = stop, claimed: list[int] = claimed) -> None:
                while not stop.is_set():
                    claimed.extend(j.id for j in await engine.claim_batch(conn, queue, 5, 60_000))

            tasks = [asyncio.create_task(claimer(c)) for c in conns]
            await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(3)],
                                                         InsertOptions(kind="k", queue=queue)))
            for _ in range(100):
                if len(claimed) >= 3:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*tasks)
            assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 3, claimed
    finally:
        for c in conns:
            await c.close()


@QS
async def test_enqueue_shards_let_concurrent_producers_append_without_waiting(engine, engine_url,
                                                                           aconn):
    """queue_meta.enqueue_shards really shards the enqueue heads: four producers whose
    transactions are all open at once each append to a lane of their own (none waits
    for another's lock), positions stay dense per lane, every job is claimed once."""
    await aconn.execute("INSERT INTO awa.queue_meta (queue, enqueue_shards) VALUES ('s', 4) "
                        "ON CONFLICT (queue) DO UPDATE SET enqueue_shards = 4")
    # The queue's first enqueue creates its lanes (a producer meanwhile waits for that once).
    await engine.insert_batch(aconn, build_batch([{"n": 0}], InsertOptions(kind="k", queue="s")))
    producers = [await psycopg.AsyncConnection.connect(engine_url) for _ in range(4)]
    try:
        for conn in producers:  # each transaction stays open, holding its lane
            await conn.execute("SET lock_timeout = '2s'")
            await engine.insert_batch(conn, build_batch([{"n": i} for i in range(10)],
                                                        InsertOptions(kind="k", queue="s")))
            await engine.copy_batch(conn, build_batch([{"n": i} for i in range(5)],
                                                      InsertOptions(
                                                          kind="k", queue="s")), returning=False)
        for conn in producers:
            await conn.commit()
    finally:
        for conn in producers:
            await conn.close()
    lanes = await _all(aconn, "SELECT shard, count(*) AS n, min(lane_seq) AS lo, "
                              "max(lane_seq) AS hi FROM awa.ready_entries WHERE queue = 's' "
                              "GROUP BY shard ORDER BY shard")
    assert [lane["shard"] for lane in lanes] == [0, 1, 2, 3], lanes
    assert sorted(lane["n"] for lane in lanes) == [15, 15, 15, 16], lanes
    # Each lane's positions are dense from 0: no gaps a claimer would have to step over.
    assert all(lane["lo"] == 0 and lane["hi"] == lane["n"] - 1 for lane in lanes), lanes
    # One shard (the default) is one lane: a second producer waits for the first.
    await engine.insert_batch(aconn, build_batch([{"n": 0}],
                                                 InsertOptions(kind="k", queue="single")))
    one = await psycopg.AsyncConnection.connect(engine_url)
    try:
        await engine.insert_batch(one, build_batch([{"n": 1}],
                                                   InsertOptions(kind="k", queue="single")))
        async with await psycopg.AsyncConnection.connect(engine_url) as other:
            await other.execute("SET lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                await engine.insert_batch(other, build_batch([{"n": 2}], InsertOptions(kind="k",
                                                             queue="single")))
    finally:
        await one.close()
    claimed = [j.id for j in await engine.claim_batch(aconn, "s", 100, 60_000)]
    assert len(claimed) == len(set(claimed)) == 61
    assert await engine.claim_batch(aconn, "s", 100, 60_000) == []


@QS
async def test_a_copy_over_several_lanes_numbers_each_lane_densely(engine, aconn):
    """The direct COPY numbers each job from its own lane's reserved base, rows of several
    lanes interleaved or one lane alone; a later COPY goes on where the lane ended."""
    mixed = build_batch([{"n": i} for i in range(9)], InsertOptions(kind="k", queue="m"),
                        opts=[{"priority": 1 + i % 3, "queue": "m" if i < 6 else "o"}
                              for i in range(9)])
    await engine.copy_batch(aconn, mixed, returning=False)
    await engine.copy_batch(aconn, build_batch([{"n": 9}, {"n": 10}], InsertOptions(
        kind="k", queue="m", priority=2)), returning=False)
    rows = await _all(aconn, "SELECT queue, priority, lane_seq, (args->>'n')::int AS n "
                             "FROM awa.ready_entries ORDER BY queue, priority, lane_seq")
    lanes: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in rows:
        lanes.setdefault((r["queue"], r["priority"]), []).append((r["lane_seq"], r["n"]))
    assert lanes == {("m", 1): [(0, 0), (1, 3)], ("m", 2): [(0, 1), (1, 4), (2, 9), (3, 10)],
                     ("m", 3): [(0, 2), (1, 5)], ("o", 1): [(0, 6)], ("o", 2): [(0, 7)],
                     ("o", 3): [(0, 8)]}, lanes


@QS
async def test_the_hot_path_leaves_one_dead_head_tuple_per_stride_of_claims(engine, aconn):
    """Enqueue updates no row; the claim head moves once per 128 claimed positions."""
    async with aconn.transaction():
        for _ in range(10):
            await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(50)],
                                                         InsertOptions(kind="k", queue="h")))
        claimed: list[int] = []
        while batch := await engine.claim_batch(aconn, "h", 7, 60_000):
            claimed.extend(j.id for j in batch)
        updates = await _all(aconn, "SELECT relname, n_tup_upd, n_tup_del "
                                    "FROM pg_stat_xact_user_tables WHERE schemaname = 'awa' "
                                    "AND (n_tup_upd > 0 OR n_tup_del > 0)")
    assert len(claimed) == len(set(claimed)) == 500
    by_table = {u["relname"]: u for u in updates}
    assert set(by_table) <= {"queue_claim_heads"}, updates
    assert by_table["queue_claim_heads"]["n_tup_upd"] <= 500 // 128, updates


@QS
async def test_settling_moves_an_idle_lane_head_and_claims_stay_exact(engine, aconn):
    """A lane left lagging its receipts is settled by the leader's ring tick; nothing is
    claimed twice or skipped across the settle, then across a rotation and prune."""
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(30)],
                                                 InsertOptions(kind="k",
                                                 queue="s")))
    first = [j.id for j in await engine.claim_batch(aconn, "s", 20, 60_000)]
    head = await _all(aconn, "SELECT claim_seq FROM awa.queue_claim_heads WHERE queue = 's'")
    assert head[0]["claim_seq"] == 0  # lagging: fewer than a stride claimed
    await engine.rotate_and_prune(aconn, completed_retention_s=0, failed_retention_s=0)
    head = await _all(aconn, "SELECT claim_seq FROM awa.queue_claim_heads WHERE queue = 's'")
    assert head[0]["claim_seq"] == 20
    await engine.insert_batch(aconn, build_batch([{"n": i} for i in range(5)],
                                                 InsertOptions(kind="k",
                                                 queue="s")))
    rest = [j.id for j in await engine.claim_batch(aconn, "s", 100, 60_000)]
    assert len(rest) == 15 and not set(rest) & set(first)
    lanes = await _all(aconn, "SELECT count(DISTINCT lane_seq) AS n FROM awa.ready_entries "
                              "WHERE queue = 's'")
    assert lanes[0]["n"] == 35


@QS
async def test_priority_ages_at_claim_time(engine, aconn):
    """A low-priority job that has waited is claimed before a newer urgent one, without
    waiting for the leader's aging pass: one step per interval since run_at, to at best 1."""
    async def old_and_urgent(queue: str, urgent_priority: int) -> tuple[int, int]:
        [old] = (await engine.insert_batch(aconn, build_batch([{"n": 1}],
                                                              InsertOptions(kind="k", queue=queue,
                                                              priority=4)))).jobs
        await aconn.execute("UPDATE awa.jobs SET run_at = now() - interval '10 minutes' "
                            "WHERE id = %s", (old.id,))
        [urgent] = (await engine.insert_batch(aconn, build_batch(
            [{"n": 2}], InsertOptions(kind="k", queue=queue, priority=urgent_priority)))).jobs
        return old.id, urgent.id

    old, urgent = await old_and_urgent("plain", 1)
    assert [j.id for j in await engine.claim_batch(aconn, "plain", 1, 60_000)] == [urgent]
    old, urgent = await old_and_urgent("aged", 1)
    assert [j.id for j in await engine.claim_batch(aconn, "aged", 1, 60_000,
                                                   aging_interval_ms=60_000)] == [old]
    # Ten minutes at one step per hour is no step: the urgent job goes first.
    old, urgent = await old_and_urgent("hourly", 2)
    assert [j.id for j in await engine.claim_batch(aconn, "hourly", 1, 60_000,
                                                   aging_interval_ms=3_600_000)] == [urgent]
    # Ten minutes at one step per minute: 4 -> 1 passes a priority-2 job.
    old, urgent = await old_and_urgent("steps", 2)
    assert [j.id for j in await engine.claim_batch(aconn, "steps", 1, 60_000,
                                                   aging_interval_ms=60_000)] == [old]


@QS
async def test_a_claim_that_leaves_a_gap_does_not_move_the_lane_frontier(engine, aconn):
    """A claim that skips an entry of its lane records no frontier, so later claims
    look from the claim head and find what was left behind; once the head has
    settled past the gap, a gapless claim records a frontier and claims go on from
    it.  (The gap: a job whose run_at moved is re-placed at the lane's end, and
    being older it ranks before the entry it passed.)"""
    async def insert(priority: int) -> int:
        batch = build_batch([{}], InsertOptions(kind="k", queue="gaps", priority=priority))
        return (await engine.insert_batch(aconn, batch)).jobs[0].id

    async def claim(n: int) -> list[int]:
        return [j.id for j in await engine.claim_batch(aconn, "gaps", n, 60_000)]

    async def newest_frontier() -> Any:
        cur = await aconn.execute("SELECT lane_frontier FROM awa.lease_claims "
                                  "WHERE priority = 2 ORDER BY lane_seq DESC LIMIT 1")
        return (await cur.fetchone())["lane_frontier"]

    urgent, first, older = await insert(1), await insert(2), await insert(2)
    await aconn.execute("UPDATE awa.jobs SET run_at = now() - interval '1 minute' "
                        "WHERE id = %s", (older,))
    assert await claim(2) == [urgent, older]
    assert await newest_frontier() is None  # `first` was passed over
    assert await claim(1) == [first]
    later = await insert(2)
    assert await claim(5) == [later]
    assert await claim(5) == []
    await aconn.execute("SELECT awa.qs_settle_claim_heads()")
    last = await insert(2)
    assert await claim(5) == [last]
    assert await newest_frontier() is not None
    assert await claim(5) == []
