"""The read models behind awa-tui's screens, and the operator actions it offers.

A refresh is one short read-only transaction (``OpsSession.read``) holding a
few index-backed reads of the storage engine's read side (``OpsReads``: job
tables are read only through it); nothing stays open between refreshes, so
the console can be left running without pinning the xmin horizon.  Counts stop at
a cap and lists at a limit, so a huge database costs the same as a big one.
Ages are computed here from absolute timestamps against one clock, which lets
the console tick them every second between refreshes (and lets tests fix it).
"""

from __future__ import annotations

import getpass
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg

from awa import config, lifecycle, schema
from awa.admin import AdminMixin
from awa.batch_operations import BatchOperationsMixin
from awa.bulk_selection import DLQ as DLQ_PLACE
from awa.bulk_selection import BulkFilter
from awa.fingerprint import ErrorGroup, fingerprint, group_errors
from awa.job import JOB_COLUMNS
from awa.known_queues import has_waiting, known_queues, unserved_queues
from awa.liveness import runtime_live
from awa.storage import open_engine
from awa.storage.engine import (
    BatchOperation,
    DlqPageQuery,
    Engine,
    JobListQuery,
    JobRecord,
    Oversized,
    ReadEngine,
    RuntimeInstance,
)
from awa_ops import diagnose
from awa_ops.findings import CheckResult
from awa_ops.runtimes import (  # noqa: F401 (re-exported for awa_tui)
    ALIVE,
    DEFAULT_INTERVAL_S,
    DEFAULT_STALENESS_S,
    LEADER_LOCK_HELD,  # a catalogue read (pg_locks)
    ORPHANED,
    OVERDUE,
    STALE,
    LeaderLock,
    attempt_timing,
    classify_attempt,
    judging_timing,
    speaks,
)
from awa_ops.session import OpsSession
from awa_ops.storage import storage_engine

# --- statements -------------------------------------------------------------

DB_NOW = "SELECT now() AS now"

# The jobs screen lists at most this many (state, queue) pairs.
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


