"""The read models behind awa-tui's screens, and the operator actions it offers.

A refresh is one short read-only transaction (``OpsSession.read``) holding a
few index-backed statements; nothing stays open between refreshes, so the
console can be left running without pinning the xmin horizon.  Counts stop at
a cap and lists at a limit, so a huge database costs the same as a big one.
Ages are computed here from absolute timestamps against one clock, which lets
the console tick them every second between refreshes (and lets tests fix it).
"""

from __future__ import annotations

import getpass
import socket
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import Any, AsyncIterator, Callable

import psycopg
from psycopg import sql

from awa import config, lifecycle, schema
from awa.admin import GET_JOB, AdminMixin
from awa_ops import diagnose
from awa_ops.findings import CheckResult
from awa_ops.runtimes import queue_names
from awa_ops.session import OpsSession
from awa_ops.storage import detect_engine, render

# --- statements -------------------------------------------------------------

DB_NOW = "SELECT now() AS now"

# Which (state, queue) pairs exist, by a loose index scan of each table's
# (state, queue, id) index: one probe per pair, however many rows there are.
# Depth is counted per pair up to a cap; terminal history is not depth.
QUEUE_DEPTHS = """
WITH RECURSIVE hot AS (
    (SELECT state, queue FROM awa.jobs_hot ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM hot p CROSS JOIN LATERAL (
        SELECT h.state, h.queue FROM awa.jobs_hot h
         WHERE (h.state, h.queue) > (p.state, p.queue)
         ORDER BY h.state, h.queue LIMIT 1) n
), deferred AS (
    (SELECT state, queue FROM awa.scheduled_jobs ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM deferred p CROSS JOIN LATERAL (
        SELECT s.state, s.queue FROM awa.scheduled_jobs s
         WHERE (s.state, s.queue) > (p.state, p.queue)
         ORDER BY s.state, s.queue LIMIT 1) n
)
SELECT p.queue, p.state::text AS state,
       CASE WHEN p.state::text = ANY(%(counted)s::text[]) THEN
           (SELECT count(*) FROM (SELECT 1 FROM awa.jobs_hot h
             WHERE h.state = p.state AND h.queue = p.queue LIMIT %(cap)s) c)
       END AS n
  FROM (SELECT * FROM hot LIMIT %(max_pairs)s) p
UNION ALL
SELECT p.queue, p.state::text,
       (SELECT count(*) FROM (SELECT 1 FROM awa.scheduled_jobs s
         WHERE s.state = p.state AND s.queue = p.queue LIMIT %(cap)s) c)
  FROM (SELECT * FROM deferred LIMIT %(max_pairs)s) p
"""

# Per queue: the oldest runnable job (one probe per priority of the claim
# index), completions since the previous refresh (the finalized index), and
# the pause flag.  Queues known only to queue_meta are listed too.
QUEUE_DETAILS = """
WITH q AS (
    SELECT unnest(%(queues)s::text[]) AS queue
    UNION
    SELECT queue FROM awa.queue_meta
)
SELECT q.queue,
       (SELECT min(o.run_at) FROM unnest(%(priorities)s::smallint[]) pr(priority)
          CROSS JOIN LATERAL (
              SELECT h.run_at FROM awa.jobs_hot h
               WHERE h.state = 'available' AND h.queue = q.queue AND h.priority = pr.priority
               ORDER BY h.run_at LIMIT 1) o) AS oldest_available,
       (SELECT count(*) FROM (SELECT 1 FROM awa.jobs_hot h
          WHERE h.state = 'completed' AND h.queue = q.queue
            AND h.finalized_at > %(since)s AND h.finalized_at <= %(until)s
          LIMIT %(cap)s) c) AS completed,
       coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by
  FROM q LEFT JOIN awa.queue_meta m ON m.queue = q.queue
 ORDER BY q.queue
"""

DLQ_DEPTHS = """
WITH RECURSIVE qs AS (
    (SELECT queue FROM awa.dlq_entries ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM qs p CROSS JOIN LATERAL (
        SELECT d.queue FROM awa.dlq_entries d WHERE d.queue > p.queue
         ORDER BY d.queue LIMIT 1) n
)
SELECT qs.queue,
       (SELECT count(*) FROM (SELECT 1 FROM awa.dlq_entries d
         WHERE d.queue = qs.queue LIMIT %(cap)s) c) AS n
  FROM (SELECT queue FROM qs LIMIT %(max_queues)s) qs
"""

