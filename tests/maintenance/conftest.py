"""Rows in any state and a pool, for driving maintenance branches against real PostgreSQL."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from awa import config
from awa import db as awa_db
from runtime.conftest import log_dir  # noqa: F401 (the worker-subprocess tests' fixture)
from support.arrange import insert_job as arrange_job
from support.polling import eventually  # noqa: F401 (re-exported for the maintenance tests)
from support.rows import dlq_entry as dlq  # noqa: F401 (re-exported)
from support.rows import job_row as job  # noqa: F401 (re-exported)

# The troubleshooting guide's query for the unique-claim wedge, verbatim.
WEDGE_QUERY = """
SELECT j.id AS stuck_job, j.kind, j.queue, j.unique_key,
       c.job_id AS claim_holder, h.state AS holder_state
FROM awa.jobs_hot j
JOIN awa.job_unique_claims c ON c.unique_key = j.unique_key AND c.job_id <> j.id
LEFT JOIN awa.jobs h ON h.id = c.job_id
WHERE j.state = 'running';"""


def insert_job(conn, *, state: str = "running", kind: str = "work", queue: str = "maint",
               attempt: int = 1, max_attempts: int = 5, run_lease: int = 1,
               heartbeat_age_s: float = 0.0, deadline_in_s: float = 300.0,
               run_at_offset_s: float = 0.0, finalized_age_s: float | None = None,
               priority: int = 2, unique_key: bytes | None = None,
               unique_states: str | None = None, callback_timeout_in_s: float | None = None,
               metadata: str = "{}") -> int:
    """One row as the runtime would have left it; returns its id."""
    now = datetime.now(UTC)
    running = state in ("running", "waiting_external")
    return arrange_job(
        conn, state, kind=kind, queue=queue, attempt=attempt, max_attempts=max_attempts,
        run_lease=run_lease, priority=priority, attempted_at=now if attempt > 0 else None,
        heartbeat_at=now - timedelta(seconds=heartbeat_age_s) if running else None,
        deadline_at=now + timedelta(seconds=deadline_in_s) if state == "running" else None,
        run_at=now + timedelta(seconds=run_at_offset_s),
        finalized_at=(now - timedelta(seconds=finalized_age_s)
                      if finalized_age_s is not None else None),
        unique_key=unique_key, unique_states=unique_states,
        callback_id=uuid.uuid4() if callback_timeout_in_s is not None else None,
        callback_timeout_at=(now + timedelta(seconds=callback_timeout_in_s)
                             if callback_timeout_in_s is not None else None),
        metadata=json.loads(metadata))


@pytest.fixture
async def pool(database_url):
    p = await awa_db.open_pool(database_url, config.APP_NAME_WORKER, max_size=4)
    yield p
    await p.close()