@dataclass(frozen=True)
class RuntimeSummary(RuntimeInstance):
    """A registry row as the console judges it: with the console's ``--stale-after``."""

    stale_after_s: float | None = None  # the console's --stale-after (None: its own)

    def live(self, now: datetime) -> bool:
        """The rule awa-ops uses (``runtime_live``), on the console's clock, with its own
        staleness cutoff unless the console was given one."""
        own = self.heartbeat_staleness_ms / 1000 if self.heartbeat_staleness_ms else None
        return runtime_live((now - self.last_seen_at).total_seconds(), self.snapshot_interval_ms,
                            self.stale_after_s if self.stale_after_s is not None else own)

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues

    def label(self) -> str:
        return f"{self.hostname or '?'}:{self.pid if self.pid is not None else '?'}"

    def speaks(self, *, short: bool = False) -> str:
        """Its release and layout (``awa_ops.runtimes.speaks``, diagnose runtime's rule)."""
        return speaks(self.version, self.schema_version, self.layout_version, short=short)

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
    leader_lock_held: bool = False  # someone holds the leader's advisory lock right now
    # Who holds it (backend pid, application_name, the runtime it names); None: not read.
    leader_lock: LeaderLock | None = None

    def live_runtimes(self) -> list[RuntimeSummary]:
        return [r for r in self.runtimes if r.live(self.now) and not r.shutting_down]

    def mixed_fleet(self) -> dict[str, int]:
        """Live runtimes by what they speak, when more than one release or layout is live
        (a rolling upgrade in progress; diagnose runtime's "mixed fleet"); else empty."""
        counts: dict[str, int] = {}
        for r in self.runtimes:
            if r.live(self.now):
                counts[r.speaks()] = counts.get(r.speaks(), 0) + 1
        return dict(sorted(counts.items())) if len(counts) > 1 else {}

    def problem(self) -> str | None:
        """The Overview's finding: the fleet-wide condition an operator must act on first,
        in one banner line (None: nothing fleet-wide is wrong)."""
        if not self.live_runtimes():
            return ("NO LIVE RUNTIME: no worker has reported recently, so nothing is being "
                    "processed or rescued. Start a worker (awa worker) and check its logs.")
        if self.leader() is None and not self.leader_lock_held:
            return ("NO LEADER: no live runtime holds leadership, so maintenance (rescue, "
                    "promotion, cleanup) is not running. A new leader is elected within the "
                    "election interval; if none appears, check the workers' database "
                    "connectivity.")
        unserved = self.unserved()
        if unserved:
            return (f"UNSERVED: jobs wait in {', '.join(unserved)} and no live runtime serves "
                    f"{'it' if len(unserved) == 1 else 'them'}; nothing will claim them until "
                    "a worker for the queue starts (awa worker MODULE:CLIENT --queue NAME:N).")
        return None

    def unserved(self) -> list[str]:
        """Queues with waiting jobs that no live runtime serves (``unserved_queues``, the
        rule of ``awa health``, ``diagnose runtime`` and the exporter): stranded."""
        return unserved_queues((q.queue for q in self.queues if has_waiting(q.depth)),
                               (r.queues for r in self.live_runtimes()))

    def lock_holder_id(self) -> str | None:
        """The instance id of the runtime the lock holder names (``awa-leader <id>``)."""
        lock = self.leader_lock
        return lock.instance_id.lower() if lock and lock.held and lock.instance_id else None

    def leader(self) -> RuntimeSummary | None:
        """Who leads, the lock first: a new leader's flag reaches the registry only with its
        next snapshot, so the lock is the earlier truth.  The runtime the lock holder names
        (``awa-leader <instance id>``), when registered; else the live runtime whose
        snapshot says it leads; else, while a holder that does not name itself (an older
        runtime) holds the lock, the only live runtime.  Otherwise nobody is named."""
        named = self.lock_holder_id()
        if named is not None:
            return next((r for r in self.runtimes if r.instance_id.lower() == named), None)
        flagged = next((r for r in self.live_runtimes() if r.leader), None)
        if flagged is not None or not self.leader_lock_held:
            return flagged
        live = self.live_runtimes()
        return live[0] if len(live) == 1 else None

    def leader_unknown(self) -> str | None:
        """While the lock is held but no runtime can be named: why, in a few words."""
        if not self.leader_lock_held or self.leader() is not None:
            return None
        named = self.lock_holder_id()
        if named is not None:
            return f"lock held by runtime {named[:8]}, not registered yet"
        pid = self.leader_lock.pid if self.leader_lock else None
        return ("lock held" + (f" by backend pid {pid}" if pid is not None else "")
                + ", which does not name its runtime")


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
    gone: str | None = None  # the runtime that ran it, gone (recorded, or inferred if not)
    claimed_by: str | None = None  # the instance id recorded at claim (None: not recorded)
    owner: str | None = None  # the label of the live runtime that claimed it
    # Judged by the timing of the runtime that claimed it (else of its queue's runtimes;
    # --stale-after overrides): stale past its cutoff, overdue past its deadline plus one
    # heartbeat interval (awa_ops.runtimes.attempt_timing, past_deadline).
    stale_after_s: float = DEFAULT_STALENESS_S
    grace_s: float = DEFAULT_INTERVAL_S

    def heartbeat_age(self, now: datetime) -> float | None:
        return None if self.heartbeat_at is None else (now - self.heartbeat_at).total_seconds()

    def running_for(self, now: datetime) -> float | None:
        return None if self.attempted_at is None else (now - self.attempted_at).total_seconds()

    def deadline_remaining(self, now: datetime) -> float | None:
        return None if self.deadline_at is None else (self.deadline_at - now).total_seconds()

    def status(self, now: datetime) -> str:
        """Its class (awa_ops.runtimes.classify_attempt), ticking with the console's clock.

        Its runtime is gone when the claimer it names is not live; an attempt that names
        none is tied to a dead runtime only once its heartbeat is stale (the inference)."""
        age = self.heartbeat_age(now)
        if age is None:
            age = self.running_for(now)
        inferred_stale = age is not None and age > self.stale_after_s
        owner_gone = self.gone is not None and (self.claimed_by is not None or inferred_stale)
        return classify_attempt(heartbeat_age_s=age,
                                deadline_remaining_s=self.deadline_remaining(now),
                                stale_after_s=self.stale_after_s, owner_gone=owner_gone,
                                served=bool(self.servers), overdue_grace_s=self.grace_s)

    def runtime(self, now: datetime) -> str:
        """Who runs it: the runtime that claimed it (``host:pid``, ``(gone)`` when it
        stopped reporting); unrecorded, the live runtime(s) of its queue or the gone one that
        likely did."""
        if self.claimed_by is not None:
            return (self.owner or "?") if self.gone is None else f"{self.gone} (gone)"
        age = self.heartbeat_age(now)
        if self.gone is not None and (not self.servers or (age or 0) > self.stale_after_s):
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
    args: str | None = None  # text the args contain (case-insensitive)

    def words(self) -> str:
        """``key=value`` words; the args text last, bare (it may hold spaces)."""
        keyed = " ".join(f"{k}={v}" for k, v in vars(self).items() if v and k != "args")
        return " ".join(w for w in (keyed, self.args or "") if w)

    def describe(self) -> str:
        keyed = " ".join(f"{k}={v}" for k, v in vars(self).items() if v and k != "args")
        args = f"args contain {self.args!r}" if self.args else ""
        return " ".join(w for w in (keyed, args) if w) or self.UNFILTERED


