"""How the console writes times, ages and sparklines: short, fixed-width-ish, readable at a
glance."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h03m``, ``4d02h``; negative values keep their sign."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = int(abs(seconds))
    if s < 60:
        body = f"{s}s"
    elif s < 3600:
        body = f"{s // 60}m{s % 60:02d}s"
    elif s < 86400:
        body = f"{s // 3600}h{s % 3600 // 60:02d}m"
    else:
        body = f"{s // 86400}d{s % 86400 // 3600:02d}h"
    return sign + body


def relative(ts: datetime | None, now: datetime) -> str:
    """``12s ago`` / ``in 3m00s``."""
    if ts is None:
        return "-"
    delta = (now - ts).total_seconds()
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"


def stamp(ts: datetime | None) -> str:
    """An absolute UTC timestamp for detail views."""
    if ts is None:
        return "-"
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def spark(values: Iterable[float], width: int = 16) -> str:
    """A text sparkline of the last ``width`` values, scaled to their maximum."""
    points = list(values)[-width:]
    if not points:
        return ""
    top = max(points)
    if top <= 0:
        return SPARK_BLOCKS[0] * len(points)
    last = len(SPARK_BLOCKS) - 1
    return "".join(SPARK_BLOCKS[round(v / top * last)] for v in points)
