"""mvcc-horizon: everything that can pin the xmin horizon, and how to end it.

Dead rows cannot be vacuumed while any of these still needs them: long
transactions and sessions holding backend_xmin/backend_xid (idle in
transaction, REPEATABLE READ readers, running ANALYZE), replication slots
(xmin, catalog_xmin), hot-standby feedback, prepared transactions, and
vacuum_defer_cleanup_age where the server still has it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa import config
from awa.runtime.leader import is_leader_application_name
from awa_ops.diagnose._text import db_ref, plural, psql, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.storage import render

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "mvcc-horizon"
RUNBOOK = runbook("mvcc-horizon")
# On a hot standby this check runs on --primary-url, or names the command for the primary.
NEEDS_PRIMARY = "its sessions, replication slots, standby feedback and xmin horizon"
RUNS_WITHOUT_SCHEMA = True

# The guide's long-transaction query, joined to the horizon columns.
SESSIONS = f"""
WITH seed AS ({render("long_transactions", as_subquery=True)})
SELECT s.pid, s.usename, s.application_name, s.client_addr, s.state,
       EXTRACT(EPOCH FROM s.xact_age)::float8 AS xact_age_s, s.wait_event_type,
       left(s.query, 300) AS query, a.backend_type,
       a.backend_xid::text AS backend_xid, a.backend_xmin::text AS backend_xmin,
       age(a.backend_xid) AS xid_age, age(a.backend_xmin) AS xmin_age,
       p.command AS maintenance_command, p.relation
FROM seed s
JOIN pg_stat_activity a ON a.pid = s.pid
LEFT JOIN (
    SELECT pid, 'ANALYZE' AS command, relid::regclass::text AS relation
      FROM pg_stat_progress_analyze
    UNION ALL
    SELECT pid, 'VACUUM', relid::regclass::text FROM pg_stat_progress_vacuum
) p ON p.pid = s.pid
WHERE s.pid <> pg_backend_pid()
ORDER BY s.xact_age DESC
"""
# Every slot: one holding xmin pins rows; any slot keeps WAL from its restart_lsn on.
SLOTS = """
SELECT slot_name, slot_type, database, active, active_pid,
       xmin::text AS xmin, catalog_xmin::text AS catalog_xmin,
       age(xmin) AS xmin_age, age(catalog_xmin) AS catalog_xmin_age,
       CASE WHEN pg_is_in_recovery() OR restart_lsn IS NULL THEN NULL
            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint
       END AS retained_wal_bytes
FROM pg_replication_slots
"""
STANDBY_FEEDBACK = """
SELECT pid, usename, application_name, client_addr, state,
       backend_xmin::text AS backend_xmin, age(backend_xmin) AS xmin_age
FROM pg_stat_replication
WHERE backend_xmin IS NOT NULL
"""
PREPARED = """
SELECT gid, owner, database, prepared, transaction::text AS xid, age(transaction) AS xid_age,
       EXTRACT(EPOCH FROM (now() - prepared))::float8 AS age_s
FROM pg_prepared_xacts
WHERE database = current_database()  -- those of other databases do not hold back this one's tables
ORDER BY prepared
"""
SETTINGS = """
SELECT current_setting('vacuum_defer_cleanup_age', true) AS vacuum_defer_cleanup_age,
       current_setting('idle_in_transaction_session_timeout')
           AS idle_in_transaction_session_timeout,
       current_setting('old_snapshot_threshold', true) AS old_snapshot_threshold
