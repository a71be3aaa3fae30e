"""Rows and a pool for driving the callback functions against real PostgreSQL."""

from __future__ import annotations

import pytest

INSERT_RUNNING = """
INSERT INTO awa.jobs_hot (kind, queue, args, state, attempt, max_attempts, run_lease,
                          attempted_at, heartbeat_at, deadline_at)
VALUES (%(kind)s, %(queue)s, '{}', 'running', %(attempt)s, %(max_attempts)s, %(run_lease)s,
        now(), now(), now() + interval '5 minutes')
RETURNING id, run_lease"""


@pytest.fixture
def running_job(db):
    """Insert a job as a claim would leave it; returns (id, run_lease)."""
    def make(queue: str = "cb", kind: str = "external", attempt: int = 1,
             max_attempts: int = 5, run_lease: int = 3) -> tuple[int, int]:
        row = db.execute(INSERT_RUNNING, {"kind": kind, "queue": queue, "attempt": attempt,
                                          "max_attempts": max_attempts,
                                          "run_lease": run_lease}).fetchone()
        return row["id"], row["run_lease"]
    return make


@pytest.fixture
async def pool(client):
    return await client._get_pool()
