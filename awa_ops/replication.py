"""Primary or hot standby, and how far behind: the one read the ops tools share.

``awa-ops diagnose replication``, the exporter's ``awa_db_replication_*`` series and
the console's header all read ``replication_state``.  On a standby the tools work
read-only; what only the primary can answer (its sessions, its xmin horizon, its
locks, its WAL position) is asked of ``--primary-url`` when given, and otherwise
named with the command to run against the primary (``awa_ops.diagnose``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from awa_ops.session import OpsSession

# Replay lag: 0 while everything received is replayed (an idle primary sends nothing, so
# "now - last replayed commit" would grow without any lag), else the age of the last
# replayed commit.  Bytes: received and not yet replayed on this standby.
STATE = """
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() IS NOT NULL
             AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) END::float8
           AS replay_lag_s,
       CASE WHEN pg_is_in_recovery()
            THEN pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
       END::float8 AS replay_lag_bytes,
       CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END AS replay_lsn,
       (SELECT status FROM pg_stat_wal_receiver) AS receiver_status,
       (SELECT sender_host || ':' || sender_port FROM pg_stat_wal_receiver) AS upstream,
       current_setting('hot_standby_feedback') = 'on' AS hot_standby_feedback
"""
# The primary's side: each connected standby and how far behind it is.
STANDBYS = """
SELECT application_name, client_addr::text AS client_addr, state,
       EXTRACT(EPOCH FROM replay_lag)::float8 AS replay_lag_s,
       pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8 AS behind_bytes,
       backend_xmin IS NOT NULL AS sends_feedback
  FROM pg_stat_replication ORDER BY application_name
"""
# The primary's summary of the same, for the exporter: the worst standby (0 with none).
STANDBYS_WORST = """
SELECT coalesce(max(EXTRACT(EPOCH FROM replay_lag)), 0)::float8 AS replay_lag_s,
       coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)), 0)::float8
           AS replay_lag_bytes
  FROM pg_stat_replication
"""
# How far a standby at ``lsn`` is behind the primary this runs on.
BEHIND_PRIMARY = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %(lsn)s::pg_lsn)::float8 AS bytes"

CACHE_KEY = "replication_state"


@dataclass(frozen=True)
class ReplicationState:
    standby: bool
    replay_lag_s: float | None = None
    replay_lag_bytes: float | None = None
    replay_lsn: str | None = None
    receiver_status: str | None = None
    upstream: str | None = None
    hot_standby_feedback: bool = False

    def describe(self) -> str:
        """One line: ``primary`` or ``standby (replay lag 1.2s, 0 B behind)``."""
        if not self.standby:
            return "primary"
        lag = "unknown" if self.replay_lag_s is None else f"{self.replay_lag_s:.1f}s"
        return f"standby, read-only (replay lag {lag})"


def from_row(row: dict[str, Any] | None) -> ReplicationState:
    if row is None:
        return ReplicationState(standby=False)
    return ReplicationState(
        standby=bool(row["standby"]), replay_lag_s=row["replay_lag_s"],
        replay_lag_bytes=row["replay_lag_bytes"], replay_lsn=row["replay_lsn"],
        receiver_status=row["receiver_status"], upstream=row["upstream"],
        hot_standby_feedback=bool(row["hot_standby_feedback"]))


async def replication_state(session: OpsSession, *, fresh: bool = False) -> ReplicationState:
    """This session's server: a primary, or a standby and its lag (cached per session for
    the role; ``fresh`` reads the lag again)."""
    cached: ReplicationState | None = session.cache.get(CACHE_KEY)
    if cached is not None and not (fresh and cached.standby):
        return cached
    state = from_row(await session.fetch_one(STATE))
    session.cache[CACHE_KEY] = state
    return state


async def on_standby(session: OpsSession) -> bool:
    return (await replication_state(session)).standby


async def standbys(session: OpsSession) -> list[dict[str, Any]]:
    """The primary's view of its streaming standbys (empty on a standby)."""
    return await session.fetch_all(STANDBYS)


async def behind_primary(primary: OpsSession, replay_lsn: str) -> float | None:
    row = await primary.fetch_one(BEHIND_PRIMARY, {"lsn": replay_lsn})
    return row["bytes"] if row else None
