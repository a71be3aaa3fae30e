"""Reading one job's row back, wherever its lifecycle has put it."""

from __future__ import annotations

from typing import Any


def job_row(conn, job_id: int) -> dict[str, Any] | None:
    """The job in ``awa.jobs`` (hot or scheduled), state as text; None once moved out."""
    return conn.execute("SELECT *, state::text AS state FROM awa.jobs WHERE id = %s",
                        (job_id,)).fetchone()


def dlq_entry(conn, job_id: int) -> dict[str, Any] | None:
    return conn.execute("SELECT * FROM awa.dlq_entries WHERE job_id = %s", (job_id,)).fetchone()
