"""Types more than one group of the seam shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CronSchedule:
    """One declared schedule as stored (the ``awa.cron_jobs`` definition columns)."""

    name: str
    cron_expr: str
    timezone: str
    kind: str
    queue: str
    args: dict[str, Any]
    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    missed_fire_policy: str
