"""Rows in any state and a pool, for driving maintenance branches against real PostgreSQL."""

from __future__ import annotations

import pytest

from awa import config
from awa import db as awa_db
from runtime.conftest import log_dir  # noqa: F401 (the worker-subprocess tests' fixture)
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
    table = "awa.scheduled_jobs" if state in ("scheduled", "retryable") else "awa.jobs_hot"
    row = conn.execute(
        f"""INSERT INTO {table} (kind, queue, args, state, attempt, max_attempts, run_lease,
                priority, attempted_at, heartbeat_at, deadline_at, run_at, finalized_at,
                unique_key, unique_states, callback_id, callback_timeout_at, metadata)
            VALUES (%(kind)s, %(queue)s, '{{}}', %(state)s::awa.job_state, %(attempt)s,
                %(max_attempts)s,
                %(run_lease)s, %(priority)s,
                CASE WHEN %(attempt)s > 0 THEN now() END,
                CASE WHEN %(state)s::text IN ('running', 'waiting_external')
                     THEN now() - make_interval(secs => %(hb)s) END,
                CASE WHEN %(state)s::text = 'running'
                     THEN now() + make_interval(secs => %(dl)s) END,
                now() + make_interval(secs => %(run_at)s),
                CASE WHEN %(fin)s::float8 IS NOT NULL
                     THEN now() - make_interval(secs => %(fin)s::float8) END,
                %(uk)s, %(us)s::bit(8),
                CASE WHEN %(cb)s::float8 IS NOT NULL THEN gen_random_uuid() END,
                CASE WHEN %(cb)s::float8 IS NOT NULL
                     THEN now() + make_interval(secs => %(cb)s::float8) END,
                %(md)s::jsonb)
            RETURNING id""",
        {"kind": kind, "queue": queue, "state": state, "attempt": attempt,
         "max_attempts": max_attempts, "run_lease": run_lease, "priority": priority,
         "hb": heartbeat_age_s, "dl": deadline_in_s, "run_at": run_at_offset_s,
         "fin": finalized_age_s, "uk": unique_key, "us": unique_states,
         "cb": callback_timeout_in_s, "md": metadata}).fetchone()
    return row["id"]


@pytest.fixture
async def pool(database_url):
    p = await awa_db.open_pool(database_url, config.APP_NAME_WORKER, max_size=4)
    yield p
    await p.close()
