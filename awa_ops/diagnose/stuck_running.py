"""stuck-running: every running attempt, classified the way the guide reads it.

alive; stale (heartbeat older than the staleness cutoff: rescue is due at the
next scan); deadline overdue; orphaned (the runtime that held it is gone or
unhealthy); cancelled but possibly still running (cancel is cooperative).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from awa import config
from awa_ops import runtimes as runtimes_
from awa_ops.diagnose._text import ops, plural, secs, shell_quote
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.runtimes import (
    REPORT_NAMES,
    Runtime,
    Timing,
    attempt_timing,
    classify_attempt,
    inferred_owner,
    live_servers,
    load_runtimes,
)
from awa_ops.session import OpsSession
from awa_ops.storage import render, storage_engine

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.storage import DetectedEngine


NAME = "stuck-running"
RUNBOOK = runbook("stuck-running")

# The guide's canonical query (verbatim), filtered by queue and capped, with ages;
# the attempt's lease and start come from the engine's read side.
CANONICAL_RUNNING = f"""
WITH seed AS ({render("running_jobs", as_subquery=True)})
SELECT s.id AS job_id, s.kind, s.queue, s.attempt, s.heartbeat_at, s.deadline_at,
       EXTRACT(EPOCH FROM (now() - s.heartbeat_at))::float8 AS heartbeat_age_s,
       EXTRACT(EPOCH FROM (s.deadline_at - now()))::float8 AS deadline_remaining_s,
       count(*) OVER () AS total
FROM seed s
WHERE (%(queue)s::text IS NULL OR s.queue = %(queue)s)
ORDER BY s.heartbeat_at ASC
LIMIT %(limit)s
"""


# The console's classes (awa_ops.runtimes.classify_attempt), in the guide's words.
ALIVE, STALE, OVERDUE, ORPHANED = (REPORT_NAMES[c] for c in (
    runtimes_.ALIVE, runtimes_.STALE, runtimes_.OVERDUE, runtimes_.ORPHANED))
CANCELLED = "cancelled but still running"


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    params = {"queue": options.queue, "limit": config.OPS_EVIDENCE_LIMIT * 20,
              "window": config.OPS_CANCEL_WINDOW_S, "staleness": options.heartbeat_staleness_s}
    runtimes = await load_runtimes(session, options.heartbeat_staleness_s)
    reads = await storage_engine(session)
    if engine.is_queue_storage or getattr(reads, "read_only", False):
        attempts, cancelled = await _engine_attempts(session, params)
    else:
        attempts, cancelled = await _canonical_attempts(session, params)
    if options.min_age_s:
        attempts = [a for a in attempts
                    if (a.get("running_for_s") or a.get("heartbeat_age_s") or 0)
                    >= options.min_age_s]
    return classify(attempts, cancelled, runtimes, options)


async def _canonical_attempts(session: OpsSession, params: dict[str, Any]
                              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The seed's running query plus each attempt's lease and start, and recent cancels:
    one read transaction."""
    engine = await storage_engine(session)
    async with session.read() as cur:
        await cur.execute(CANONICAL_RUNNING, params)
        attempts = await cur.fetchall()
        details = {a.id: a for a in await engine.running_attempts(
            session.conn, job_ids=[a["job_id"] for a in attempts], limit=len(attempts))}
        cancelled = await engine.cancelled_while_running(
            session.conn, window_s=params["window"], stale_after_s=params["staleness"],
            queue=params["queue"], limit=params["limit"])
    for a in attempts:
        detail = details.get(a["job_id"])
        a["run_lease"] = detail.run_lease if detail else None
        a["running_for_s"] = detail.running_for_s if detail else None
        a["claimed_by"] = detail.claimed_by if detail else None
    return attempts, [asdict(c) for c in cancelled]


