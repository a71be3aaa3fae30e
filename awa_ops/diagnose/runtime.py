"""runtime: live instances, exactly one healthy leader, the flags the guide names.

"If heartbeat_alive or maintenance_alive is false for the active runtime,
fix that before manually changing job state."

Liveness is each runtime's own: live while its last snapshot is within 2 of
its ``snapshot_interval_ms``.  Leadership is read from the flags the runtimes
publish, newest first (the leader lock is exclusive, so a newer snapshot
saying "leader" makes an older one stale), and from whether anyone holds the
leader's advisory lock right now, so a failover reads as one: the former
leader silent, the leaderless window, then the new leader by name.  A runtime
that is shutting down is draining, not unhealthy.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from awa import config
from awa.known_queues import WAITING_STATES, has_waiting, unserved_queues
from awa.storage.engine import QueueDepth
from awa_ops.diagnose._text import awa, db_ref, ops, plural, secs, shell_quote
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.runtimes import LeaderLock, Runtime, leader_lock, load_runtimes
from awa_ops.storage import kept_for_older_releases, storage_engine

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "runtime"
RUNBOOK = runbook("runtime")


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    runtimes = await load_runtimes(session, options.heartbeat_staleness_s)
    # The leader's lock lives in the primary's pg_locks: on a standby it is asked of
    # --primary-url, or left unknown (the runtime rows are replicated, the locks are not).
    from awa_ops.diagnose import primary_or_none
    lock_source = await primary_or_none(session, options) if runtimes else None
    lock = await leader_lock(lock_source) if lock_source is not None else (
        LeaderLock(False) if not runtimes else None)
    reads = await storage_engine(session)
    async with session.read():
        depths = await reads.queue_depths(session.conn, cap=config.OPS_WAITING_COUNT_CAP)
    waiting = [d for d in depths if has_waiting(d.depth)]
    return assess(runtimes, options, lock, waiting, await kept_for_older_releases(session))


def assess(runtimes: list[Runtime], options: Options,
           lock: LeaderLock | None = None, waiting: list[QueueDepth] | None = None,
           kept_for_older: int = 0) -> list[Finding]:
    """``lock``: who holds the leader lock (None: not known, e.g. on a standby);
    ``waiting``: the queues holding jobs that need a worker; ``kept_for_older``: objects
    the layout still keeps for older releases (the contract step's work)."""
    findings: list[Finding] = _unserved(runtimes, waiting or [], options)
    if findings and not any(r.live for r in runtimes):
        findings = []  # "no live runtime at all" below says it for every queue
    live = [r for r in runtimes if r.live]
    active = [r for r in live if not r.draining]
    draining = [r for r in live if r.draining]
    limit = options.evidence_limit
    if not runtimes:
        return [Finding(Severity.CRITICAL, "no runtime has ever reported to this database",
                        "nothing claims jobs, and no leader runs rescue, promotion or cleanup",
                        "start a worker (awa worker module:client) and confirm it logs that it "
                        "started",
                        runbook=RUNBOOK)]
    if not active:
        newest = min(runtimes, key=lambda r: r.age_s)
        if draining:
            summary = (f"no live runtime claims work: {plural(len(draining), 'runtime')} "
                       f"draining (shutting down), e.g. {draining[0].label()}")
        else:
            summary = (f"no live runtime: the most recent, {newest.label()}, was last seen "
                       f"{secs(newest.age_s)} ago")
        stranded = sorted(d.queue for d in waiting or [])
        return [Finding(Severity.CRITICAL, summary
                        + (f"; jobs wait in {plural(len(stranded), 'queue')}: "
                           + ", ".join(stranded[:5]) if stranded else ""),
                        "last_seen_at is stale for every runtime instance: no worker is claiming "
                        "jobs and no leader runs maintenance (escalate per the guide)",
                        "check the worker processes and Postgres connectivity from their hosts",
                        [r.evidence() for r in runtimes[:limit]], RUNBOOK)]

    # Leader flags, newest snapshot first: a newer "leader" makes every older one stale.
    claimants = sorted((r for r in runtimes if r.leader), key=lambda r: r.age_s)
    current = [r for r in claimants if r.live and not r.draining and not r.snapshot_overdue]
    leader = current[0] if current else None
    # The lock holder, when it names its runtime (awa-leader <instance id>), is the leader
    # now, whatever the snapshots say yet: its own flag arrives with its next snapshot.
    holder = next((r for r in runtimes if lock is not None and lock.held and lock.instance_id
                   and r.instance_id.lower() == lock.instance_id.lower()), None)
    by_lock = holder is not None and holder is not leader
    if by_lock:
        leader = holder
    former = [r for r in claimants if r is not leader]
    if leader is None:
        findings.append(_leaderless(runtimes, active, former, options, lock))
    elif by_lock and holder is not None:
        findings.append(Finding(
            Severity.OK,
            f"leader {holder.label()} holds the leader lock "
            f"(backend pid {lock.pid if lock else '?'}); its snapshot reports it at the next "
            "interval"
            + (f"; the former leader {former[0].label()} is {former[0].status}" if former
               else ""),
            "the lock connection names its runtime (application_name awa-leader <instance "
            "id>); the leader flag is published with the runtime's next snapshot",
            ops("runtime") + " --watch 5", [holder.evidence(), *(r.evidence() for r in
                                                               former[:limit])], RUNBOOK))
    else:
        if former:
            findings.append(_failover(leader, former, options))
        if not leader.row["maintenance_alive"]:
            findings.append(Finding(
                Severity.CRITICAL, f"leader {leader.label()} reports maintenance_alive = false",
                "rotation, rescue, promotion and cleanup are leader-owned: nothing rescues stale "
                "jobs or promotes scheduled ones while maintenance is down",
                f"restart the worker process {leader.label()}",
                [leader.evidence()], RUNBOOK))

    for r in active:
        if not r.row["heartbeat_alive"]:
            findings.append(Finding(
                Severity.CRITICAL, f"runtime {r.label()} reports heartbeat_alive = false",
                "its running jobs stop heartbeating and will be rescued as stale although their "
                "handlers may still run; fix this before changing job state by hand",
                f"restart the worker process {r.label()}", [r.evidence()], RUNBOOK))
        bad = [flag for flag in ("healthy", "postgres_connected", "poll_loop_alive")
               if not r.row[flag]]
        if bad:
            findings.append(Finding(
                Severity.WARNING,
                f"runtime {r.label()} reports {', '.join(f + ' = false' for f in bad)}",
                "an unhealthy runtime claims less or nothing; its queues back up",
                "check its logs and Postgres connectivity; restart it if it does not recover",
                [r.evidence()], RUNBOOK))

    # Only the runtimes that stopped within the window are news: older rows are history
    # (the leader prunes rows unseen for runtime_retention_hours), never a growing count.
    gone = [r for r in runtimes if r.recently_gone and not r.draining]
    if gone:
        history = sum(1 for r in runtimes if not r.live and not r.recently_gone)
        findings.append(Finding(
            Severity.WARNING,
            f"{plural(len(gone), 'runtime')} stopped reporting in the last "
            f"{secs(config.OPS_RUNTIME_GONE_S)} without shutting down: "
            + ", ".join(f"{r.label()} last seen {secs(r.age_s)} ago" for r in gone[:3])
            + (f" (+{history} gone before, not counted)" if history else ""),
            "a worker that vanishes without shutdown (crash, OOM kill, SIGKILL) leaves its "
            "running jobs to heartbeat rescue",
            ops("stuck-running"), [r.evidence() for r in gone[:limit]], RUNBOOK))

    # A rolling upgrade in progress: live runtimes of more than one release or layout.
    speaking = Counter(r.speaks for r in live)
    if len(speaking) > 1:
        findings.append(Finding(
            Severity.OK,
            "mixed fleet (a rolling upgrade): " + ", ".join(
                f"{plural(n, 'runtime')} on {what}" for what, n in sorted(speaking.items())),
            "each release keeps working on the newest layout (expand, then contract); the "
            "contract step waits until no live runtime speaks an older layout",
            awa("migrate --contract") + "  # once the older runtimes are gone; refused before",
            [r.evidence() for r in live[:limit]], RUNBOOK))
    elif kept_for_older and speaking:
        # The roll is over (one release, one layout) but the expand step's leftovers remain.
        findings.append(Finding(
            Severity.OK,
            f"contract step pending: {plural(kept_for_older, 'object')} kept for older "
            f"releases' runtimes, and every live runtime speaks {next(iter(speaking))}",
            "nothing needs them unless a runtime of an older release starts again (a "
            "rollback); the contract step drops them, and refuses while an older runtime is "
            "live",
            awa("migrate --contract"), runbook=RUNBOOK))

    # (No leader row yet but the lock held: _leaderless already said OK, with its reason.)
    if leader is not None and not by_lock and not any(f.severity > Severity.OK for f in findings):
        more = (f"; {plural(len(draining), 'runtime')} draining (shutting down)"
                if draining else "")
        findings.append(Finding(
            Severity.OK, f"{plural(len(active), 'live runtime')}; leader {leader.label()} with "
                         f"maintenance alive{more}",
            evidence=[r.evidence() for r in live[:limit]], runbook=RUNBOOK))
    return findings


def _unserved(runtimes: list[Runtime], waiting: list[QueueDepth],
              options: Options) -> list[Finding]:
    """A queue with waiting jobs that no live runtime serves (awa.known_queues'
    ``unserved_queues``, the rule of ``awa health`` and the exporter): nothing will claim
    its jobs, however healthy the rest of the fleet is."""
    serving = [r.queues for r in runtimes if r.live and not r.draining]
    stranded = set(unserved_queues((d.queue for d in waiting), serving))
    findings = []
    for d in sorted((d for d in waiting if d.queue in stranded), key=lambda d: d.queue):
        last = min((r for r in runtimes if r.serves(d.queue) and r.queues), default=None,
                   key=lambda r: r.age_s)
        count = sum(d.count(s) for s in WAITING_STATES)
        capped = "+" if d.capped & set(WAITING_STATES) else ""
        findings.append(Finding(
            Severity.CRITICAL,
            f"queue {d.queue}: {plural(count, 'job')}{capped} waiting"
            + (f" (oldest {secs(d.lag_s)})" if d.lag_s is not None else "")
            + " and no live runtime serves it"
            + (f"; it was last served by {last.label()}, {last.status} "
               f"{secs(last.age_s)} ago" if last is not None else ""),
            "nothing will claim these jobs until a worker for this queue starts; the rest of "
            "the fleet may look healthy",
            f"start a worker that serves the queue (awa worker MODULE:CLIENT --queue "
            f"{shell_quote(d.queue + ':N')} --database-url {db_ref()}); then "
            + ops("runtime"),
            [{"queue": d.queue, **{s: d.count(s) for s in WAITING_STATES}, "lag_s": d.lag_s,
              "last_served_by": last.label() if last else None}]
            + [r.evidence() for r in runtimes if r.serves(d.queue)][:options.evidence_limit - 1],
            RUNBOOK))
    return findings


def _failover(leader: Runtime, former: list[Runtime], options: Options) -> Finding:
    """A new leader reports while an older snapshot still says another runtime led.

    Once the former leader is gone (or stopped), the failover is over: an OK finding that
    names both and stays the same from run to run (no figure that keeps growing).  While
    the former one still reports, two snapshots claim leadership: a warning.
    """
    last = former[0]
    evidence = [leader.evidence(), *(r.evidence() for r in former[:options.evidence_limit])]
    if not last.live:
        return Finding(
            Severity.OK,
            f"leader failover completed: {leader.label()} leads; the former leader "
            f"{last.label()} is {last.status}",
            "the former leader's flag is from its last snapshot; the leader lock is exclusive",
            ops("stuck-running") + "  # the former leader's running jobs await rescue",
            evidence, RUNBOOK)
    state = "draining" if last.draining else "silent" if last.snapshot_overdue else \
        "still reporting"
    return Finding(
        Severity.WARNING,
        f"leader failover: {leader.label()} is the leader now; the former leader "
        f"{last.label()} is {state} (last seen {secs(max(last.age_s, 0.0))} ago)",
        "the former leader's flag is from an older snapshot; the leader lock is exclusive, "
        "so the newest snapshot saying leader wins",
        ops("runtime") + " --watch 5", evidence, RUNBOOK)


def _leaderless(runtimes: list[Runtime], live: list[Runtime], former: list[Runtime],
                options: Options, lock: LeaderLock | None) -> Finding:
    lock_held = None if lock is None else lock.held
    if former:
        last = former[0]
        since = last.age_s
        origin = (f"since the last leader {last.label()} went silent "
                  f"({'gone' if not last.live else 'snapshot overdue'})")
    else:
        since = max(float(r.row["uptime_s"] or 0) for r in live)
        origin = "since the oldest live runtime started"
    # The leader flag is published with the snapshot, so allow one snapshot on top.
    allowed = options.election_interval_s + max(r.interval_s for r in live)
    evidence = [r.evidence() for r in [*former[:1], *live][:options.evidence_limit]]
    if lock_held and former:
        return Finding(
            Severity.WARNING,
            f"leader failover in progress: no live runtime reports leader for {secs(since)} "
            f"({origin}); the leader lock is held again, so a new leader reports at its next "
            f"snapshot",
            "a short leaderless window after a leader dies is normal failover",
            ops("runtime") + " --watch 5", evidence, RUNBOOK)
    if lock is not None and lock.held and lock.instance_id:
        held_by = (f"; the leader lock is held by runtime {lock.instance_id[:8]} "
                   f"({lock.holder()}), which has not registered yet")
    elif lock is not None and lock.held:
        held_by = (f"; the leader lock is held by {lock.holder()}, which does not name its "
                   "runtime (which runtime leads is not known until a snapshot says so)")
    else:
        held_by = "" if lock_held is None else "; the leader lock is free"
    if since > allowed:
        return Finding(
            Severity.CRITICAL,
            f"no live runtime is leader for {secs(since)} ({origin}){held_by}; election retries "
            f"every {secs(options.election_interval_s)}",
            "without a leader nothing rescues stale or overdue jobs, promotes scheduled jobs, "
            "or cleans up; running jobs accumulate",
            "verify Postgres connectivity from the workers and that the pool is not exhausted; "
            "see who holds the leader lock: " +
            f"psql {db_ref()} -c \"SELECT l.pid, a.application_name, a.client_addr, "
            "a.state FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted\"",
            evidence, RUNBOOK)
    # Within the window with the lock held: a leader exists and reports at its next
    # snapshot (a fleet that just started); only a free lock is worth a warning yet.
    return Finding(
        Severity.OK if lock_held else Severity.WARNING,
        f"leaderless window: no leader for {secs(since)} ({origin}){held_by}; within the "
        f"election interval and one snapshot",
        "a short leader-less window after a restart or a leader's death is normal failover",
        ops("runtime") + " --watch 5", evidence, RUNBOOK)
