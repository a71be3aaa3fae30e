"""dead-tuples: the guide's table-churn query over the active engine's queue tables.

Each table's dead tuples are compared with its own autovacuum trigger
(autovacuum_vacuum_threshold + scale_factor x reltuples, per-table reloptions
first).  Dead rows above the trigger that a recent vacuum could not remove,
or that pile up while something pins the xmin horizon, point at
mvcc-horizon; dead rows no vacuum has visited for long point at autovacuum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa import config
from awa_ops.diagnose import mvcc_horizon
from awa_ops.diagnose._text import ops, plural, psql, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.storage import literal, render

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "dead-tuples"
RUNBOOK = runbook("dead-tuples")
# On a hot standby this check runs on --primary-url, or names the command for the primary.
NEEDS_PRIMARY = "table statistics and vacuum history"

# Wraps the churn query (kept verbatim in sql/) with each table's trigger inputs.
# The schema is bound as a quoted literal: the seed text carries LIKE '..%' patterns.
WITH_THRESHOLDS = """
WITH churn AS ({churn})
SELECT t.*, greatest(c.reltuples, 0)::float8 AS reltuples, c.reloptions,
       EXTRACT(EPOCH FROM (now() - greatest(t.last_vacuum, t.last_autovacuum)))::float8
           AS since_vacuum_s,
       current_setting('autovacuum_vacuum_threshold')::float8 AS base_threshold,
       current_setting('autovacuum_vacuum_scale_factor')::float8 AS base_scale_factor,
       current_setting('autovacuum')::bool AS autovacuum_on
FROM churn t
JOIN pg_class c ON c.oid = to_regclass(quote_ident({schema}) || '.' || quote_ident(t.relname))
ORDER BY t.n_dead_tup DESC, t.relname
"""


# Queue storage: the guide's churn columns for EVERY table and partition of the
# active schema (the guide's name patterns miss lease_claims_*, the claimer and
# ring state tables that bloat most under a pinned horizon).
QUEUE_STORAGE_CHURN = """
SELECT relname, n_live_tup, n_dead_tup, vacuum_count, autovacuum_count, last_vacuum,
       last_autovacuum
