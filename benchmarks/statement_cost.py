"""Server CPU of one hot-path statement that finds nothing: each engine's fixed cost per call.

    .venv/bin/python benchmarks/statement_cost.py                       # both engines
    .venv/bin/python benchmarks/statement_cost.py --rounds 20 --calls 300

``engine_ops.py`` says what a job costs at a batch size B; a cost that does not
shrink with B is a cost per statement, and this measures it alone.  In a fresh
database per engine, one job is enqueued, claimed and completed (so the queue's
lanes exist and are empty), then each operation runs on one autocommit
connection, through the Engine protocol:

* ``round trip``  -- ``SELECT 1``: the protocol's own cost, the floor of the others;
* ``claim``       -- ``claim_batch`` of up to 64 from the empty queue;
* ``complete``    -- ``complete_batch`` of an attempt that does not exist;
* ``insert``      -- one job, inserted as ``client.insert`` does; this one writes, so
  it runs in a second database of its own: the rows it adds would change what the
  claim and the completion find (and how their plans see the tables).

Rounds alternate the engines (the order flips every round) and each round makes
``--calls`` calls per operation; the table gives the median over rounds of the
backend CPU per call (``/proc/<pid>/schedstat``, so the server must be local),
then the lowest.  Medians of alternating rounds, because single runs on a shared
machine differ by more than the 20 µs a change to a statement may be worth.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
from collections.abc import Awaitable, Callable

import _support
import psycopg

from awa import storage
from awa.storage.common.enqueue import InsertOptions, build_batch
from awa.storage.engine import AttemptWrite, Engine

QUEUE = "cost"
KIND = "noop"
BATCH = 64
DEADLINE_MS = 60_000
UNKNOWN_ATTEMPT = AttemptWrite(id=-1, run_lease=1)

Operation = Callable[[Engine, psycopg.AsyncConnection], Awaitable[object]]


async def _round_trip(engine: Engine, conn: psycopg.AsyncConnection) -> object:
    return await conn.execute("SELECT 1")


async def _claim(engine: Engine, conn: psycopg.AsyncConnection) -> object:
    return await engine.claim_batch(conn, QUEUE, BATCH, DEADLINE_MS)


async def _complete(engine: Engine, conn: psycopg.AsyncConnection) -> object:
    return await engine.complete_batch(conn, [UNKNOWN_ATTEMPT])


async def _insert(engine: Engine, conn: psycopg.AsyncConnection) -> object:
    return await engine.insert_batch(conn, build_batch([{}], InsertOptions(kind=KIND, queue=QUEUE)))


# Each operation and whether it writes (and so runs in the engine's second database).
OPERATIONS: dict[str, tuple[Operation, bool]] = {
    "round trip": (_round_trip, False), "claim": (_claim, False),
    "complete": (_complete, False), "insert": (_insert, True)}


class Subject:
    """One engine: a database whose queue is laid out and empty, and one for inserts."""

    def __init__(self, name: str, engine: Engine, reads: _support.Backend,
                 writes: _support.Backend) -> None:
        self.name, self.engine, self.reads, self.writes = name, engine, reads, writes
        self.samples: dict[str, list[float]] = {op: [] for op in OPERATIONS}

    @classmethod
    async def open(cls, name: str, reads_url: str, writes_url: str) -> Subject:
        reads = await psycopg.AsyncConnection.connect(reads_url, autocommit=True)
        writes = await psycopg.AsyncConnection.connect(writes_url, autocommit=True)
        engine = await storage.open_engine(reads)
        await engine.insert_batch(reads, build_batch([{}], InsertOptions(kind=KIND, queue=QUEUE)))
        claimed = await engine.claim_batch(reads, QUEUE, BATCH, DEADLINE_MS)
        await engine.complete_batch(reads, [AttemptWrite(j.id, j.run_lease) for j in claimed])
        return cls(name, engine, _support.Backend(reads), _support.Backend(writes))

    async def measure(self, calls: int) -> None:
        for op, (run, writes) in OPERATIONS.items():
            backend = self.writes if writes else self.reads
            before = backend.cpu()
            for _ in range(calls):
                await run(self.engine, backend.conn)
            self.samples[op].append(1e6 * (backend.cpu() - before) / calls)

    async def close(self) -> None:
        await self.reads.conn.close()
        await self.writes.conn.close()


async def main_async(engines: list[str], rounds: int, calls: int) -> None:
    with contextlib.ExitStack() as databases:
        subjects = [await Subject.open(
            name, *(databases.enter_context(_support.scratch_database(prefix, name))
                    for prefix in ("awa_bench_cost", "awa_bench_cost_insert")))
            for name in engines]
        try:
            for s in subjects:  # warm: every plan made, every cache loaded
                await s.measure(max(calls // 5, 1))
                s.samples = {op: [] for op in OPERATIONS}
            for r in range(rounds):
                for s in subjects if r % 2 == 0 else reversed(subjects):
                    await s.measure(calls)
        finally:
            for s in subjects:
                await s.close()
    print(f"{'engine':>14} " + " ".join(f"{op:>18}" for op in OPERATIONS))
    for s in subjects:
        cells = (f"{statistics.median(v):8.1f} ({min(v):6.1f})" for v in s.samples.values())
        print(f"{s.name:>14} " + " ".join(f"{c:>18}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="canonical,queue_storage")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(f"backend CPU µs per call, median over {args.rounds} alternating rounds of "
          f"{args.calls} calls (lowest round in brackets); the claim and the completion "
          "find nothing, the insert writes one job")
    asyncio.run(main_async(args.engines.split(","), args.rounds, args.calls))


if __name__ == "__main__":
    main()