@dataclass
class JobsPage:
    now: datetime
    rows: list[dict[str, Any]]
    windowed: bool  # kind/tag filters searched only the newest rows


@dataclass
class ClaimingRuntime:
    """The runtime recorded as claiming a job's attempt, as the registry knows it now."""

    instance_id: str
    label: str | None = None  # host:pid; None once the registry no longer has it
    live: bool = False
    last_seen_at: datetime | None = None

    def describe(self, now: datetime) -> str:
        """``host:pid (instance id), live`` / ``..., gone (last seen 5m ago)``."""
        if self.label is None:
            return f"{self.instance_id}, gone (no longer registered)"
        if self.live:
            return f"{self.label} ({self.instance_id}), live"
        seen = "" if self.last_seen_at is None else \
            f" (last seen {_age_text((now - self.last_seen_at).total_seconds())} ago)"
        return f"{self.label} ({self.instance_id}), gone{seen}"


def _age_text(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


@dataclass
class JobDetail:
    now: datetime
    job: dict[str, Any]
    in_dlq: bool
    unique_holder: dict[str, Any] | None
    runtime: ClaimingRuntime | None = None  # who claimed its current (or last) attempt
    oversized: dict[str, Oversized] = field(default_factory=dict)  # values not fetched whole


@dataclass
class DlqFilter(_Filter):
    UNFILTERED = "all entries"

    queue: str | None = None
    kind: str | None = None
    reason: str | None = None
    group: str | None = None  # an error fingerprint (awa.fingerprint): one cause's members


@dataclass
class DlqPage:
    now: datetime
    rows: list[dict[str, Any]]  # the entries shown (the group filter applied)
    by_reason: dict[str, int]
    groups: list[ErrorGroup] = field(default_factory=list)  # one per cause, biggest first
    scanned: int = 0  # entries read (the groups are of these)
    truncated: bool = False  # the page was full: older entries were not read

    def group(self, print_: str) -> ErrorGroup | None:
        return next((g for g in self.groups if g.fingerprint == print_), None)


class ThroughputHistory:
    """Completions per second per queue, one point per refresh, for sparklines."""

    def __init__(self, points: int = config.TUI_THROUGHPUT_POINTS) -> None:
        self.points = points
        self.series: dict[str, deque[float]] = {}
        self.last_until: datetime | None = None
        self.last_totals: dict[str, int] | None = None

    def window(self, now: datetime, refresh_s: float) -> tuple[datetime, datetime]:
        since = self.last_until or now - timedelta(seconds=refresh_s)
        return since, now

    def record(self, since: datetime, until: datetime, completed: dict[str, int]) -> None:
        seconds = max((until - since).total_seconds(), 1e-3)
        for queue in set(self.series) | set(completed):
            line = self.series.setdefault(queue, deque(maxlen=self.points))
            line.append(completed.get(queue, 0) / seconds)
        self.last_until = until

    def since_last_totals(self, totals: dict[str, int]) -> dict[str, int] | None:
        """Completions per queue since the previous refresh's lifetime totals (None on the
        first): exact where rows are folded away between two refreshes, as 0.6.9 does."""
        previous, self.last_totals = self.last_totals, totals
        if previous is None:
            return None
        return {q: max(n - previous.get(q, 0), 0) for q, n in totals.items()}

    def of(self, queue: str) -> list[float]:
        return list(self.series.get(queue, ()))

    def active(self) -> list[str]:
        """Queues that completed anything within the points kept (recent history)."""
        return [q for q, line in self.series.items() if any(line)]


def shallow(row: Any) -> dict[str, Any]:
    """A read's row (a dataclass) as the screens take it: a new dict of the same values.
    Not ``asdict``: its deep copies were most of the Running read, 190 of 330 ms for 500
    running attempts, and the screens only read the values."""
    return dict(vars(row))


class ConsoleReader:
    """Everything the console shows, read through one ``OpsSession``."""

    def __init__(self, session: OpsSession, *,
                 clock: Callable[[], datetime] | None = None,
                 count_cap: int = config.TUI_COUNT_CAP,
                 row_limit: int = config.TUI_ROW_LIMIT,
                 scan_window: int = config.TUI_SCAN_WINDOW,
                 value_cap: int = config.TUI_VALUE_CAP_BYTES,
                 stale_after_s: float | None = None) -> None:
        self.session = session
        self.clock = clock
        self.count_cap = count_cap
        self.row_limit = row_limit
        self.scan_window = scan_window
        self.value_cap = value_cap
        self.stale_after_s = stale_after_s  # None: each runtime's own (its snapshot's)
        self.throughput = ThroughputHistory()
        self.statements = 0  # data statements issued, for the benchmark

    async def _run(self, cur: psycopg.AsyncCursor[dict[str, Any]], query: Any,
                   params: Any = None) -> list[dict[str, Any]]:
        """A statement of the ops layer itself (the clock, the queue-storage layout's reads)."""
        self.statements += 1
        await cur.execute(query, params)
        return await cur.fetchall()

    async def _engine(self) -> ReadEngine:
        """The storage engine's read side; its methods run on this session's read transaction."""
        return await storage_engine(self.session)

    async def _now(self, cur: psycopg.AsyncCursor[dict[str, Any]]) -> datetime:
        if self.clock is not None:
            return self.clock()
        now: datetime = (await self._run(cur, DB_NOW))[0]["now"]
        return now

    async def check_schema(self) -> int:
        """The schema version; raises ``SchemaNotMigrated`` (saying to run `awa migrate`)."""
        async with self.session.read():
            self.statements += 2
            return await schema.ensure_migrated(self.session.conn, accept_foreign=True)

    # -- overview -------------------------------------------------------------
    async def overview(self, refresh_s: float = config.TUI_REFRESH_SECONDS) -> Overview:
        engine = await self._engine()
        async with self.session.read() as cur:
            now = await self._now(cur)
            self.statements += 1
            instances = await engine.runtime_instances(self.session.conn, limit=RUNTIME_LIMIT)
            queues = await self._queue_summaries(engine, now, refresh_s, instances)
            # Leadership from the lock as well: a new leader's flag reaches the registry
            # only with its next snapshot, but it holds the lock already.
            lock = await self._run(cur, LEADER_LOCK_HELD, {"key": config.ADVISORY_LOCK_LEADER})
        runtimes = self._runtime_summaries(instances)
        dlq_total = sum(q.dlq for q in queues)
        dlq_capped = any(q.dlq >= self.count_cap for q in queues)
        leader_lock = LeaderLock.of_row(lock[0] if lock else None)
        return Overview(now, queues, runtimes, dlq_total, dlq_capped,
                        leader_lock_held=leader_lock.held, leader_lock=leader_lock)

    async def _queue_summaries(self, engine: ReadEngine, now: datetime, refresh_s: float,
                               instances: list[RuntimeInstance]) -> list[QueueSummary]:
        """Every known queue (``awa.known_queues.known_queues``), zeros included; completions
        are counted for each of them, whether or not it has depth."""
        conn = self.session.conn
        by_queue: dict[str, QueueSummary] = {}
        self.statements += 1
        for d in await engine.queue_depths(conn, cap=self.count_cap):
            summary = by_queue.setdefault(d.queue, QueueSummary(d.queue))
            summary.depth.update(d.depth)
            summary.capped.update(d.capped - {"dlq"})
        self.statements += 1
        for dlq in await engine.dlq_depths_by_queue(conn, cap=self.count_cap,
                                                    max_queues=MAX_QUEUES):
            by_queue.setdefault(dlq.queue, QueueSummary(dlq.queue)).dlq = dlq.count
        self.statements += 2
        completed_lately = await engine.recently_completed_queues(
            conn, within_s=config.OPS_KNOWN_QUEUE_HISTORY_S, limit=MAX_QUEUES)
        names = known_queues(holding=by_queue, descriptors=await engine.descriptors(conn),
                             runtimes=[replace(r, last_seen_age_s=(now - r.last_seen_at)
                                               .total_seconds()) for r in instances],
                             recent=[*self.throughput.active(), *completed_lately],
                             limit=MAX_QUEUES)
        since, until = self.throughput.window(now, refresh_s)
        completed: dict[str, int] = {}
        self.statements += 1
        # (queue_details adds the configured queues, awa.queue_meta, to those asked for)
        for q in await engine.queue_details(conn, names, since=since, until=until,
                                            cap=self.count_cap):
            summary = by_queue.setdefault(q.queue, QueueSummary(q.queue))
            summary.oldest_available = q.oldest_available
            summary.paused = q.paused
            summary.paused_by = q.paused_by
            completed[q.queue] = q.completed
        self.statements += 1
        totals = await engine.completed_totals(conn)
        if totals is not None:
            deltas = self.throughput.since_last_totals(totals)
            if deltas is not None:
                completed = {q: deltas.get(q, 0) for q in completed.keys() | deltas.keys()}
        self.throughput.record(since, until, completed)
        for summary in by_queue.values():
            summary.throughput = self.throughput.of(summary.queue)
        return [by_queue[name] for name in sorted(by_queue)]

    async def _runtimes(self, engine: ReadEngine) -> list[RuntimeSummary]:
        self.statements += 1
        return self._runtime_summaries(
            await engine.runtime_instances(self.session.conn, limit=RUNTIME_LIMIT))

    def _runtime_summaries(self, instances: list[RuntimeInstance]) -> list[RuntimeSummary]:
        return [RuntimeSummary(**{f.name: getattr(r, f.name) for f in fields(r)},
                               stale_after_s=self.stale_after_s) for r in instances]

    # -- running ----------------------------------------------------------------
    async def running(self, min_age_s: float = 0.0) -> RunningSnapshot:
        engine = await self._engine()
        async with self.session.read() as cur:
            now = await self._now(cur)
            started_before = now - timedelta(seconds=min_age_s)
            self.statements += 1
            rows = [shallow(a) for a in await engine.running_attempts(
                self.session.conn, started_before=started_before, limit=self.row_limit)]
            runtimes = await self._runtimes(engine)
        attempts = []
        by_id = {rt.instance_id: rt for rt in runtimes}
        for r in rows:
            serving = [rt for rt in runtimes if rt.serves(r["queue"])]
            live = [rt.label() for rt in serving if rt.live(now) and not rt.shutting_down]
            owner: str | None = None
            gone: str | None = None
            claimer = by_id.get(r["claimed_by"]) if r["claimed_by"] is not None else None
            timing = attempt_timing(runtimes, r["queue"], r["claimed_by"],
                                    is_live=lambda rt: rt.live(now),
                                    stale_after_s=self.stale_after_s)
            if r["claimed_by"] is not None:
                if claimer is None:  # pruned from the registry long ago
                    gone = f"runtime {r['claimed_by'][:8]}"
                elif claimer.live(now):
                    owner = claimer.label()
                else:
                    gone = claimer.label()
            else:
                # Not recorded: the dead runtime serving the queue whose last report is
                # closest to the attempt's last heartbeat.
                dead = [rt for rt in runtimes if not rt.live(now) and rt.serves(r["queue"])]
                anchor = r["heartbeat_at"] or r["attempted_at"] or now
                likely = min(dead, key=lambda rt: abs((rt.last_seen_at - anchor).total_seconds()),
                             default=None)
                gone = likely.label() if likely is not None else None
            attempts.append(RunningAttempt(
                id=r["id"], kind=r["kind"], queue=r["queue"], attempt=r["attempt"],
                max_attempts=r["max_attempts"], run_lease=r["run_lease"],
                attempted_at=r["attempted_at"], heartbeat_at=r["heartbeat_at"],
                deadline_at=r["deadline_at"], servers=live, gone=gone,
                claimed_by=r["claimed_by"], owner=owner, stale_after_s=timing.stale_after_s,
                grace_s=timing.grace_s))
        return RunningSnapshot(now, attempts, truncated=len(rows) >= self.row_limit)

    # -- jobs ---------------------------------------------------------------------
    async def jobs(self, flt: JobFilter) -> JobsPage:
        query = JobListQuery(state=flt.state, queue=flt.queue, kind=flt.kind, tag=flt.tag,
                             args=flt.args, page=self.row_limit, window=self.scan_window,
                             max_pairs=MAX_PAIRS)
        engine = await self._engine()
        async with self.session.read() as cur:
            now = await self._now(cur)
            self.statements += 1
            rows = await engine.job_page(self.session.conn, query)
        return JobsPage(now, [shallow(r) for r in rows], windowed=query.post_filtered)

    async def job(self, job_id: int) -> JobDetail | None:
        engine = await self._engine()
        async with self.session.read() as cur:
            now = await self._now(cur)
            self.statements += 1
            record = await engine.job_record(self.session.conn, job_id,
                                             cap_bytes=self.value_cap)
            if record is None:
                return None
            holder = None
            if record.job.unique_key is not None:
                self.statements += 1
                held = await engine.unique_claim_holders(self.session.conn,
                                                         [record.job.unique_key])
                holder = asdict(held[0]) if held else None
            claimer = None
            if record.claimed_by is not None:
                claimer = ClaimingRuntime(record.claimed_by)
                found = [rt for rt in await self._runtimes(engine)
                         if rt.instance_id == record.claimed_by]
                if found:
                    claimer.label, claimer.live = found[0].label(), found[0].live(now)
                    claimer.last_seen_at = found[0].last_seen_at
        row = job_row(record)
        row["claimed_by"] = record.claimed_by
        return JobDetail(now, row, record.in_dlq, holder, claimer, dict(record.oversized))

    # -- diagnostics ---------------------------------------------------------------
    async def diagnostics(self, min_age_s: float = 0.0) -> list[CheckResult]:
        """``awa-ops diagnose all`` on this session, with the console's thresholds."""
        options = diagnose.Options(min_age_s=min_age_s or None,
                                   heartbeat_staleness_s=self.stale_after_s)
        return await diagnose.run_all(self.session, options)

    # -- DLQ ----------------------------------------------------------------------
    async def dlq(self, flt: DlqFilter) -> DlqPage:
        query = DlqPageQuery(queue=flt.queue, kind=flt.kind, reason=flt.reason,
                             page=self.row_limit, window=self.scan_window)
        engine = await self._engine()
        async with self.session.read() as cur:
            now = await self._now(cur)
            self.statements += 1
            page = await engine.dlq_page(self.session.conn, query)
        rows = [shallow(e) for e in page.entries]
        groups = group_errors(rows)
        for row in rows:
            row["fingerprint"] = fingerprint(row["last_error"])
        if flt.group:
            rows = [r for r in rows if r["fingerprint"] == flt.group]
        by_reason: dict[str, int] = {}
        for row in rows:
            by_reason[row["dlq_reason"]] = by_reason.get(row["dlq_reason"], 0) + 1
        scanned = len(page.entries)
        return DlqPage(now, rows, by_reason, groups, scanned,
                       truncated=scanned >= self.row_limit)


def job_row(record: JobRecord) -> dict[str, Any]:
    """A job as the detail screen reads it: its columns by name, plus where it sits."""
    job = record.job
    row = {column: getattr(job, column) for column in JOB_COLUMNS}
    row["state"] = job.state.value
    row["dlq_reason"] = record.dlq_reason
    row["dlq_at"] = record.dlq_at
    return row


# --- operator actions ---------------------------------------------------------

def operator_name() -> str:
    """Who to record as ``paused_by``: the console and the operator's login."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{config.APP_NAME_TUI} {user}@{socket.gethostname()}"


# Filter-wide retry / cancel: the states each applies to (as the REST API's previews).
RETRYABLE_STATES = ("failed", "cancelled", "waiting_external")
CANCELLABLE_STATES = ("scheduled", "available", "running", "retryable", "waiting_external")


@dataclass(frozen=True)
class FilterPreview:
    """What a filter-wide action would touch now: at most ``cap`` ids, newest first."""

    ids: list[int]
    truncated: bool


def batch_filter(flt: JobFilter) -> dict[str, Any]:
    """A jobs-screen filter as a batch operation's filter (awa.batch_operations.FILTER_KEYS)."""
    return {"state": flt.state, "kind": flt.kind, "queue": flt.queue, "tag": flt.tag}


def describe_batch_operation(op: BatchOperation) -> str:
    """One line: what an operation does, its state and its progress."""
    spec = op.spec
    what = (f"priority -> {spec['priority']}" if op.op_kind == "set_priority" else
            f"queue -> {spec['queue']}" + (f" priority {spec['priority']}"
                                            if spec.get("priority") else ""))
    done = op.processed + op.skipped + op.errored
    total = op.total_matched
    flt = " ".join(f"{k}={v}" for k, v in op.filter.items() if v) or "all jobs"
    return (f"{str(op.id)[:8]} {op.state:<10} {what} [{flt}]: "
            f"{done}/{'?' if total is None else total} ({op.processed} changed, "
            f"{op.skipped} skipped, {op.errored} errored)")


class ConsoleActions(AdminMixin, BatchOperationsMixin):
    """The CLI's admin functions (awa.admin, awa.batch_operations), run on the console's own
    session.

    Each action is one bounded write transaction (``OpsSession.write``), so a
    bulk action applies to all tagged rows or to none; on a ``--read-only``
    session PostgreSQL itself refuses it ("cannot execute ... in a read-only
    transaction").  Each returns the one line the console shows.
    """

    def __init__(self, session: OpsSession) -> None:
        self.session = session
        self._engine: Engine | None = None

    async def _get_engine(self) -> Engine:
        if self._engine is None:  # decided once, as the client does
            self._engine = await open_engine(self.session.conn)
        return self._engine

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        # The session's connection, in the read or write transaction the action opened.
        yield self.session.conn

    async def cancel_jobs(self, ids: list[int]) -> str:
        async with self.session.write():
            done = [i for i in ids if await self._cancel_job(i) is not None]
        return _outcome("cancelled", done, ids, "already finished or gone")

    async def retry_jobs(self, ids: list[int]) -> str:
        async with self.session.write():
            done = [i for i in ids if await self._retry_job(i) is not None]
        return _outcome("retried", done, ids, "not failed or cancelled")

    async def matching_ids(self, states: tuple[str, ...], flt: JobFilter,
                           cap: int = config.SERVE_BULK_PREVIEW_MAX) -> FilterPreview:
        """The jobs in ``states`` the filter (state, kind, queue, tag) matches now, newest
        first, keyset-paged in one read transaction: a filter-wide action confirms and
        then acts on exactly these, never on what matches only later."""
        wanted = (flt.state,) if flt.state else states
        ids: list[int] = []
        async with self.session.read():
            for state in wanted:
                before: int | None = None
                while len(ids) <= cap:
                    limit = min(config.SERVE_JOBS_MAX_LIMIT, cap + 1 - len(ids))
                    page = await self.list_jobs(state=state, kind=flt.kind, queue=flt.queue,
                                                tag=flt.tag, limit=limit, before_id=before)
                    ids += [j.id for j in page]
                    if len(page) < limit:
                        break
                    before = page[-1].id
        ids = sorted(ids, reverse=True)
        return FilterPreview(ids[:cap], len(ids) > cap)

    async def batch_preview(self, op_kind: str, flt: JobFilter,
                            spec: dict[str, Any]) -> tuple[int, list[int]]:
        """How many jobs the batch operation would change now, and the first ids."""
        async with self.session.read():
            count, sample = await self.preview_batch_operation(op_kind, batch_filter(flt), spec)
        return count, [j.id for j in sample]

    async def batch_submit(self, op_kind: str, flt: JobFilter, spec: dict[str, Any]) -> str:
        async with self.session.write():
            op = await self.submit_batch_operation(op_kind, batch_filter(flt), spec,
                                                   submitted_by=operator_name())
        return (f"submitted batch operation {op.id}: the workers' maintenance leader "
                "runs it (B shows its progress)")

    async def batch_operations(self, limit: int = 20) -> list[str]:
        """The newest operations, one line each (active ones first)."""
        async with self.session.read():
            ops = await self.list_batch_operations(limit=limit)
        active = [o for o in ops if o.state in ("pending", "scanning", "running", "cancelling")]
        return [describe_batch_operation(o) for o in active + [o for o in ops
                                                               if o not in active]]

    async def batch_cancel(self, op_id: str) -> str:
        """Cancel by id, or by a prefix of one (as the list shows them) naming exactly one."""
        async with self.session.write():
            known = [str(o.id) for o in await self.list_batch_operations(limit=1000)]
            chosen = [i for i in known if i.startswith(op_id.strip().lower())]
            op = await self.cancel_batch_operation(chosen[0] if len(chosen) == 1 else op_id)
        return f"batch operation {op.id}: cancelling (the runner stops at its next chunk)"

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

    async def dlq_matching(self, flt: DlqFilter,
                           cap: int = config.SERVE_BULK_PREVIEW_MAX) -> tuple[list[int], bool]:
        """The DLQ entries the screen's filter (queue, kind, reason, cause) selects now, newest
        first, at most ``cap`` (and whether there were more): the one selection rule of
        ``awa dlq retry-bulk|purge`` (awa.bulk_selection), so the console acts on what the CLI
        would."""
        async with self.session.read():
            found = await self.select_bulk(BulkFilter(DLQ_PLACE, kind=flt.kind, queue=flt.queue,
                                                      reason=flt.reason,
                                                      fingerprint=flt.group), limit=cap + 1)
        return [t.job_id for t in found[:cap]], len(found) > cap

    async def dlq_move(self, queue: str, reason: str = lifecycle.DLQ_MANUAL) -> str:
        async with self.session.write():
            moved = await self.bulk_move_failed_to_dlq(queue=queue, reason=reason)
        return f"moved {moved} failed job(s) of queue {queue} into the DLQ ({reason})"


def _outcome(verb: str, done: list[int], asked: list[int], why_not: str) -> str:
    shown = ", ".join(str(i) for i in done[:10]) + (" ..." if len(done) > 10 else "")
    line = f"{verb} {len(done)} job(s)" + (f": {shown}" if done else "")
    skipped = len(asked) - len(done)
    return line + (f"; {skipped} skipped ({why_not})" if skipped else "")