FROM pg_stat_user_tables
WHERE schemaname = '<schema>'
ORDER BY n_dead_tup DESC, relname
"""


# The tables the troubleshooting guide's churn query names: shown first.
GUIDE_TABLES = ("attempt_state", "deferred_jobs", "dlq_entries")
GUIDE_PREFIXES = ("ready_segments_", "ready_entries", "ready_tombstones", "done_entries",
                  "queue_terminal_count_deltas", "leases", "lease_claims")


def guide_table(relname: str) -> bool:
    return relname in GUIDE_TABLES or relname.startswith(GUIDE_PREFIXES)


def churn_query(engine: DetectedEngine) -> str:
    if engine.is_queue_storage:
        churn = QUEUE_STORAGE_CHURN.replace("'<schema>'", literal(engine.schema)).strip()
    else:
        churn = render("table_churn_canonical", literals={"schema": engine.schema},
                       as_subquery=True)
    return WITH_THRESHOLDS.format(churn=churn, schema=literal(engine.schema))


def _reloption(options: list[str] | None, key: str) -> str | None:
    for item in options or []:
        name, _, value = item.partition("=")
        if name == key:
            return value
    return None


def trigger(row: dict[str, Any]) -> float:
    """Dead tuples at which autovacuum visits this table."""
    base = _reloption(row["reloptions"], "autovacuum_vacuum_threshold")
    scale = _reloption(row["reloptions"], "autovacuum_vacuum_scale_factor")
    return (float(base) if base else float(row["base_threshold"])) + \
        (float(scale) if scale else float(row["base_scale_factor"])) * float(row["reltuples"])


def autovacuum_enabled(row: dict[str, Any]) -> bool:
    own = _reloption(row["reloptions"], "autovacuum_enabled")
    return row["autovacuum_on"] and (own is None or own.lower() in ("true", "on", "1"))


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    tables = await session.fetch_all(churn_query(engine))
    pinning = [f for f in mvcc_horizon.holders(await mvcc_horizon.gather(session), options)
               if f.severity > Severity.OK]
    return assess(tables, pinning, options, engine.schema)


def assess(tables: list[dict[str, Any]], pinning: list[Finding],
           options: Options, schema: str = "awa") -> list[Finding]:
    """Dead tuples worth an operator's time, past the table's own autovacuum trigger:
    while a holder pins the xmin horizon right now (vacuum cannot reclaim them: the holder
    is named), or, with nothing pinning, at least ``OPS_DEAD_TUPLES_MIN`` that autovacuum
    is not reclaiming (a small, busy table -- the runtime registry, a ring's state --
    collects a few hundred dead rows between two vacuums, which costs nothing)."""
    findings: list[Finding] = []
    for t in tables:
        limit = trigger(t)
        dead, live = int(t["n_dead_tup"]), int(t["n_live_tup"])
        t["autovacuum_trigger"] = round(limit)
        t["dead_ratio"] = round(dead / max(live, 1), 3)
        if dead <= limit:
            continue
        since = t["since_vacuum_s"]
        vacuumed_recently = since is not None and since <= config.OPS_VACUUM_RECENT_S
        evidence = [t]
        if pinning:
            holder = pinning[0].summary
            findings.append(Finding(
                Severity.WARNING,
                f"{t['relname']}: {dead} dead tuples (autovacuum trigger {round(limit)}, "
                f"dead/live {t['dead_ratio']}) "
                + (f"although it was vacuumed {secs(since)} ago" if vacuumed_recently else
                   "while the xmin horizon is pinned"),
                "vacuum runs but cannot reclaim rows a pinned MVCC horizon still needs; the queue "
                f"tables bloat and dispatch slows. Oldest holder: {holder}",
                ops("mvcc-horizon"), evidence, RUNBOOK))
        elif dead < config.OPS_DEAD_TUPLES_MIN:
            continue
        elif not autovacuum_enabled(t):
            findings.append(Finding(
                Severity.WARNING, f"{t['relname']}: {dead} dead tuples and autovacuum is disabled "
                                  f"for it", "nothing will reclaim them; the table bloats",
                # turning autovacuum back on is the fix (a bare VACUUM reclaims them once and
                # the table bloats again); the VACUUM catches up now
                (psql(f"ALTER TABLE {schema}.{t['relname']} RESET (autovacuum_enabled)")
                 if t["autovacuum_on"] else
                 psql("ALTER SYSTEM SET autovacuum = on") + "; " + psql("SELECT pg_reload_conf()"))
                + "; then " + psql(f"VACUUM (VERBOSE) {schema}.{t['relname']}"),
                evidence, RUNBOOK))
        elif dead > 2 * limit and (since is None or since > config.OPS_VACUUM_STALE_S):
            findings.append(Finding(
                Severity.WARNING,
                f"{t['relname']}: {dead} dead tuples, {round(dead / max(limit, 1), 1)}x its "
                f"autovacuum trigger, last vacuum {secs(since)} ago",
                "autovacuum is not keeping up with queue churn (autovacuum_count flat): check "
                "autovacuum_max_workers, cost limits and naptime, or lower this table's "
                "scale factor",
                psql(f"ALTER TABLE {schema}.{t['relname']} SET "
                     "(autovacuum_vacuum_scale_factor = 0.01)"), evidence, RUNBOOK))
    if not findings:
        worst = max(tables, key=lambda t: t["n_dead_tup"], default=None)
        over = [t for t in tables if int(t["n_dead_tup"]) > t["autovacuum_trigger"]]
        most = (f"most dead: {worst['relname']} {worst['n_dead_tup']} (trigger "
                f"{worst['autovacuum_trigger']})" if worst else "")
        if over:
            summary = (f"{plural(len(over), 'queue table')} of {len(tables)} past their "
                       f"autovacuum trigger, awaiting autovacuum (nothing pins the horizon); "
                       + ", ".join(f"{t['relname']} {t['n_dead_tup']} dead vs trigger "
                                   f"{t['autovacuum_trigger']}" for t in over[:3]))
        else:
            summary = (f"{plural(len(tables), 'queue table')} within their autovacuum triggers"
                       + (f" ({most})" if most else ""))
        # Over their trigger first, then the guide's queue tables, most dead first.
        shown = sorted(tables, key=lambda t: (int(t["n_dead_tup"]) <= t["autovacuum_trigger"],
                                              not guide_table(t["relname"]),
                                              -int(t["n_dead_tup"])))
        findings.append(Finding(Severity.OK, summary, evidence=shown[:options.evidence_limit],
                                runbook=RUNBOOK))
    return findings
