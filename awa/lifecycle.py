"""Rules every path that ends an attempt shares: backoff and the error record.

The executor (handler errors), maintenance (rescues) and the admin functions
all record failures the same way, so they all call these.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from awa import config


def backoff_seconds(attempt: int, rng: random.Random | None = None) -> float:
    """``2^attempt`` seconds plus up to 25 % jitter, capped at 24 h."""
    base = config.BACKOFF_BASE_SECONDS ** max(attempt, 0)
    cap = config.BACKOFF_CAP.total_seconds()
    jitter = (rng or random).random() * config.BACKOFF_JITTER_FRACTION * base
    return min(base + jitter, cap)


def error_entry(message: str, attempt: int, *, terminal: bool = False,
                at: datetime | None = None, **extra: Any) -> dict[str, Any]:
    """One element of a job's ``errors`` array: ``{error, attempt, at, terminal?}``."""
    entry: dict[str, Any] = {
        "error": message,
        "attempt": attempt,
        "at": (at or datetime.now(UTC)).isoformat(),
    }
    if terminal:
        entry["terminal"] = True
    entry.update(extra)
    return entry


# Error texts the seeds fix verbatim.
HEARTBEAT_STALE_ERROR = "heartbeat stale: worker presumed dead"
DEADLINE_EXCEEDED_ERROR = "hard deadline exceeded"
CALLBACK_TIMEOUT_ERROR = "callback timed out"
RESCUED_AS_DUPLICATE = "rescued as duplicate"
UNKNOWN_KIND_ERROR = "unknown job kind: {kind}"

# DLQ reasons.
DLQ_MAX_ATTEMPTS = "max_attempts_exhausted"
DLQ_TERMINAL_ERROR = "terminal_error"
DLQ_HEARTBEAT_STALE = "heartbeat_stale"
DLQ_DEADLINE_EXCEEDED = "deadline_exceeded"
DLQ_CALLBACK_TIMEOUT = "callback_timeout"
DLQ_MANUAL = "manual"

# The states that count as a queue's depth (its backlog and work in hand), in
# one place for every reader: the queue-health gauges, the admin queue stats
# and the ops console.  Terminal history (completed, cancelled) is not depth;
# failed is, because an operator can still retry it.
DEPTH_STATES = ("available", "scheduled", "retryable", "running", "waiting_external", "failed")
