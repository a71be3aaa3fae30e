"""Enqueue throughput: single insert, insert_many and enqueue_many_copy.

    .venv/bin/python benchmarks/enqueue.py --jobs 50000
    (or: python3 dev.py bench benchmarks/enqueue.py --jobs 50000)

Creates its own database on the server of AWA_TEST_DATABASE_URL /
DATABASE_URL (else 127.0.0.1:5432), migrates it, measures each path with a
fresh table, and drops the database.  Targets (issue 2): enqueue_many_copy
>= 30,000 jobs/s and insert_many >= 10,000 jobs/s in batches of 1000.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

import _support

import awa


@dataclass
class SendEmail:
    to: str
    subject: str
    template_id: int


def payloads(n: int) -> list[SendEmail]:
    return [SendEmail(f"user{i}@example.com", f"welcome #{i}", i % 17) for i in range(n)]


async def reset(client: awa.AsyncClient) -> None:
    async with await client.transaction() as tx:
        await tx.execute(_support.EMPTY_JOB_TABLES)


async def measure(name: str, jobs: int, run) -> float:
    started = time.perf_counter()
    await run()
    elapsed = time.perf_counter() - started
    rate = jobs / elapsed
    print(f"{name:<34} {jobs:>7} jobs  {elapsed:7.2f} s  {rate:>10,.0f} jobs/s", flush=True)
    return rate


async def bench(url: str, jobs: int, batch: int, single: int) -> dict[str, float]:
    client = awa.AsyncClient(url)
    data = payloads(jobs)
    results: dict[str, float] = {}
    try:
        await client.insert(data[0])  # open the pool, warm the statement cache
        await reset(client)

        async def singles() -> None:
            for args in data[:single]:
                await client.insert(args)
        results["insert"] = await measure("insert (one per call)", single, singles)
        await reset(client)

        batched_paths: tuple[tuple[str, str, Any, dict[str, Any]], ...] = (
            ("insert_many", f"insert_many (batches of {batch})", client.insert_many, {}),
            ("enqueue_many_copy", f"enqueue_many_copy (batches of {batch})",
             client.enqueue_many_copy, {}),
            ("insert_many_copy", f"insert_many_copy (batches of {batch})",
             client.insert_many_copy, {}),
            ("enqueue_many_copy_unique", "enqueue_many_copy, unique_opts={}",
             client.enqueue_many_copy, {"unique_opts": {}}),
        )
        for key, label, insert_batch, options in batched_paths:
            async def in_batches(insert_batch: Any = insert_batch,
                                 options: dict[str, Any] = options) -> None:
                for i in range(0, jobs, batch):
                    await insert_batch(data[i:i + batch], **options)
            results[key] = await measure(label, jobs, in_batches)
            await reset(client)
    finally:
        await client.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--single", type=int, default=5_000,
                        help="jobs for the one-insert-per-call path (it is the slow one)")
    args = parser.parse_args()
    with _support.scratch_database() as url:
        asyncio.run(bench(url, args.jobs, args.batch, min(args.single, args.jobs)))


if __name__ == "__main__":
    main()