async def _engine_attempts(session: OpsSession, params: dict[str, Any]
                           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Running attempts from the engine's read side (a queue-storage layout: open receipt
    claims and leases, heartbeats from attempt_state), and recent cancels."""
    engine = await storage_engine(session)
    async with session.read():
        found = await engine.running_attempts(session.conn, limit=params["limit"])
        cancelled = await engine.cancelled_while_running(
            session.conn, window_s=params["window"], stale_after_s=params["staleness"],
            queue=params["queue"], limit=params["limit"])
    attempts: list[dict[str, Any]] = []
    for a in found:
        if params["queue"] is not None and a.queue != params["queue"]:
            continue
        attempts.append({"job_id": a.id, "kind": a.kind, "queue": a.queue,
                         "attempt": a.attempt, "run_lease": a.run_lease,
                         "heartbeat_at": a.heartbeat_at, "deadline_at": a.deadline_at,
                         "heartbeat_age_s": a.heartbeat_age_s,
                         "deadline_remaining_s": a.deadline_remaining_s,
                         "running_for_s": a.running_for_s, "claimed_by": a.claimed_by})
    for row in attempts:
        row["total"] = len(attempts)
    return attempts, [asdict(c) for c in cancelled]


def _live(runtime: Runtime) -> bool:
    return runtime.live


def classify(attempts: list[dict[str, Any]], cancelled: list[dict[str, Any]],
             runtimes: list[Runtime], options: Options) -> list[Finding]:
    staleness = options.staleness_s
    # "Overdue" needs a grace of one heartbeat interval.  Each attempt is judged by the
    # timing its own runtime publishes (the one that claimed it, else those serving its
    # queue); flags override; the timing resolved for the whole run is the fallback.
    grace = (options.heartbeat_interval_s if options.heartbeat_interval_s is not None
             else config.HEARTBEAT_INTERVAL_MS / 1000)
    fallback = Timing(staleness, grace)
    cutoffs: dict[Any, float] = {}  # job id -> the staleness cutoff it was judged by
    leader_alive = any(r.live and r.leader and r.row["maintenance_alive"] for r in runtimes)
    groups: dict[str, list[dict[str, Any]]] = {}
    owners: dict[Any, str] = {}  # job id -> the gone runtime that held it
    by_id = {r.instance_id: r for r in runtimes}
    for a in attempts:
        hb = a.get("heartbeat_age_s")
        if hb is None:
            # never heartbeated (or its heartbeat row is already gone, mid-rescue): its age
            # since the claim is its heartbeat age, as rescue judges it
            hb = a.get("running_for_s")
        remaining = a.get("deadline_remaining_s")
        timing = attempt_timing(runtimes, a["queue"],
                                str(a["claimed_by"]) if a.get("claimed_by") else None,
                                is_live=_live, stale_after_s=options.flagged_staleness_s,
                                interval_s=options.flagged_interval_s, fallback=fallback)
        cutoffs[a["job_id"]] = timing.stale_after_s
        stale = hb is not None and hb > timing.stale_after_s
        servers = live_servers(runtimes, a["queue"])
        row: dict[str, Any] = {k: a.get(k) for k in ("job_id", "kind", "queue", "attempt",
                                                     "run_lease", "heartbeat_at", "deadline_at")
                               if k in a}
        row["heartbeat_age_s"] = None if hb is None else round(float(hb), 1)
        row["deadline_remaining_s"] = None if remaining is None else round(float(remaining), 1)
        if a.get("receipt_claim"):
            row["receipt_claim"] = True
        claimed_by = a.get("claimed_by")
        gone: str | None = None
        if claimed_by:
            # Recorded at claim: the runtime that runs it, by name.
            row["claimed_by"] = str(claimed_by)
            claimer = by_id.get(str(claimed_by))
            if claimer is None:
                gone = f"runtime {str(claimed_by)[:8]} (no longer registered)"
            elif not claimer.live:
                gone = f"{claimer.label()}, last seen {secs(claimer.age_s)} ago"
            else:
                row["runtime"] = claimer.label() + (" (shutting down)" if claimer.draining
                                                    else "")
        elif stale:
            # Not recorded (claimed before migration 0004, or a layout without it): the dead
            # runtime serving the queue whose last report is closest to the last heartbeat.
            owner = inferred_owner(runtimes, a["queue"], hb)
            if owner is not None:
                gone = f"{owner.label()}, last seen {secs(owner.age_s)} ago"
        if gone is not None:
            owners[a["job_id"]] = gone
            row["runtime"] = f"gone: {gone}"
        elif not servers and "runtime" not in row:
            row["runtime"] = "no live runtime serves this queue"
        cls = REPORT_NAMES[classify_attempt(
            heartbeat_age_s=None if hb is None else float(hb),
            deadline_remaining_s=None if remaining is None else float(remaining),
            stale_after_s=timing.stale_after_s, owner_gone=gone is not None,
            served=bool(servers), overdue_grace_s=timing.grace_s)]
        row["class"] = cls
        groups.setdefault(cls, []).append(row)

    findings: list[Finding] = []
    limit = options.evidence_limit
    for cls in (OVERDUE, ORPHANED, STALE):
        rows = groups.get(cls, [])
        if not rows:
            continue
        oldest = max((r["heartbeat_age_s"] or 0) for r in rows)
        cutoff = max(cutoffs[r["job_id"]] for r in rows)
        rescue_overdue = cutoff + 2 * options.rescue_interval_s
        if cls == OVERDUE:
            worst = min(r["deadline_remaining_s"] for r in rows)
            critical = -worst > 2 * options.rescue_interval_s or not leader_alive
            summary = (f"{plural(len(rows), 'running job')} past the hard deadline "
                       f"(worst {secs(-worst)} overdue)")
            why = ("overdue longer than two deadline-rescue scans: rescue is not running "
                   "(is there a healthy leader?)" if critical else
                   "deadline rescue should pick these up at its next scan; if they stay, the "
                   "leader's maintenance is not running")
        elif cls == ORPHANED:
            dead = sorted({owners[r["job_id"]] for r in rows if r["job_id"] in owners}) or \
                sorted({r["runtime"] for r in rows if r.get("runtime")})
            critical = oldest > rescue_overdue or not leader_alive
            summary = (f"{plural(len(rows), 'running job')} orphaned: heartbeat {secs(oldest)} old "
                       f"(stale after {secs(cutoff)}) and the runtime that ran "
                       f"{'it' if len(rows) == 1 else 'them'} is gone"
                       + (f": {dead[0]}" if dead else ""))
            why = ("the worker stopped (crash, OOM kill, SIGKILL); stale-heartbeat rescue moves "
                   "these back to retryable at its next scan" +
                   ("" if leader_alive else ", but no live leader runs rescue right now"))
        else:
            critical = oldest > rescue_overdue or not leader_alive
            summary = (f"{plural(len(rows), 'running job')} with a stale heartbeat "
                       f"(oldest {secs(oldest)}, cutoff {secs(cutoff)}); "
                       "rescue due at next scan")
            why = ("the runtime serving the queue is alive but these attempts stopped "
                   "heartbeating: its heartbeat loop or its connections are starved")
        summary += "; " + _rescue_eta(cls, rows, cutoffs, options)
        step = _next_step(cls, rows, critical, leader_alive, options)
        findings.append(Finding(Severity.CRITICAL if critical else Severity.WARNING, summary, why,
                                step, rows[:limit], RUNBOOK))

    recent_cancels = [dict(c) for c in cancelled]
    if recent_cancels:
        lingering = [c for c in recent_cancels
                     if c["heartbeat_after_cancel"] or c["cancelled_age_s"] > staleness]
        sev = Severity.WARNING if lingering else Severity.OK
        findings.append(Finding(
            sev, f"{plural(len(recent_cancels), 'job')} cancelled while running; the handler may "
                 f"still run until it checks is_cancelled() or its deadline",
            "cancel is cooperative: the state is durable, but a handler that never polls "
            "is_cancelled() keeps its worker slot; if the cancel listener is down it gets no "
            "early wake-up",
            ops("cancel-listener"), [{**c, "class": CANCELLED} for c in recent_cancels[:limit]],
            RUNBOOK))

    alive = groups.get(ALIVE, [])
    total = int(attempts[0]["total"]) if attempts else 0
    if not any(f.severity > Severity.OK for f in findings):
        beats = [r["heartbeat_age_s"] for r in alive if r["heartbeat_age_s"] is not None]
        findings.append(Finding(
            Severity.OK, f"{plural(total, 'running attempt')}, all alive"
                         + (f" (oldest heartbeat {secs(max(beats))})" if beats else ""),
            evidence=alive[:limit], runbook=RUNBOOK))
    return findings


def _rescue_eta(cls: str, rows: list[dict[str, Any]], cutoffs: dict[Any, float],
                options: Options) -> str:
    """When the leader's rescue takes these attempts back: each is due when its heartbeat
    passes its cutoff (or its deadline passes), and taken at the next rescue scan after."""
    if cls == OVERDUE:
        due = 0.0  # already past the deadline: the next deadline scan takes it
    else:
        due = max(max(cutoffs[r["job_id"]] - (r["heartbeat_age_s"] or 0), 0.0) for r in rows)
    latest = due + options.rescue_interval_s
    if due == 0:
        return (f"rescue retries {'it' if len(rows) == 1 else 'them'} at its next scan "
                f"(within {secs(options.rescue_interval_s)})")
    return (f"rescue retries {'it' if len(rows) == 1 else 'them'} within {secs(latest)} "
            f"(due in {secs(due)}, then its next scan)")


def _next_step(cls: str, rows: list[dict[str, Any]], critical: bool, leader_alive: bool,
               options: Options) -> str:
    """What to do: never cancel an attempt rescue would retry (cancel discards the job);
    wait for rescue while it is on time, and look at the leader when it is not."""
    queues = sorted({str(r["queue"]) for r in rows})
    recheck = ops("stuck-running") + (f" --queue {shell_quote(queues[0])}" if len(queues) == 1
                                      else "")
    if not leader_alive or critical:
        return (ops("runtime") + "   # rescue is late: is a leader running maintenance? "
                "Once it runs, these attempts are retried, not lost")
    if cls == STALE:
        return (f"wait for rescue (it retries them; the job is not lost), then {recheck}; "
                "if the handlers still run, check the runtime named in the evidence: "
                + ops("runtime"))
    return f"wait for rescue (it retries them; the job is not lost), then {recheck}"