# The seed's runtime health query, bounded.
RUNTIMES = """
SELECT instance_id, hostname, pid, version, started_at, last_seen_at, snapshot_interval_ms,
       healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive,
       leader, shutting_down, queues
  FROM awa.runtime_instances
 ORDER BY leader DESC, last_seen_at DESC
 LIMIT %(limit)s
"""

# The seed's canonical running-jobs query (partial heartbeat index), bounded.
RUNNING = """
SELECT id, kind, queue, attempt, max_attempts, run_lease, priority,
       attempted_at, heartbeat_at, deadline_at, tags
  FROM awa.jobs_hot
 WHERE state = 'running' AND (attempted_at IS NULL OR attempted_at <= %(started_before)s)
 ORDER BY heartbeat_at
 LIMIT %(limit)s
"""

# Queue storage (the guide's engine): the seed's leases and open receipt-claim
# queries, bounded; a receipt claim has no heartbeat and no kind column.
@cache
def leases_query(schema_name: str) -> str:
    return f"""
SELECT s.job_id AS id, '-' AS kind, s.queue, s.attempt, 0 AS max_attempts, NULL::bigint AS run_lease,
       NULL::timestamptz AS attempted_at, s.heartbeat_at, s.deadline_at
  FROM ({render("running_leases", schema=schema_name, as_subquery=True)}) s
 LIMIT %(limit)s"""


@cache
def claims_query(schema_name: str) -> str:
    return f"""
SELECT s.job_id AS id, '(receipt claim)' AS kind, s.queue, s.attempt, 0 AS max_attempts,
       NULL::bigint AS run_lease, s.claimed_at AS attempted_at, NULL::timestamptz AS heartbeat_at,
       s.deadline_at
  FROM ({render("open_lease_claims", schema=schema_name, as_subquery=True)}) s
 WHERE s.claimed_at <= %(started_before)s
 LIMIT %(limit)s"""


JOB_LIST_COLUMNS = ("id, kind, queue, state::text AS state, priority, attempt, max_attempts, "
                    "run_at, created_at, attempted_at, finalized_at, tags")

# Jobs list for one table: enumerate its (state, queue) pairs (loose index
# scan), keep those the filter allows, take the newest rows of each from the
# (state, queue, id) index, then apply the filters no index serves (kind,
# tag).  Without such filters the result is exact; with them it covers the
# newest ``window`` rows.
_JOBS_LIST = """
WITH RECURSIVE pairs AS (
    (SELECT state, queue FROM {table} ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM pairs p CROSS JOIN LATERAL (
        SELECT t.state, t.queue FROM {table} t
         WHERE (t.state, t.queue) > (p.state, p.queue)
         ORDER BY t.state, t.queue LIMIT 1) n
), picked AS (
    SELECT state, queue FROM pairs
     WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     LIMIT %(max_pairs)s
), per_pair AS (
    SELECT CASE WHEN %(post_filtered)s
                THEN greatest(%(page)s, %(window)s / greatest(count(*), 1))
                ELSE %(page)s END AS k
      FROM picked
)
SELECT t.* FROM picked p CROSS JOIN per_pair CROSS JOIN LATERAL (
    SELECT {columns} FROM {table} t
     WHERE t.state = p.state AND t.queue = p.queue
     ORDER BY t.id DESC LIMIT per_pair.k) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
 ORDER BY t.id DESC
 LIMIT %(page)s
"""
# Neither state nor queue given: the newest rows by primary key, then the
# kind/tag filters within the newest ``window`` of them.
_JOBS_NEWEST = """
SELECT t.* FROM (
    SELECT {columns} FROM {table} t ORDER BY t.id DESC
     LIMIT CASE WHEN %(post_filtered)s THEN %(window)s ELSE %(page)s END) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
 ORDER BY t.id DESC
 LIMIT %(page)s
"""
JOBS_HOT_NEWEST = sql.SQL(_JOBS_NEWEST).format(table=sql.Identifier("awa", "jobs_hot"),
                                               columns=sql.SQL(JOB_LIST_COLUMNS))
