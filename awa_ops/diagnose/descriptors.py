"""descriptors: stale (no live runtime touched them within the snapshot window)
and drifted (live runtimes report different hashes for the same key)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from awa.known_queues import DESCRIPTOR_QUEUE, has_waiting
from awa_ops.diagnose._text import ops, plural, psql, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.runtimes import load_runtimes
from awa_ops.storage import column_exists, storage_engine

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "descriptors"
RUNBOOK = runbook("descriptors")

# The Rust core's layout splits runtime_instances.descriptor_hashes in two
# columns; ours (the engine's read side) keeps one.
HASHES_SPLIT = """
SELECT instance_id, jsonb_build_object('queues', queue_descriptor_hashes,
                                       'kinds', job_kind_descriptor_hashes) AS descriptor_hashes
FROM awa.runtime_instances
"""


def split_hashes(value: Any) -> dict[tuple[str, str], str]:
    """(type, key) -> hash from a runtime's descriptor_hashes, in any shape runtimes write."""
    out: dict[tuple[str, str], str] = {}
    if not isinstance(value, dict):
        return out
    for group, type_ in (("queues", "queue"), ("queue", "queue"), ("kinds", "kind"),
                         ("kind", "kind"), ("job_kinds", "kind")):
        inner = value.get(group)
        if isinstance(inner, dict):
            out.update({(type_, str(k)): str(v) for k, v in inner.items()})
    for key, hash_ in value.items():
        if isinstance(hash_, str) and ":" in key:
            type_, _, name = key.partition(":")
            out[("kind" if type_ in ("kind", "job_kind") else "queue", name)] = hash_
    return out


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    runtimes = await load_runtimes(session, options.heartbeat_staleness_s)
    live = [r for r in runtimes if r.live]
    window = max((r.window_s for r in live), default=None)
    combined = await column_exists(session, "awa", "runtime_instances", "descriptor_hashes")
    reads = await storage_engine(session)
    async with session.read() as cur:
        descriptors = [asdict(d) for d in await reads.descriptors(session.conn)]
        waiting = {d.queue for d in await reads.queue_depths(session.conn, cap=1)
                   if has_waiting(d.depth)}
        if combined:
            hashes = [asdict(h) for h in await reads.runtime_descriptor_hashes(session.conn)]
        else:
            await cur.execute(HASHES_SPLIT)
            hashes = await cur.fetchall()
    live_ids = {r.instance_id for r in live}
    reported: dict[tuple[str, str], dict[str, list[str]]] = {}
    for row in hashes:
        if str(row["instance_id"]) not in live_ids:
            continue
        for key, hash_ in split_hashes(row["descriptor_hashes"]).items():
            reported.setdefault(key, {}).setdefault(hash_, []).append(str(row["instance_id"])[:8])

    findings: list[Finding] = []
    limit = options.evidence_limit
    if window is None:
        stale = descriptors
    else:
        stale = [d for d in descriptors if d["age_s"] > window]
    # A queue whose jobs wait is not retired, whatever its descriptor's age: it is stranded,
    # and `diagnose runtime` names it (forgetting its descriptor would be the wrong advice).
    stale = [d for d in stale if not (d["type"] == DESCRIPTOR_QUEUE and d["key"] in waiting)]
    if stale:
        findings.append(Finding(
            Severity.WARNING,
            f"{plural(len(stale), 'stale descriptor')} ("
            + ", ".join(f"{d['type']} {d['key']}" for d in stale[:5])
            + ("..." if len(stale) > 5 else "") + ")"
            + (": no live runtime" if window is None else
               f": not refreshed by a live runtime within {secs(window)}"),
            "the code that declared them was retired, or no worker declaring them is running "
            "(a queue that still holds waiting jobs is not retired: `awa-ops diagnose runtime` "
            "names it)",
            _retire_step(stale), stale[:limit], RUNBOOK))
    drifted = {k: v for k, v in reported.items() if len(v) > 1}
    if drifted:
        findings.append(Finding(
            Severity.WARNING,
            f"{plural(len(drifted), 'descriptor')} drifted: live runtimes report different hashes ("
            + ", ".join(f"{t} {k}" for t, k in list(drifted)[:5]) + ")",
            "normal during a rolling deploy; if it persists two revisions of the worker code "
            "declare it differently",
            "reconcile the declaring code and redeploy; it clears when the old revision drains",
            [{"type": t, "key": k, "hashes": v} for (t, k), v in list(drifted.items())[:limit]],
            RUNBOOK))
    if not findings:
        findings.append(Finding(
            Severity.OK, f"{plural(len(descriptors), 'descriptor')}, all fresh and consistent "
                         f"across {plural(len(live), 'live runtime')}",
            evidence=descriptors[:limit], runbook=RUNBOOK))
    return findings


# Where each descriptor type is stored, and its key column.
DESCRIPTOR_TABLES = {"queue": ("awa.queue_descriptors", "queue"),
                     "kind": ("awa.job_kind_descriptors", "kind")}


def _retire_step(stale: list[dict[str, Any]]) -> str:
    """If the code was retired on purpose: the statements that forget exactly these
    descriptors, by name; if workers should run: the runtime check."""
    statements = []
    for type_, (table, column) in DESCRIPTOR_TABLES.items():
        keys = sorted(str(d["key"]) for d in stale if d["type"] == type_)
        if keys:
            names = ", ".join("'" + k.replace("'", "''") + "'" for k in keys)
            statements.append(psql(f"DELETE FROM {table} WHERE {column} IN ({names})"))
    return ("if workers should run: " + ops("runtime") + "; if the code was retired: "
            + " ; ".join(statements))
