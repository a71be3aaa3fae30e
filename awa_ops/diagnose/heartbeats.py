"""heartbeats: heartbeat ages against the configured staleness, per queue and per runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa_ops.diagnose._text import ops, plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.runtimes import DEFAULT_INTERVAL_S, Timing, judged_running_counts, load_runtimes
from awa_ops.storage import storage_engine

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "heartbeats"
RUNBOOK = runbook("heartbeats")


def _cutoffs(cutoffs: Any) -> str:
    """One cutoff, or the range of the runtimes' own ("1.0s–1.5m")."""
    low, high = min(cutoffs), max(cutoffs)
    return secs(low) if low == high else f"{secs(low)}–{secs(high)}"


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    reads = await storage_engine(session)
    runtimes = await load_runtimes(session, options.heartbeat_staleness_s)
    # Each attempt judged by the staleness its own runtime publishes (the one that claimed
    # it, else its queue's), as the console and stuck-running do; a flag overrides.
    fallback = Timing(options.staleness_s, options.heartbeat_interval_s
                      if options.heartbeat_interval_s is not None else DEFAULT_INTERVAL_S)
    async with session.read():
        counts = await judged_running_counts(
            session.conn, reads, runtimes, stale_after_s=options.flagged_staleness_s,
            interval_s=options.flagged_interval_s, fallback=fallback, queue=options.queue)
    queues: list[dict[str, Any]] = [{"queue": c.queue, "running": c.running,
               "oldest_heartbeat_s": c.oldest_heartbeat_s, "stale": c.stale} for c in counts]
    cutoffs = {c.queue: c.cutoffs for c in counts}
    findings: list[Finding] = []
    limit = options.evidence_limit
    for q in queues:
        if q["stale"]:
            cutoff = max(cutoffs[q["queue"]])
            critical = q["oldest_heartbeat_s"] > cutoff + 2 * options.rescue_interval_s
            findings.append(Finding(
                Severity.CRITICAL if critical else Severity.WARNING,
                f"queue {q['queue']}: {q['stale']} of {q['running']} running jobs have a stale "
                f"heartbeat (oldest {secs(q['oldest_heartbeat_s'])}, cutoff "
                f"{_cutoffs(cutoffs[q['queue']])})",
                "stale attempts are presumed dead and will be rescued to retryable" +
                (" — and rescue looks overdue (is there a leader?)" if critical else ""),
                ops("stuck-running") + f" --queue {q['queue']}", [q], RUNBOOK))
    for r in runtimes:
        if r.live and not r.row["heartbeat_alive"]:
            findings.append(Finding(
                Severity.CRITICAL, f"runtime {r.label()} reports heartbeat_alive = false",
                "its jobs stop heartbeating and will be rescued while their handlers still run",
                f"restart the worker process {r.label()}", [r.evidence()], RUNBOOK))
    if not findings:
        total = sum(q["running"] for q in queues)
        oldest = max((q["oldest_heartbeat_s"] or 0 for q in queues), default=0)
        used = sorted({c for cs in cutoffs.values() for c in cs}) or [options.staleness_s]
        findings.append(Finding(
            Severity.OK, f"{plural(total, 'running job')} in {plural(len(queues), 'queue')}; "
                         f"oldest heartbeat {secs(oldest)} (cutoff {_cutoffs(used)})",
            evidence=[*queues[:limit],
                      *[{"runtime": r.label(), "heartbeat_alive": r.row["heartbeat_alive"],
                         "last_seen_age_s": round(r.age_s, 1)}
                        for r in runtimes if r.live][:limit]],
            runbook=RUNBOOK))
    return findings