SCHEDULED_JOBS_NEWEST = sql.SQL(_JOBS_NEWEST).format(
    table=sql.Identifier("awa", "scheduled_jobs"), columns=sql.SQL(JOB_LIST_COLUMNS))
JOBS_HOT_LIST = sql.SQL(_JOBS_LIST).format(table=sql.Identifier("awa", "jobs_hot"),
                                           columns=sql.SQL(JOB_LIST_COLUMNS))
SCHEDULED_JOBS_LIST = sql.SQL(_JOBS_LIST).format(table=sql.Identifier("awa", "scheduled_jobs"),
                                                 columns=sql.SQL(JOB_LIST_COLUMNS))

# Job detail is the admin functions' own lookup (awa.admin.GET_JOB: the job, or
# its DLQ entry with dlq_reason set), plus who holds its unique key.
UNIQUE_HOLDER = """
SELECT c.job_id, h.state::text AS state
  FROM awa.job_unique_claims c LEFT JOIN awa.jobs h ON h.id = c.job_id
 WHERE c.unique_key = %(key)s
"""

DLQ_LIST_COLUMNS = ("job_id, kind, queue, dlq_reason, dlq_at, attempt, max_attempts, "
                    "errors[array_upper(errors, 1)]->>'error' AS last_error")
# DLQ list: the index that serves the most selective given filter, newest
# first; the rest are applied within the newest ``window`` entries.
_DLQ_LIST = """
SELECT * FROM (
    SELECT {columns} FROM awa.dlq_entries {where}
     ORDER BY dlq_at DESC, job_id DESC LIMIT %(window)s) w
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (%(reason)s::text IS NULL OR dlq_reason = %(reason)s)
 ORDER BY dlq_at DESC, job_id DESC
 LIMIT %(page)s
"""
DLQ_BY_QUEUE = sql.SQL(_DLQ_LIST).format(columns=sql.SQL(DLQ_LIST_COLUMNS),
                                         where=sql.SQL("WHERE queue = %(queue)s"))
DLQ_BY_KIND = sql.SQL(_DLQ_LIST).format(columns=sql.SQL(DLQ_LIST_COLUMNS),
                                        where=sql.SQL("WHERE kind = %(kind)s"))
DLQ_NEWEST = sql.SQL(_DLQ_LIST).format(columns=sql.SQL(DLQ_LIST_COLUMNS), where=sql.SQL(""))

HOT_STATES = ("available", "running", "waiting_external", "completed", "failed", "cancelled")
DEFERRED_STATES = ("scheduled", "retryable")
# States whose per-queue counts the overview shows (terminal history is not depth).
DEPTH_STATES = ("available", "scheduled", "retryable", "running", "waiting_external", "failed")
MAX_PAIRS = 4_000
MAX_QUEUES = 1_000
RUNTIME_LIMIT = 200


# --- read models --------------------------------------------------------------

@dataclass
class QueueSummary:
    queue: str
    depth: dict[str, int] = field(default_factory=dict)
    capped: set[str] = field(default_factory=set)
    oldest_available: datetime | None = None
    paused: bool = False
    paused_by: str | None = None
    dlq: int = 0
    throughput: list[float] = field(default_factory=list)  # completions/s, one point per refresh

    def lag_seconds(self, now: datetime) -> float | None:
        if self.oldest_available is None:
            return None
        return max(0.0, (now - self.oldest_available).total_seconds())

    def count_text(self, state: str) -> str:
        n = self.depth.get(state, 0)
        return f"{n}+" if state in self.capped else str(n)


@dataclass
class RuntimeSummary:
    instance_id: str
    hostname: str | None
    pid: int | None
    version: str | None
    started_at: datetime | None
    last_seen_at: datetime
    snapshot_interval_ms: int
    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    maintenance_alive: bool
    leader: bool
    shutting_down: bool
    queues: list[str]

    def live(self, now: datetime) -> bool:
        """The rule awa-ops uses: seen within a few of its own snapshot intervals."""
        window = timedelta(milliseconds=self.snapshot_interval_ms * config.OPS_RUNTIME_LIVE_FACTOR)
        return now - self.last_seen_at <= window

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues

    def label(self) -> str:
        return f"{self.hostname or '?'}:{self.pid if self.pid is not None else '?'}"

    def bad_flags(self) -> list[str]:
        """The health flags that are off, named as the runtime_instances columns."""
        flags = ("healthy", "postgres_connected", "poll_loop_alive", "heartbeat_alive")
        bad = [f for f in flags if not getattr(self, f)]
        if self.leader and not self.maintenance_alive:
            bad.append("maintenance_alive")
        return bad


