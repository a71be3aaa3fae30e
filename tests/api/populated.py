"""A database in every state for the property-based API runs (tests/api/test_fuzz.py,
benchmarks/api_fuzz.py): test_routes' jobs, descriptors, cron schedule and runtime, plus
DLQ entries, a paused queue, a stored batch operation and a job with 100 KiB of args."""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg.types.json import Jsonb

import awa
from support.arrange import insert_job

from .test_routes import arrange


def populate(db: Any, url: str) -> dict[str, Any]:
    ids = arrange(db)
    ids["big"] = insert_job(db, "available", kind="bulk", queue="mail",
                            args=Jsonb({"blob": "x" * 100_000}))
    for _ in range(3):
        insert_job(db, "failed", kind="poison", queue="dead", attempt=3)

    async def admin() -> None:
        async with awa.AsyncClient(url) as client:
            await client.bulk_move_failed_to_dlq(kind="poison", reason="fuzz")
            await client.pause_queue("paused", "fuzz")
            await client.submit_batch_operation("set_priority", {"queue": "mail"},
                                                {"priority": 3})
    asyncio.run(admin())
    return ids
