"""cron: every active schedule fires on time.

The maintenance leader fires a schedule's due slot within one cron evaluation.  A
schedule is not firing when its oldest due fire time has waited longer than
``OPS_CRON_OVERDUE_S`` (``--min-age`` overrides it) -- no leader, or a leader whose cron
pass fails -- or at once when its stored expression cannot be evaluated: the leader logs
``cron job ... cannot be evaluated`` and skips it every tick, so it never fires again.
Paused schedules are left alone (an operator stopped them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from awa import config
from awa_ops.cron import CronLateness, lateness
from awa_ops.diagnose._text import awa, ops, plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.runtimes import load_runtimes
from awa_ops.storage import storage_engine

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "cron"
RUNBOOK = runbook("cron")


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    reads = await storage_engine(session)
    async with session.read():
        schedules = [lateness(s) for s in await reads.list_active_cron_jobs(session.conn)]
    if options.queue is not None:
        schedules = [s for s in schedules if s.queue == options.queue]
    late_after = options.min_age_s if options.min_age_s is not None else config.OPS_CRON_OVERDUE_S
    broken = [s for s in schedules if s.error is not None]
    late = [s for s in schedules if s.error is None and s.overdue_s > late_after]
    findings = [_unevaluable(s) for s in broken[:options.evidence_limit]]
    if late:
        runtimes = await load_runtimes(session, options.heartbeat_staleness_s)
        leader = next((r for r in runtimes if r.live and r.leader), None)
        findings += [_late(s, leader.label() if leader else None)
                     for s in late[:options.evidence_limit]]
    hidden = len(broken) + len(late) - len(findings)
    if hidden > 0:
        findings.append(Finding(Severity.WARNING, f"{plural(hidden, 'more schedule')} not "
                                                  f"firing, not shown", runbook=RUNBOOK))
    if not findings:
        latest = max((s.overdue_s for s in schedules), default=0.0)
        findings.append(Finding(
            Severity.OK, f"{plural(len(schedules), 'active cron schedule')} firing on time"
                         + (f" (the latest due fire waited {secs(latest)})" if schedules else ""),
            evidence=[s.evidence() for s in schedules[:options.evidence_limit]],
            runbook=RUNBOOK))
    return findings


def _unevaluable(s: CronLateness) -> Finding:
    return Finding(
        Severity.WARNING,
        f"cron schedule {s.name}: its stored expression {s.cron_expr!r} cannot be evaluated "
        f"({s.error}); the leader skips it every tick: last fired "
        f"{'never' if s.last_fired is None else secs(s.overdue_s) + ' ago'}",
        "the expression in awa.cron_jobs was changed by hand (or by another tool) into one the "
        "runtime cannot parse; a runtime that declares the schedule stores its declared "
        "expression again when it starts",
        "restart a worker that declares the schedule (its start stores the declared "
        f"expression again); to run it once now: {awa(f'cron trigger {s.name}')}",
        [s.evidence()], RUNBOOK)


def _late(s: CronLateness, leader: str | None) -> Finding:
    why = ("cron fires only on the maintenance leader and no live runtime leads"
           if leader is None else
           f"the leader ({leader}) is not firing it: look in its log for errors of "
           f"awa.maintenance.cron")
    return Finding(
        Severity.WARNING,
        f"cron schedule {s.name} ({s.cron_expr}): its fire time "
        f"{s.missed_since.isoformat() if s.missed_since else '?'} has not been enqueued for "
        f"{secs(s.overdue_s)}; last fired "
        f"{s.last_fired.isoformat() if s.last_fired else 'never'}",
        why,
        (ops("runtime") if leader is None else "check the leader's log")
        + f"; to run it once now: {awa(f'cron trigger {s.name}')}",
        [s.evidence()], RUNBOOK)
