"""Rows and a pool for driving the callback functions against real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from support.arrange import insert_job


@pytest.fixture
def running_job(db):
    """Insert a job as a claim would leave it; returns (id, run_lease)."""
    def make(queue: str = "cb", kind: str = "external", attempt: int = 1,
             max_attempts: int = 5, run_lease: int = 3) -> tuple[int, int]:
        job_id = insert_job(db, "running", kind=kind, queue=queue, attempt=attempt,
                            max_attempts=max_attempts, run_lease=run_lease,
                            deadline_at=datetime.now(UTC) + timedelta(minutes=5))
        return job_id, run_lease
    return make


@pytest.fixture
async def pool(client):
    return await client._get_pool()
