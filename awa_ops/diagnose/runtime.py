"""runtime: live instances, exactly one healthy leader, the flags the guide names.

"If heartbeat_alive or maintenance_alive is false for the active runtime,
fix that before manually changing job state."
"""

from __future__ import annotations

from awa_ops.diagnose._text import ops, plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.runtimes import Runtime, load_runtimes

NAME = "runtime"
RUNBOOK = runbook("runtime")


async def check(session, engine, options) -> list[Finding]:
    runtimes = await load_runtimes(session, options.heartbeat_staleness_s)
    return assess(runtimes, options)


def assess(runtimes: list[Runtime], options) -> list[Finding]:
    findings: list[Finding] = []
    live = [r for r in runtimes if r.live]
    if not runtimes:
        return [Finding(Severity.CRITICAL, "no runtime has ever reported to this database",
                        "nothing claims jobs, and no leader runs rescue, promotion or cleanup",
                        "start a worker (awa worker module:client) and confirm it logs that it "
                        "started",
                        runbook=RUNBOOK)]
    if not live:
        newest = min(runtimes, key=lambda r: r.age_s)
        return [Finding(Severity.CRITICAL,
                        f"no live runtime: the most recent, {newest.label()}, was last seen "
                        f"{secs(newest.age_s)} ago",
                        "last_seen_at is stale for every runtime instance: no worker is claiming "
                        "jobs and no leader runs maintenance (escalate per the guide)",
                        "check the worker processes and Postgres connectivity from their hosts",
                        [r.evidence() for r in runtimes[:options.evidence_limit]], RUNBOOK)]

    leaders = [r for r in live if r.leader]
    if not leaders:
        findings.append(_leaderless(runtimes, live, options))
    elif len(leaders) > 1:
        findings.append(Finding(
            Severity.CRITICAL, f"{len(leaders)} live runtimes report leader = true",
            "maintenance must run on exactly one instance; two leaders means a stale flag or "
            "a broken advisory lock",
            ops("runtime") + " --watch 10",
            [r.evidence() for r in leaders], RUNBOOK))
    else:
        leader = leaders[0]
        if not leader.row["maintenance_alive"]:
            findings.append(Finding(
                Severity.CRITICAL, f"leader {leader.label()} reports maintenance_alive = false",
                "rotation, rescue, promotion and cleanup are leader-owned: nothing rescues stale "
                "jobs or promotes scheduled ones while maintenance is down",
                f"restart the worker process {leader.label()}",
                [leader.evidence()], RUNBOOK))

    for r in live:
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

    gone = [r for r in runtimes if r.recently_gone and not r.row["shutting_down"]]
    if gone:
        findings.append(Finding(
            Severity.WARNING,
            f"{plural(len(gone), 'runtime')} stopped reporting without shutting down "
            f"(last seen {secs(min(r.age_s for r in gone))} ago)",
            "a worker that vanishes without shutdown (crash, OOM kill, SIGKILL) leaves its "
            "running jobs to heartbeat rescue",
            ops("stuck-running"), [r.evidence() for r in gone], RUNBOOK))

    if not any(f.severity > Severity.OK for f in findings):
        leader = leaders[0]
        findings.append(Finding(
            Severity.OK, f"{plural(len(live), 'live runtime')}; leader {leader.label()} with "
                         f"maintenance alive",
            evidence=[r.evidence() for r in live[:options.evidence_limit]], runbook=RUNBOOK))
    return findings


def _leaderless(runtimes: list[Runtime], live: list[Runtime], options) -> Finding:
    former = [r for r in runtimes if r.leader and not r.live]
    if former:
        since = min(r.age_s for r in former)
        origin = f"since the last leader {min(former, key=lambda r: r.age_s).label()} went silent"
    else:
        since = max(float(r.row["uptime_s"]) for r in live)
        origin = "since the oldest live runtime started"
    # The leader flag is published with the snapshot, so allow one snapshot on top.
    allowed = options.election_interval_s + max(r.window_s for r in live) / 3
    evidence = [r.evidence() for r in live[:options.evidence_limit]]
    if since > allowed:
        return Finding(
            Severity.CRITICAL,
            f"no live runtime is leader for {secs(since)} ({origin}); election retries every "
            f"{secs(options.election_interval_s)}",
            "without a leader nothing rescues stale or overdue jobs, promotes scheduled jobs, "
            "or cleans up; running jobs accumulate",
            "verify Postgres connectivity from the workers and that the pool is not exhausted; "
            "see who holds the leader lock: " +
            "psql \"$DATABASE_URL\" -c \"SELECT l.pid, a.application_name, a.client_addr, "
            "a.state FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted\"",
            evidence, RUNBOOK)
    return Finding(
        Severity.WARNING,
        f"no leader yet ({secs(since)}, {origin}); within the election interval",
        "a short leader-less window after a restart is normal failover",
        ops("runtime") + " --watch 5", evidence, RUNBOOK)