@dataclass
class Overview:
    now: datetime
    queues: list[QueueSummary]
    runtimes: list[RuntimeSummary]
    dlq_total: int
    dlq_capped: bool

    def live_runtimes(self) -> list[RuntimeSummary]:
        return [r for r in self.runtimes if r.live(self.now) and not r.shutting_down]

    def leader(self) -> RuntimeSummary | None:
        return next((r for r in self.live_runtimes() if r.leader), None)


# Running-attempt classes, worst first, as `awa-ops diagnose stuck-running` reads them.
OVERDUE, ORPHANED, STALE, ALIVE = "overdue", "orphaned", "stale", "alive"


@dataclass
class RunningAttempt:
    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    run_lease: int | None
    attempted_at: datetime | None
    heartbeat_at: datetime | None  # None for a queue-storage receipt claim
    deadline_at: datetime | None
    servers: list[str] = field(default_factory=list)  # live runtimes serving the queue
    gone: str | None = None  # a dead runtime that served the queue: the likely owner

    def heartbeat_age(self, now: datetime) -> float | None:
        return None if self.heartbeat_at is None else (now - self.heartbeat_at).total_seconds()

    def running_for(self, now: datetime) -> float | None:
        return None if self.attempted_at is None else (now - self.attempted_at).total_seconds()

    def deadline_remaining(self, now: datetime) -> float | None:
        return None if self.deadline_at is None else (self.deadline_at - now).total_seconds()

    def status(self, now: datetime, stale_after_s: float) -> str:
        remaining = self.deadline_remaining(now)
        if remaining is not None and remaining < 0:
            return OVERDUE
        age = self.heartbeat_age(now)
        stale = age is not None and age > stale_after_s
        if (stale and self.gone is not None) or not self.servers:
            return ORPHANED
        return STALE if stale else ALIVE

    def runtime(self, now: datetime, stale_after_s: float) -> str:
        """Who runs it: the live runtime(s) of its queue, or the gone one that did."""
        age = self.heartbeat_age(now)
        if self.gone is not None and (not self.servers or (age or 0) > stale_after_s):
            return f"{self.gone} (gone)"
        if not self.servers:
            return "none"
        more = f" +{len(self.servers) - 1}" if len(self.servers) > 1 else ""
        return self.servers[0] + more


@dataclass
class RunningSnapshot:
    now: datetime
    attempts: list[RunningAttempt]
    truncated: bool


class _Filter:
    """A screen filter: its set fields, written back as ``key=value`` words."""

    UNFILTERED = ""

    def words(self) -> str:
        return " ".join(f"{k}={v}" for k, v in vars(self).items() if v)

    def describe(self) -> str:
        return self.words() or self.UNFILTERED


@dataclass
class JobFilter(_Filter):
    UNFILTERED = "all jobs"

    state: str | None = None
    kind: str | None = None
    queue: str | None = None
    tag: str | None = None


@dataclass
class JobsPage:
    now: datetime
    rows: list[dict[str, Any]]
    windowed: bool  # kind/tag filters searched only the newest rows


@dataclass
class JobDetail:
    now: datetime
    job: dict[str, Any]
    in_dlq: bool
    unique_holder: dict[str, Any] | None


@dataclass
class DlqFilter(_Filter):
    UNFILTERED = "all entries"

    queue: str | None = None
    kind: str | None = None
    reason: str | None = None


@dataclass
class DlqPage:
    now: datetime
    rows: list[dict[str, Any]]
    by_reason: dict[str, int]


