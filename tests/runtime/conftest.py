"""Helpers for runtime tests: job rows, polling until a condition holds, worker logs."""

from __future__ import annotations

import pytest

from support.polling import wait_until  # noqa: F401 (re-exported for the runtime tests)
from support.rows import job_row


def job_state(conn, job_id: int) -> str | None:
    row = job_row(conn, job_id)
    return row["state"] if row else None


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "worker-logs"
    path.mkdir()
    return path
