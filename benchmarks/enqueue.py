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
import os
import time
import uuid
from dataclasses import dataclass

import psycopg
from psycopg.conninfo import make_conninfo

import awa
from awa import schema

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass
class SendEmail:
    to: str
    subject: str
    template_id: int


def admin_url() -> str:
    for var in ("AWA_TEST_DATABASE_URL", "DATABASE_URL"):
        if os.environ.get(var):
            return make_conninfo(os.environ[var], dbname="postgres")
    return LOCAL_SERVER


def payloads(n: int) -> list[SendEmail]:
    return [SendEmail(f"user{i}@example.com", f"welcome #{i}", i % 17) for i in range(n)]


async def reset(client: awa.AsyncClient) -> None:
    async with await client.transaction() as tx:
        await tx.execute("TRUNCATE awa.jobs_hot, awa.scheduled_jobs, awa.job_unique_claims")


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

        async def many() -> None:
            for i in range(0, jobs, batch):
                await client.insert_many(data[i:i + batch])
        results["insert_many"] = await measure(f"insert_many (batches of {batch})", jobs, many)
        await reset(client)

        async def copy() -> None:
            for i in range(0, jobs, batch):
                await client.enqueue_many_copy(data[i:i + batch])
        results["enqueue_many_copy"] = await measure(
            f"enqueue_many_copy (batches of {batch})", jobs, copy)
        await reset(client)

        async def copy_returning() -> None:
            for i in range(0, jobs, batch):
                await client.insert_many_copy(data[i:i + batch])
        results["insert_many_copy"] = await measure(
            f"insert_many_copy (batches of {batch})", jobs, copy_returning)
        await reset(client)

        async def unique_copy() -> None:
            for i in range(0, jobs, batch):
                await client.enqueue_many_copy(data[i:i + batch], unique_opts={})
        results["enqueue_many_copy_unique"] = await measure(
            "enqueue_many_copy, unique_opts={}", jobs, unique_copy)
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
    server = admin_url()
    name = f"awa_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(server, dbname=name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            schema.migrate_sync(conn)
        asyncio.run(bench(url, args.jobs, args.batch, min(args.single, args.jobs)))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