class ThroughputHistory:
    """Completions per second per queue, one point per refresh, for sparklines."""

    def __init__(self, points: int = config.TUI_THROUGHPUT_POINTS) -> None:
        self.points = points
        self.series: dict[str, deque[float]] = {}
        self.last_until: datetime | None = None

    def window(self, now: datetime, refresh_s: float) -> tuple[datetime, datetime]:
        since = self.last_until or now - timedelta(seconds=refresh_s)
        return since, now

    def record(self, since: datetime, until: datetime, completed: dict[str, int]) -> None:
        seconds = max((until - since).total_seconds(), 1e-3)
        for queue in set(self.series) | set(completed):
            line = self.series.setdefault(queue, deque(maxlen=self.points))
            line.append(completed.get(queue, 0) / seconds)
        self.last_until = until

    def of(self, queue: str) -> list[float]:
        return list(self.series.get(queue, ()))


class ConsoleReader:
    """Everything the console shows, read through one ``OpsSession``."""

    def __init__(self, session: OpsSession, *,
                 clock: Callable[[], datetime] | None = None,
                 count_cap: int = config.TUI_COUNT_CAP,
                 row_limit: int = config.TUI_ROW_LIMIT,
                 scan_window: int = config.TUI_SCAN_WINDOW,
                 stale_after_s: float = config.HEARTBEAT_STALENESS_MS / 1000) -> None:
        self.session = session
        self.clock = clock
        self.count_cap = count_cap
        self.row_limit = row_limit
        self.scan_window = scan_window
        self.stale_after_s = stale_after_s
        self.throughput = ThroughputHistory()
        self.statements = 0  # data statements issued, for the benchmark

    async def _run(self, cur: psycopg.AsyncCursor[dict[str, Any]], query: Any,
                   params: Any = None) -> list[dict[str, Any]]:
        self.statements += 1
        await cur.execute(query, params)
        return await cur.fetchall()

    async def _now(self, cur: psycopg.AsyncCursor[dict[str, Any]]) -> datetime:
        if self.clock is not None:
            return self.clock()
        return (await self._run(cur, DB_NOW))[0]["now"]

    async def check_schema(self) -> int:
        """The schema version; raises ``SchemaNotMigrated`` (saying to run `awa migrate`)."""
        async with self.session.read():
            self.statements += 2
            return await schema.ensure_migrated(self.session.conn)

    # -- overview -------------------------------------------------------------
    async def overview(self, refresh_s: float = config.TUI_REFRESH_SECONDS) -> Overview:
        async with self.session.read() as cur:
            now = await self._now(cur)
            queues = await self._queue_summaries(cur, now, refresh_s)
            runtimes = await self._runtimes(cur)
        dlq_total = sum(q.dlq for q in queues)
        dlq_capped = any(q.dlq >= self.count_cap for q in queues)
        return Overview(now, queues, runtimes, dlq_total, dlq_capped)

    async def _queue_summaries(self, cur: psycopg.AsyncCursor[dict[str, Any]], now: datetime,
                               refresh_s: float) -> list[QueueSummary]:
        by_queue: dict[str, QueueSummary] = {}
        for row in await self._run(cur, QUEUE_DEPTHS, {
                "counted": list(DEPTH_STATES), "cap": self.count_cap, "max_pairs": MAX_PAIRS}):
            summary = by_queue.setdefault(row["queue"], QueueSummary(row["queue"]))
            if row["n"] is not None:
                summary.depth[row["state"]] = row["n"]
                if row["n"] >= self.count_cap:
                    summary.capped.add(row["state"])
        since, until = self.throughput.window(now, refresh_s)
        completed: dict[str, int] = {}
        for row in await self._run(cur, QUEUE_DETAILS, {
                "queues": sorted(by_queue), "since": since, "until": until, "cap": self.count_cap,
                "priorities": list(range(config.MIN_PRIORITY, config.MAX_PRIORITY + 1))}):
            summary = by_queue.setdefault(row["queue"], QueueSummary(row["queue"]))
            summary.oldest_available = row["oldest_available"]
            summary.paused = row["paused"]
            summary.paused_by = row["paused_by"]
            completed[row["queue"]] = row["completed"]
        for row in await self._run(cur, DLQ_DEPTHS, {"cap": self.count_cap,
                                                     "max_queues": MAX_QUEUES}):
            by_queue.setdefault(row["queue"], QueueSummary(row["queue"])).dlq = row["n"]
        self.throughput.record(since, until, completed)
        for summary in by_queue.values():
            summary.throughput = self.throughput.of(summary.queue)
        return [by_queue[name] for name in sorted(by_queue)]

    async def _runtimes(self, cur: psycopg.AsyncCursor[dict[str, Any]]) -> list[RuntimeSummary]:
        rows = await self._run(cur, RUNTIMES, {"limit": RUNTIME_LIMIT})
        return [RuntimeSummary(
            instance_id=str(r["instance_id"]), hostname=r["hostname"], pid=r["pid"],
            version=r["version"], started_at=r["started_at"], last_seen_at=r["last_seen_at"],
            snapshot_interval_ms=r["snapshot_interval_ms"], healthy=r["healthy"],
            postgres_connected=r["postgres_connected"], poll_loop_alive=r["poll_loop_alive"],
            heartbeat_alive=r["heartbeat_alive"], maintenance_alive=r["maintenance_alive"],
            leader=r["leader"], shutting_down=r["shutting_down"],
            queues=sorted(queue_names(r["queues"]))) for r in rows]

    # -- running ----------------------------------------------------------------
    async def running(self, min_age_s: float = 0.0) -> RunningSnapshot:
        engine = await detect_engine(self.session)
        async with self.session.read() as cur:
            now = await self._now(cur)
            params = {"started_before": now - timedelta(seconds=min_age_s),
                      "limit": self.row_limit}
            if engine.is_queue_storage:
                rows = await self._run(cur, leases_query(engine.schema), params)
                rows += await self._run(cur, claims_query(engine.schema), params)
            else:
                rows = await self._run(cur, RUNNING, params)
            runtimes = await self._runtimes(cur)
        attempts = []
        for r in rows:
            live = [rt.label() for rt in runtimes
                    if rt.live(now) and not rt.shutting_down and rt.serves(r["queue"])]
            dead = [rt for rt in runtimes if not rt.live(now) and rt.serves(r["queue"])]
            # The dead runtime whose last report is closest to the attempt's last heartbeat.
            anchor = r["heartbeat_at"] or r["attempted_at"] or now
            gone = min(dead, key=lambda rt: abs((rt.last_seen_at - anchor).total_seconds()),
                       default=None)
            attempts.append(RunningAttempt(
                id=r["id"], kind=r["kind"], queue=r["queue"], attempt=r["attempt"],
                max_attempts=r["max_attempts"], run_lease=r["run_lease"],
                attempted_at=r["attempted_at"], heartbeat_at=r["heartbeat_at"],
                deadline_at=r["deadline_at"], servers=live,
                gone=gone.label() if gone is not None else None))
        return RunningSnapshot(now, attempts, truncated=len(rows) >= self.row_limit)

    # -- jobs ---------------------------------------------------------------------
    async def jobs(self, flt: JobFilter) -> JobsPage:
        post_filtered = bool(flt.kind or flt.tag)
        params = {"state": flt.state, "queue": flt.queue, "kind": flt.kind, "tag": flt.tag,
                  "post_filtered": post_filtered, "page": self.row_limit,
                  "window": self.scan_window, "max_pairs": MAX_PAIRS}
        newest = flt.state is None and flt.queue is None
        hot, deferred = ((JOBS_HOT_NEWEST, SCHEDULED_JOBS_NEWEST) if newest
                         else (JOBS_HOT_LIST, SCHEDULED_JOBS_LIST))
        rows: list[dict[str, Any]] = []
        async with self.session.read() as cur:
            now = await self._now(cur)
            if flt.state is None or flt.state in HOT_STATES:
                rows += await self._run(cur, hot, params)
            if flt.state is None or flt.state in DEFERRED_STATES:
                rows += await self._run(cur, deferred, params)
        rows.sort(key=lambda r: r["id"], reverse=True)
        return JobsPage(now, rows[: self.row_limit], windowed=post_filtered)

    async def job(self, job_id: int) -> JobDetail | None:
        async with self.session.read() as cur:
            now = await self._now(cur)
            rows = await self._run(cur, GET_JOB, {"id": job_id})
            if not rows:
                return None
            job = rows[0]
            in_dlq = job["dlq_reason"] is not None
            holder = None
            if job.get("unique_key") is not None:
                held = await self._run(cur, UNIQUE_HOLDER, {"key": job["unique_key"]})
                holder = held[0] if held else None
        return JobDetail(now, job, in_dlq, holder)

    # -- diagnostics ---------------------------------------------------------------
    async def diagnostics(self, min_age_s: float = 0.0) -> list[CheckResult]:
        """``awa-ops diagnose all`` on this session, with the console's thresholds."""
        options = diagnose.Options(min_age_s=min_age_s or None,
                                   heartbeat_staleness_s=self.stale_after_s)
        return await diagnose.run_all(self.session, options)

    # -- DLQ ----------------------------------------------------------------------
    async def dlq(self, flt: DlqFilter) -> DlqPage:
        query = DLQ_BY_QUEUE if flt.queue else DLQ_BY_KIND if flt.kind else DLQ_NEWEST
        params = {"queue": flt.queue, "kind": flt.kind, "reason": flt.reason,
                  "window": self.scan_window, "page": self.row_limit}
        async with self.session.read() as cur:
            now = await self._now(cur)
            rows = await self._run(cur, query, params)
        by_reason: dict[str, int] = {}
        for row in rows:
            by_reason[row["dlq_reason"]] = by_reason.get(row["dlq_reason"], 0) + 1
        return DlqPage(now, rows, by_reason)


