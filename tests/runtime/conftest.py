"""Helpers for runtime tests: polling the database until a condition holds."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def job_row(conn, job_id: int) -> dict[str, Any] | None:
    return conn.execute("SELECT *, state::text AS state FROM awa.jobs WHERE id = %s",
                        (job_id,)).fetchone()


def job_state(conn, job_id: int) -> str | None:
    row = job_row(conn, job_id)
    return row["state"] if row else None


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "worker-logs"
    path.mkdir()
    return path
