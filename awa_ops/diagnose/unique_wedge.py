"""unique-wedge: the guide's query for a running job whose unique key another job holds.

Rescue of such a job collides on idx_awa_jobs_unique.  The holder decides the
safe remedy: cancel the stuck job; delete a claim row only when its recorded
holder provably no longer exists (deleting a live holder's claim admits a
duplicate).
"""

from __future__ import annotations

from typing import Any

from awa import config
from awa_ops.diagnose._text import awa, plural, psql
from awa_ops.findings import Finding, Severity, plain, runbook
from awa_ops.session import OpsSession
from awa_ops.storage import render, storage_engine

NAME = "unique-wedge"
RUNBOOK = runbook("unique-wedge")
TERMINAL = {"completed", "failed", "cancelled"}

# The guide's query verbatim, filtered by queue and capped; whether a holder sits
# in the DLQ comes from the engine's unique-claim holder lookup.
WEDGE = f"""
WITH seed AS ({render("unique_wedge", as_subquery=True)})
SELECT s.*
FROM seed s
WHERE (%(queue)s::text IS NULL OR s.queue = %(queue)s)
LIMIT %(limit)s
"""


async def _wedged(session: OpsSession, options) -> list[dict[str, Any]]:
    engine = await storage_engine(session)
    async with session.read() as cur:
        await cur.execute(WEDGE, {"queue": options.queue, "limit": config.OPS_EVIDENCE_LIMIT * 20})
        rows = await cur.fetchall()
        holders = await engine.unique_claim_holders(
            session.conn, list({bytes(r["unique_key"]) for r in rows}))
    in_dlq = {(h.unique_key, h.job_id) for h in holders if h.in_dlq}
    for row in rows:
        row["holder_in_dlq"] = (bytes(row["unique_key"]), row["claim_holder"]) in in_dlq
    return rows


async def check(session, engine, options) -> list[Finding]:
    rows = await _wedged(session, options)
    if not rows:
        return [Finding(Severity.OK, "no running job is wedged behind another job's unique claim",
                        runbook=RUNBOOK)]
    findings = []
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
            f"job {row['claim_holder']} holds its unique key; holder {holder}",
            "rescue of this job collides on idx_awa_jobs_unique every tick (\"duplicate key value "
            "violates unique constraint\"); a unique_states mask without running let a newer "
            "duplicate take the key",
            "; then ".join(steps), [{**row, "holder": holder}], RUNBOOK))
    if len(rows) > options.evidence_limit:
        findings.append(Finding(Severity.CRITICAL,
                                f"{plural(len(rows) - options.evidence_limit, 'more wedged job')} "
                                f"not shown", runbook=RUNBOOK))
    return findings