# --- operator actions ---------------------------------------------------------

class _SessionPool:
    """Lends the console's session connection to the admin functions in place of a pool."""

    def __init__(self, session: OpsSession) -> None:
        self.session = session

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        yield self.session.conn


def operator_name() -> str:
    """Who to record as ``paused_by``: the console and the operator's login."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{config.APP_NAME_TUI} {user}@{socket.gethostname()}"


class ConsoleActions(AdminMixin):
    """The CLI's admin functions (awa.admin), run on the console's own session.

    Each action is one bounded write transaction (``OpsSession.write``), so a
    bulk action applies to all tagged rows or to none; on a ``--read-only``
    session PostgreSQL itself refuses it ("cannot execute ... in a read-only
    transaction").  Each returns the one line the console shows.
    """

    def __init__(self, session: OpsSession) -> None:
        self.session = session
        self._session_pool = _SessionPool(session)

    async def _get_pool(self, *, check_schema: bool = True) -> Any:
        return self._session_pool

    async def cancel_jobs(self, ids: list[int]) -> str:
        async with self.session.write():
            done = [i for i in ids if await self.cancel(i) is not None]
        return _outcome("cancelled", done, ids, "already finished or gone")

    async def retry_jobs(self, ids: list[int]) -> str:
        async with self.session.write():
            done = [i for i in ids if await self.retry(i) is not None]
        return _outcome("retried", done, ids, "not failed or cancelled")

    async def pause(self, queue: str) -> str:
        async with self.session.write():
            await self.pause_queue(queue, operator_name())
        return f"paused queue {queue}"

    async def resume(self, queue: str) -> str:
        async with self.session.write():
            await self.resume_queue(queue)
        return f"resumed queue {queue}"

    async def dlq_retry(self, ids: list[int]) -> str:
        async with self.session.write():
            done = [i for i in ids if await self.retry_from_dlq(i) is not None]
        return _outcome("retried from the DLQ", done, ids, "no longer in the DLQ")

    async def dlq_purge(self, ids: list[int]) -> str:
        async with self.session.write():
            done = [i for i in ids if await self.purge_dlq_job(i)]
        return _outcome("purged from the DLQ", done, ids, "no longer in the DLQ")

    async def dlq_move(self, queue: str, reason: str = lifecycle.DLQ_MANUAL) -> str:
        async with self.session.write():
            moved = await self.bulk_move_failed_to_dlq(queue=queue, reason=reason)
        return f"moved {moved} failed job(s) of queue {queue} into the DLQ ({reason})"


def _outcome(verb: str, done: list[int], asked: list[int], why_not: str) -> str:
    shown = ", ".join(str(i) for i in done[:10]) + (" ..." if len(done) > 10 else "")
    line = f"{verb} {len(done)} job(s)" + (f": {shown}" if done else "")
    skipped = len(asked) - len(done)
    return line + (f"; {skipped} skipped ({why_not})" if skipped else "")
