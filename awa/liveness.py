"""The one runtime liveness rule: is a registered runtime alive, from its last snapshot.

It lives at the bottom layer so ``awa health`` and every ops view (``awa-ops diagnose``,
the exporter, the console, the API) judge a runtime alike: a worker SIGKILLed a moment ago
is gone for all of them at the same time.
"""

from __future__ import annotations

from awa import config

# A runtime is live while its last snapshot is within this many of its own intervals.
LIVE_INTERVALS = 2
# The floor is capped at this many of the runtime's own snapshot intervals...
FLOOR_MAX_INTERVALS = 10
# ...and at this share of the heartbeat staleness cutoff in use.
FLOOR_SHARE_OF_STALENESS = 0.75


def live_window_s(snapshot_interval_ms: int, stale_after_s: float | None = None) -> float:
    """How long a runtime may stay silent and still count as live.

    ``LIVE_INTERVALS`` (2) of its own snapshot intervals (``snapshot_interval_ms``,
    a column in every layout: 10 s on the Rust-core awa 0.6), and never less
    than a floor (``OPS_RUNTIME_LIVE_MIN_S``), so a late snapshot on a busy
    host is not a death.  The floor itself gives way: a runtime silent for ten
    of its promised intervals is gone however short they are, and a runtime is
    presumed gone before its jobs' heartbeats are presumed stale (as the
    production intervals have it, 30 s against 90 s), so a killed worker's
    attempts read orphaned rather than stale under a live runtime.
    """
    interval_s = int(snapshot_interval_ms) / 1000
    floor = min(config.OPS_RUNTIME_LIVE_MIN_S, FLOOR_MAX_INTERVALS * interval_s)
    if stale_after_s is not None:
        floor = min(floor, FLOOR_SHARE_OF_STALENESS * stale_after_s)
    return max(LIVE_INTERVALS * interval_s, floor)


def runtime_live(last_seen_age_s: float, snapshot_interval_ms: int,
                 stale_after_s: float | None = None) -> bool:
    """Is this runtime live: last seen within its live window (``live_window_s``).

    The one rule of ``awa health``, awa-ops diagnose, the exporter and the console alike.
    """
    return last_seen_age_s <= live_window_s(snapshot_interval_ms, stale_after_s)
