"""unique-wedge: the guide's query for a running job whose unique key another job holds.

Such a supersession is normal while the old attempt still runs (a unique
mask without ``running`` admits a newer enqueue); it is a wedge only with
evidence that rescue is failing: the old attempt's heartbeat is older than
the staleness cutoff plus two rescue intervals, so rescue should have moved
it twice over and has not (on affected builds it collides on
idx_awa_jobs_unique every tick).  Otherwise it is reported as information.  The holder decides the
safe remedy: cancel the stuck job; delete a claim row only when its recorded
holder provably no longer exists (deleting a live holder's claim admits a
duplicate).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from awa import config
from awa_ops.diagnose._text import awa, plural, psql, secs
from awa_ops.findings import Finding, Severity, plain, runbook
from awa_ops.session import OpsSession
from awa_ops.storage import storage_engine

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.storage import DetectedEngine


NAME = "unique-wedge"
RUNBOOK = runbook("unique-wedge")
TERMINAL = {"completed", "failed", "cancelled"}

async def superseded(session: OpsSession, queue: str | None,
                     limit: int) -> list[dict[str, Any]]:
    """Running attempts whose unique key another job holds (the guide's query, as each
    engine keeps its rows: ``superseded_attempts``), with each attempt's heartbeat age, run
    time and claiming runtime and whether its holder sits in the DLQ; run inside a read
    transaction."""
    engine = await storage_engine(session)
    rows = [asdict(a) for a in await engine.superseded_attempts(session.conn, queue=queue,
                                                                limit=limit)]
    if not rows:
        return []
    holders = await engine.unique_claim_holders(
        session.conn, list({bytes(r["unique_key"]) for r in rows}))
    attempts = {a.id: a for a in await engine.running_attempts(
        session.conn, job_ids=[r["stuck_job"] for r in rows], limit=max(len(rows), 1))}
    for row in rows:
        a = attempts.get(row["stuck_job"])
        row["heartbeat_age_s"] = None if a is None or a.heartbeat_age_s is None else round(
            a.heartbeat_age_s, 1)
        row["running_for_s"] = None if a is None or a.running_for_s is None else round(
            a.running_for_s, 1)
        row["claimed_by"] = None if a is None else a.claimed_by
    in_dlq = {(h.unique_key, h.job_id) for h in holders if h.in_dlq}
    for row in rows:
        row["holder_in_dlq"] = (bytes(row["unique_key"]), row["claim_holder"]) in in_dlq
    return rows


async def _wedged(session: OpsSession, options: Options) -> list[dict[str, Any]]:
    async with session.read():
        return await superseded(session, options.queue, config.OPS_EVIDENCE_LIMIT * 20)


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    rows = await _wedged(session, options)
    if not rows:
        return [Finding(Severity.OK, "no running job is wedged behind another job's unique claim",
                        runbook=RUNBOOK)]
    findings = []
    # Rescue should have moved a stale attempt twice over by now.
    overdue = options.staleness_s + 2 * options.rescue_interval_s
    stuck = [r for r in rows if r["heartbeat_age_s"] is not None and r["heartbeat_age_s"] > overdue]
    transient = [r for r in rows if r not in stuck]
    if transient:
        first = transient[0]
        findings.append(Finding(
            Severity.OK,
            f"{plural(len(transient), 'running job')} superseded: a newer job holds "
            f"{'its' if len(transient) == 1 else 'their'} unique key (e.g. running job "
            f"{first['stuck_job']}, held by job {first['claim_holder']}); transient while "
            f"the old attempt runs (heartbeat "
            f"{'?' if first['heartbeat_age_s'] is None else secs(first['heartbeat_age_s'])} old)",
            "a unique mask without running admits a newer enqueue during execution; the old "
            "attempt ends in a fallback cancellation, the newer holder wins",
            evidence=transient[:options.evidence_limit], runbook=RUNBOOK))
    rows = stuck
    if not rows:
        return findings
    for row in rows[:options.evidence_limit]:
        state = row["holder_state"]
        if state is None:
            holder = "gone" + (" (moved to the DLQ)" if row["holder_in_dlq"] else "")
        elif str(state) in TERMINAL:
            holder = f"terminal ({state})"
        else:
            holder = f"live ({state})"
        key = plain(row["unique_key"])
        steps = ["cancel the stuck job: " + awa(f"job cancel {row['stuck_job']}")]
        if state is None:
            steps.append("its claim holder no longer exists, so the claim row is safe to delete: "
                         + psql("DELETE FROM awa.job_unique_claims "
                                f"WHERE unique_key = '{key}'::bytea "
                                f"AND job_id = {row['claim_holder']} AND NOT EXISTS (SELECT 1 FROM "
                                f"awa.jobs WHERE id = {row['claim_holder']})"))
        else:
            steps.append(f"do NOT delete the claim: holder {row['claim_holder']} exists ({state})")
        findings.append(Finding(
            Severity.CRITICAL,
            f"running job {row['stuck_job']} ({row['kind']}, queue {row['queue']}) is wedged: "
            f"job {row['claim_holder']} holds its unique key; holder {holder}; heartbeat "
            f"{secs(row['heartbeat_age_s'])} old, past two rescue intervals",
            "rescue of this job collides on idx_awa_jobs_unique every tick (\"duplicate key value "
            "violates unique constraint\"); a unique_states mask without running let a newer "
            "duplicate take the key",
            "; then ".join(steps), [{**row, "holder": holder}], RUNBOOK))
    if len(rows) > options.evidence_limit:
        findings.append(Finding(Severity.CRITICAL,
                                f"{plural(len(rows) - options.evidence_limit, 'more wedged job')} "
                                f"not shown", runbook=RUNBOOK))
    return findings
