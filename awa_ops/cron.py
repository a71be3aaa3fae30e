"""How late each cron schedule is: the one reading of `awa-ops diagnose cron` and the
exporter's ``awa_db_cron_overdue_seconds`` (and so of ``AwaCronNotFiring``).

The leader fires a schedule's due slot within one cron evaluation (a second); a schedule
whose oldest due fire time has not been enqueued for minutes is not firing: no leader, a
leader that cannot evaluate it (an expression stored by hand that the runtime cannot
parse: it logs ``cron job ... cannot be evaluated`` and skips it every tick), or a leader
whose cron pass fails.  Paused schedules are not late: an operator stopped them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from awa.cron import slots_between
from awa.storage.engine import ActiveCronSchedule


@dataclass(frozen=True)
class CronLateness:
    name: str
    cron_expr: str
    timezone: str
    kind: str
    queue: str
    last_fired: datetime | None
    # the oldest fire time after the last one that has not been enqueued (None: none due,
    # or the expression cannot be evaluated)
    missed_since: datetime | None
    # seconds since ``missed_since`` (0 when on time); when ``error``, since it last fired
    # (or was stored)
    overdue_s: float
    error: str | None = None  # why the expression cannot be evaluated

    def evidence(self) -> dict[str, Any]:
        return {"name": self.name, "cron_expr": self.cron_expr, "timezone": self.timezone,
                "kind": self.kind, "queue": self.queue,
                "last_fired": self.last_fired.isoformat() if self.last_fired else None,
                "missed_since": self.missed_since.isoformat() if self.missed_since else None,
                "overdue_s": round(self.overdue_s, 1), "error": self.error}


def lateness(s: ActiveCronSchedule) -> CronLateness:
    """How late ``s`` is against the database clock it was read at, by the leader's own
    arithmetic (``awa.cron``)."""
    after = s.last_enqueued_at or s.created_at
    try:
        missed = slots_between(s.cron_expr, s.timezone, after, s.db_now, 1)
    except (ValueError, KeyError) as exc:  # what the leader's evaluator catches and skips
        return CronLateness(s.name, s.cron_expr, s.timezone, s.kind, s.queue,
                            s.last_enqueued_at, None,
                            max((s.db_now - after).total_seconds(), 0.0),
                            " ".join(str(exc).split()) or type(exc).__name__)
    first = missed[0] if missed else None
    overdue = max((s.db_now - first).total_seconds(), 0.0) if first is not None else 0.0
    return CronLateness(s.name, s.cron_expr, s.timezone, s.kind, s.queue, s.last_enqueued_at,
                        first, overdue)