"""


def thresholds(options: Options) -> tuple[float, float]:
    warn = options.min_age_s if options.min_age_s is not None else config.OPS_XACT_WARNING_S
    return warn, max(config.OPS_XACT_CRITICAL_S, warn)


def _severity(age_s: float | None, xid_age: int | None, warn: float, crit: float) -> Severity:
    if (age_s or 0) >= crit:
        return Severity.CRITICAL
    if (age_s or 0) >= warn or (xid_age or 0) >= config.OPS_XID_AGE_WARNING:
        return Severity.WARNING
    return Severity.OK


async def gather(session: OpsSession) -> dict[str, list[dict[str, Any]]]:
    sessions, slots, feedback, prepared, settings = await session.fetch_sets(
        (SESSIONS, None), (SLOTS, None), (STANDBY_FEEDBACK, None), (PREPARED, None),
        (SETTINGS, None))
    return {"sessions": sessions, "slots": slots, "feedback": feedback,
            "prepared": prepared, "settings": settings}


def holders(found: dict[str, list[dict[str, Any]]], options: Options) -> list[Finding]:
    """One finding per horizon holder old enough to matter (and OK ones for context)."""
    warn, crit = thresholds(options)
    out: list[Finding] = []
    for s in found["sessions"]:
        pins = s["backend_xmin"] is not None or s["backend_xid"] is not None
        vacuum = s["maintenance_command"] == "VACUUM" or (
            s["backend_type"] == "autovacuum worker" and not s["maintenance_command"])
        kind = _session_kind(s)
        sev = _severity(s["xact_age_s"], max(s["xid_age"] or 0, s["xmin_age"] or 0), warn, crit)
        if vacuum:
            sev = Severity.OK  # a plain VACUUM does not hold back other vacuums
        if not pins and sev > Severity.WARNING:
            sev = Severity.WARNING  # long, but holds no snapshot: locks, not the horizon
        if sev == Severity.OK:
            continue  # young: shown in the summary's evidence only
        if not pins and is_leader_application_name(s["application_name"]):
            continue  # behind a pooler the leader holds its lock in a snapshot-less transaction
        holds = ", ".join(part for part in (
            f"xid {s['backend_xid']}" if s["backend_xid"] else "",
            f"xmin {s['backend_xmin']} ({s['xmin_age']} xids old)" if s["backend_xmin"] else "")
            if part) or "no snapshot"
        who = (f"pid {s['pid']} ({s['usename']}, application {s['application_name'] or '-'}, "
               f"client {s['client_addr'] or 'local'})")
        out.append(Finding(
            sev, f"{kind}: {who} open for {secs(s['xact_age_s'])}, holding {holds}",
            "while it stays open, VACUUM cannot remove rows that died after its snapshot: queue "
            "tables bloat and dispatch slows" if pins else
            "a long transaction holds its locks and will pin the horizon at its next statement",
            _end_command(s, kind), [s], RUNBOOK))
    for slot in found["slots"]:
        if slot["xmin"] is None and slot["catalog_xmin"] is None:
            continue  # pins no rows (wal_retainers)
        age = max(slot["xmin_age"] or 0, slot["catalog_xmin_age"] or 0)
        sev = Severity.WARNING if (age >= config.OPS_XID_AGE_WARNING or not slot["active"]) \
            else Severity.OK
        out.append(Finding(
            sev, f"replication slot {slot['slot_name']} ({slot['slot_type']}, "
                 f"{'active' if slot['active'] else 'INACTIVE'}) holds xmin {slot['xmin']} / "
                 f"catalog_xmin {slot['catalog_xmin']} ({age} xids old)"
                 + (f" and {_wal(slot)}" if _wal(slot) else ""),
            "a slot keeps every row (xmin) or catalog row (catalog_xmin) its consumer may still "
            "need; an abandoned slot pins the horizon forever",
            psql(f"SELECT pg_drop_replication_slot('{slot['slot_name']}')")
            + "  # only if its consumer is gone", [slot], RUNBOOK))
    for fb in found["feedback"]:
        old = (fb["xmin_age"] or 0) >= config.OPS_XID_AGE_WARNING
        sev = Severity.WARNING if old else Severity.OK
        out.append(Finding(
            sev, f"standby {fb['application_name'] or fb['client_addr']} "
                 f"(walsender pid {fb['pid']}) "
                 f"sends hot_standby_feedback xmin {fb['backend_xmin']} "
                 f"({fb['xmin_age']} xids old)",
            "a long query on the standby pins the primary's horizon through feedback",
            "end the long query on the standby, or turn hot_standby_feedback off there",
            [fb], RUNBOOK))
    for p in found["prepared"]:
        sev = _severity(p["age_s"], p["xid_age"], warn, crit)
        out.append(Finding(
            sev,
            f"prepared transaction '{p['gid']}' (owner {p['owner']}, database {p['database']}) "
            f"prepared {secs(p['age_s'])} ago, holding xid {p['xid']}",
            "a prepared transaction survives restarts and holds its xid (and locks) until "
            "someone commits or rolls it back; its coordinator may be gone",
            f"psql {db_ref()} -c \"ROLLBACK PREPARED '{p['gid']}'\"  "
            f"# or COMMIT PREPARED, after asking its coordinator; run in database {p['database']}",
            [p], RUNBOOK))
    settings = found["settings"][0] if found["settings"] else {}
    defer = settings.get("vacuum_defer_cleanup_age")
    if defer not in (None, "", "0"):
        out.append(Finding(
            Severity.WARNING, f"vacuum_defer_cleanup_age = {defer}",
            "the horizon is held back by this many transactions on purpose",
            "ALTER SYSTEM SET vacuum_defer_cleanup_age = 0; SELECT pg_reload_conf();",
            [settings], RUNBOOK))
    return out


def _session_kind(s: dict[str, Any]) -> str:
    if s["maintenance_command"] == "ANALYZE":
        return f"running ANALYZE of {s['relation']}"
    if s["maintenance_command"] == "VACUUM" or s["backend_type"] == "autovacuum worker":
        return "vacuum"
    if (s["state"] or "").startswith("idle in transaction"):
        return "idle-in-transaction session" + (" holding an xid" if s["backend_xid"] else "")
    if s["backend_xid"] is None and s["backend_xmin"] is not None:
        return "snapshot holder (e.g. a REPEATABLE READ reader)"
    return "long transaction"


def _end_command(s: dict[str, Any], kind: str) -> str:
    if kind == "vacuum":
        return "none needed: let it finish"
    return psql(f"SELECT pg_terminate_backend({s['pid']})") + "  # rolls back its transaction"


def _wal(slot: dict[str, Any]) -> str:
    """``retains N MiB of WAL`` (empty on a standby, where it cannot be read)."""
    retained = slot["retained_wal_bytes"]
    return "" if retained is None else f"retains {retained / 2**20:.1f} MiB of WAL"


def wal_retainers(found: dict[str, Any]) -> list[Finding]:
    """Inactive slots that pin no rows but keep WAL: nothing consumes them, so the WAL
    they keep grows until the disk fills (unless ``max_slot_wal_keep_size`` caps it)."""
    out = []
    for slot in found["slots"]:
        if (slot["xmin"] is None and slot["catalog_xmin"] is None and not slot["active"]
                and slot["retained_wal_bytes"]):
            out.append(Finding(
                Severity.WARNING,
                f"replication slot {slot['slot_name']} ({slot['slot_type']}, INACTIVE) pins no "
                f"rows but {_wal(slot)}",
                "nothing consumes an inactive slot: the WAL it keeps grows with every write "
                "until its consumer returns or the slot is dropped, and a full WAL disk stops "
                "the server",
                psql(f"SELECT pg_drop_replication_slot('{slot['slot_name']}')")
                + "  # only if its consumer is gone", [slot], RUNBOOK))
    return out


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    found = await gather(session)
    findings = holders(found, options) + wal_retainers(found)
    if not any(f.severity > Severity.OK for f in findings):
        warn, _ = thresholds(options)
        oldest = max((s["xact_age_s"] or 0 for s in found["sessions"]), default=0)
        pinning = sum(1 for s in found["slots"] if s["xmin"] or s["catalog_xmin"])
        summary = (f"nothing pins the xmin horizon longer than {secs(warn)} "
                   f"(oldest open transaction {secs(oldest)}; "
                   f"{plural(len(found['prepared']), 'prepared transaction')}, "
                   f"{plural(pinning, 'slot')} holding xmin)")
        findings.insert(0, Finding(Severity.OK, summary,
                                   evidence=found["sessions"][:options.evidence_limit],
                                   runbook=RUNBOOK))
    else:
        findings.sort(key=lambda f: -f.severity)
    return findings
