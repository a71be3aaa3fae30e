"""replication: is this a primary or a hot standby, and how far behind is the standby.

On a standby it says so first (every other check reads a replica there), with the
replay lag in seconds and bytes; with ``--primary-url`` also how far the standby is
behind the primary's current WAL position.  A standby with ``hot_standby_feedback``
holds the primary's xmin horizon back with its long queries (``mvcc-horizon`` on the
primary names it).  On a primary it lists the connected standbys and their lag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa import config
from awa_ops.diagnose._text import plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.replication import behind_primary, replication_state, standbys

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "replication"
RUNBOOK = runbook("replication")
RUNS_WITHOUT_SCHEMA = True


def lag_severity(lag_s: float | None) -> Severity:
    if lag_s is None or lag_s < config.OPS_REPLICATION_LAG_WARNING_S:
        return Severity.OK
    if lag_s < config.OPS_REPLICATION_LAG_CRITICAL_S:
        return Severity.WARNING
    return Severity.CRITICAL


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    state = await replication_state(session, fresh=True)
    if not state.standby:
        rows = await standbys(session)
        worst = max((r["replay_lag_s"] or 0.0 for r in rows), default=None)
        summary = (f"primary with {plural(len(rows), 'streaming standby', 'streaming standbys')}"
                   + (f", replay lag at most {secs(worst)}" if rows else ""))
        return [Finding(lag_severity(worst), summary,
                        "standbys serve the dashboards and consoles; a lagging one shows old "
                        "state", None, rows, RUNBOOK)]
    evidence: dict[str, Any] = {
        "replay_lag_s": state.replay_lag_s, "received_not_replayed_bytes": state.replay_lag_bytes,
        "replay_lsn": state.replay_lsn, "wal_receiver": state.receiver_status,
        "upstream": state.upstream, "hot_standby_feedback": state.hot_standby_feedback}
    behind = None
    from awa_ops.diagnose import primary_session  # the package imports this module lazily
    primary = await primary_session(options)
    if primary is not None and state.replay_lsn is not None:
        behind = await behind_primary(primary, state.replay_lsn)
        evidence["behind_primary_bytes"] = behind
    lag = "unknown" if state.replay_lag_s is None else secs(state.replay_lag_s)
    summary = (f"this is a hot standby (read-only): replay lag {lag}"
               + (f", {behind:.0f} bytes behind the primary" if behind is not None else ""))
    why = ("every other check reads this replica: what it shows may be that old; checks that "
           "only the primary can answer (its sessions, xmin horizon, locks, WAL) run there with "
           "--primary-url, or say which command to run against the primary")
    if state.hot_standby_feedback:
        why += ("; hot_standby_feedback = on: long queries here hold the primary's xmin "
                "horizon back (see `awa-ops diagnose mvcc-horizon` on the primary)")
    next_step = (None if primary is not None else
                 "awa-ops diagnose all --database-url \"$STANDBY_URL\" "
                 "--primary-url \"$PRIMARY_URL\"")
    return [Finding(lag_severity(state.replay_lag_s), summary, why, next_step, [evidence],
                    RUNBOOK)]
