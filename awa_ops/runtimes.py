"""Runtime liveness as the database sees it (awa.runtime_instances).

Several checks need "which runtimes are alive, which serve this queue": a
runtime is live while its ``last_seen_at`` is within 2 of its own
snapshot intervals (``runtime_live``, the one copy of that rule).  The one
running-attempt classifier (``classify_attempt``) lives here too, since it
rests on liveness; the console and ``diagnose stuck-running`` both use it.
A running attempt names the runtime that claimed it (``claimed_by``, recorded
at claim since migration 0004); for an attempt without it (claimed before,
or a layout that does not record it) the runtime that held a stale attempt
is inferred: a dead runtime serving the attempt's queue whose last report is
closest to the attempt's last heartbeat (``inferred_owner``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from awa import config
from awa.liveness import live_window_s, runtime_live
from awa.runtime.leader import leader_instance_of
from awa.storage.engine import RunningCounts, RuntimeInstance
from awa_ops.session import OpsSession
from awa_ops.storage import storage_engine

# --- the one liveness rule (awa.liveness, shared with `awa health`) -------------

# A snapshot later than its interval by more than this is overdue.
SNAPSHOT_SLACK_S = 1.0

# The leader's session advisory lock (config.ADVISORY_LOCK_LEADER, 'AWA_MAIN'): the same
# key in every awa distribution.  Held right now by anyone, and by which backend?  (Pure
# catalogue reads; a session's application_name is visible to every role.)  Our runtimes
# name their lock connection ``awa-leader <instance id>`` (awa.runtime.leader), so the
# holder is known by name before its snapshot says so.
LEADER_LOCK_HELD = """
SELECT count(*) > 0 AS held, min(l.pid) AS pid, min(a.application_name) AS application_name
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.database = (
       SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid = ((%(key)s::bigint >> 32) & x'ffffffff'::bigint)::oid
   AND l.objid = (%(key)s::bigint & x'ffffffff'::bigint)::oid AND l.objsubid = 1
"""


@dataclass(frozen=True)
class LeaderLock:
    """Who holds the leader lock right now, as a read-only reader can tell."""

    held: bool
    pid: int | None = None  # the holder's server backend pid
    application_name: str | None = None
    # The runtime that holds it (from ``awa-leader <instance id>``); None when the holder
    # does not say (an older runtime's bare ``awa-leader``, another distribution).
    instance_id: str | None = None

    @classmethod
    def of_row(cls, row: dict[str, Any] | None) -> LeaderLock:
        if not row or not row.get("held"):
            return cls(False)
        name = row.get("application_name")
        return cls(True, row.get("pid"), name, leader_instance_of(name))

    def holder(self) -> str:
        """The holding backend, for a message: ``backend pid 123 (awa-leader)``."""
        name = config.APP_NAME_LEADER if self.instance_id else self.application_name
        return f"backend pid {self.pid} ({name or 'no application_name'})"


async def leader_lock(session: OpsSession) -> LeaderLock:
    return LeaderLock.of_row(await session.fetch_one(LEADER_LOCK_HELD,
                                                     {"key": config.ADVISORY_LOCK_LEADER}))


async def leader_lock_held(session: OpsSession) -> bool:
    return (await leader_lock(session)).held


# --- each runtime's own heartbeat timing ----------------------------------------

DEFAULT_STALENESS_S = config.HEARTBEAT_STALENESS_MS / 1000
DEFAULT_INTERVAL_S = config.HEARTBEAT_INTERVAL_MS / 1000


@dataclass(frozen=True)
class Timing:
    """The heartbeat staleness cutoff and the overdue grace (one heartbeat interval) to
    judge an attempt by."""

    stale_after_s: float
    grace_s: float


def judging_timing(published: Iterable[Any], *, stale_after_s: float | None = None,
                   interval_s: float | None = None, fallback: Timing | None = None) -> Timing:
    """The timing to judge attempts run by these runtimes (anything carrying the registry's
    ``heartbeat_staleness_ms`` / ``heartbeat_interval_ms``): values given (flags) override;
    else the largest the runtimes published (a job they run is only stale by the most
    patient of their cutoffs); else ``fallback``, else the config defaults (a runtime that
    publishes none, e.g. awa-pg 0.6.9)."""
    published = list(published)
    staleness = [r.heartbeat_staleness_ms for r in published if r.heartbeat_staleness_ms]
    intervals = [r.heartbeat_interval_ms for r in published if r.heartbeat_interval_ms]
    fallback = fallback or Timing(DEFAULT_STALENESS_S, DEFAULT_INTERVAL_S)
    return Timing(
        stale_after_s if stale_after_s is not None
        else max(staleness) / 1000 if staleness else fallback.stale_after_s,
        interval_s if interval_s is not None
        else max(intervals) / 1000 if intervals else fallback.grace_s)


def attempt_timing(runtimes: Sequence[Any], queue: str, claimed_by: str | None, *,
                   is_live: Callable[[Any], bool], stale_after_s: float | None = None,
                   interval_s: float | None = None, fallback: Timing | None = None) -> Timing:
    """The timing one running attempt is judged by -- the one rule of the console,
    ``diagnose stuck-running``, ``diagnose heartbeats`` and the exporter: that of the runtime
    that claimed it (``claimed_by``, when still registered), else of the live runtimes
    serving its queue, else of every registered one that served it; flags override.
    ``runtimes`` carry ``instance_id``, ``serves(queue)`` and the published timing;
    ``is_live`` says whether one is live (each caller has its own clock)."""
    claimer = next((r for r in runtimes if r.instance_id == claimed_by), None) \
        if claimed_by else None
    if claimer is not None:
        published = [claimer]
    else:
        serving = [r for r in runtimes if r.serves(queue)]
        published = [r for r in serving if is_live(r)] or serving
    return judging_timing(published, stale_after_s=stale_after_s, interval_s=interval_s,
                          fallback=fallback)


# --- the one running-attempt classifier ---------------------------------------

# Running-attempt classes, worst first.
OVERDUE, ORPHANED, STALE, ALIVE = "overdue", "orphaned", "stale", "alive"
# How `awa-ops diagnose stuck-running` spells them in its report (the guide's words).
REPORT_NAMES = {OVERDUE: "deadline overdue", ORPHANED: "orphaned", STALE: "stale",
                ALIVE: "alive"}


def past_deadline(deadline_remaining_s: float | None, grace_s: float) -> bool:
    """The one "overdue" rule: past the hard deadline by more than the grace (one heartbeat
    interval of the attempt's runtime)."""
    return deadline_remaining_s is not None and deadline_remaining_s < -grace_s


def classify_attempt(*, heartbeat_age_s: float | None, deadline_remaining_s: float | None,
                     stale_after_s: float, owner_gone: bool, served: bool,
                     overdue_grace_s: float = 0.0) -> str:
    """The class of a running attempt.

    overdue: past its hard deadline by more than ``overdue_grace_s`` (one heartbeat
    interval: the runtime ends an attempt at its deadline on its next beat, so a job
    a moment past it is not news; deadline rescue takes it); orphaned: the runtime
    that ran it is gone (``owner_gone``: the claimer it names is not live, or -- for
    an attempt that names none -- a dead runtime inferred from its stale heartbeat),
    so no heartbeat will come and rescue will retry it, even before it is stale; or
    no live runtime serves the queue at all; stale: heartbeat older than the cutoff
    while its runtime lives; alive otherwise.
    """
    if past_deadline(deadline_remaining_s, overdue_grace_s):
        return OVERDUE
    stale = heartbeat_age_s is not None and heartbeat_age_s > stale_after_s
    if owner_gone or not served:
        return ORPHANED
    return STALE if stale else ALIVE


# --- the runtime registry as awa-ops reads it ----------------------------------


def speaks(version: str | None, schema_version: int | None, layout_version: int | None, *,
           short: bool = False) -> str:
    """A runtime's release and the layout its code speaks, e.g. ``awa-py 0.2.0, layout 8``
    (``short``: ``0.2.0 L8``, ``S7`` for a schema version alone, ``L?`` when not recorded):
    live runtimes that differ here are a fleet in the middle of a rolling upgrade."""
    if short:
        said = ("L?" if schema_version is None else f"L{layout_version}"
                if layout_version is not None else f"S{schema_version}")
        return f"{version or '?'} {said}"
    said = ("layout not recorded" if schema_version is None
            else f"layout {layout_version}" if layout_version is not None
            else f"schema {schema_version}")
    return f"awa-py {version or '?'}, {said}"

@dataclass
class Runtime:
    row: dict[str, Any]
    queues: set[str] = field(default_factory=set)
    stale_after_s: float | None = None  # the heartbeat staleness cutoff in use

    @classmethod
    def of(cls, instance: RuntimeInstance, stale_after_s: float | None = None) -> Runtime:
        return cls(asdict(instance), set(instance.queues), stale_after_s)

    @property
    def instance_id(self) -> str:
        return str(self.row["instance_id"])

    @property
    def age_s(self) -> float:
        return float(self.row["last_seen_age_s"])

    @property
    def window_s(self) -> float:
        return live_window_s(int(self.row["snapshot_interval_ms"]), self.stale_after_s)

    @property
    def live(self) -> bool:
        return runtime_live(self.age_s, int(self.row["snapshot_interval_ms"]), self.stale_after_s)

    @property
    def interval_s(self) -> float:
        return int(self.row["snapshot_interval_ms"]) / 1000

    @property
    def snapshot_overdue(self) -> bool:
        """Its next snapshot is late (one interval and a second of slack): maybe dead.

        Not yet "gone" (that takes ``live_window_s``), but its flags are no
        longer news: a leader flag this old may have passed to another runtime.
        """
        return self.age_s > self.interval_s + SNAPSHOT_SLACK_S

    @property
    def heartbeat_staleness_ms(self) -> int | None:
        """Its own staleness cutoff, as its snapshot published it (None: it did not)."""
        return self.row.get("heartbeat_staleness_ms")

    @property
    def heartbeat_interval_ms(self) -> int | None:
        return self.row.get("heartbeat_interval_ms")

    @property
    def speaks(self) -> str:
        return speaks(self.row.get("version"), self.row.get("schema_version"),
                      self.row.get("layout_version"))

    @property
    def draining(self) -> bool:
        """Stopping cleanly (``shutting_down``): finishing its jobs, claiming no more."""
        return bool(self.row["shutting_down"])

    @property
    def recently_gone(self) -> bool:
        return not self.live and self.age_s <= config.OPS_RUNTIME_GONE_S

    @property
    def leader(self) -> bool:
        return bool(self.row["leader"])

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues

    def label(self) -> str:
        """``host:pid (id)``; the Rust-core runtimes leave hostname empty: ``pid N (id)``."""
        host, pid = self.row["hostname"], self.row["pid"]
        where = f"{host}:{pid}" if host else f"pid {pid if pid is not None else '?'}"
        return f"{where} ({self.instance_id[:8]})"

    @property
    def status(self) -> str:
        """``live``, ``draining`` (stopping cleanly), ``stopped`` (shut down cleanly: its
        last snapshot said so) or ``gone`` (vanished: crash, OOM kill, SIGKILL)."""
        if self.live:
            return "draining" if self.draining else "live"
        return "stopped" if self.draining else "gone"

    def bad_flags(self) -> list[str]:
        flags = ["healthy", "postgres_connected", "poll_loop_alive", "heartbeat_alive"]
        if self.leader:
            flags.append("maintenance_alive")
        return [f for f in flags if not self.row[f]]

    def evidence(self) -> dict[str, Any]:
        """One compact row: who, whether it lives, and -- only while it does -- its flags
        and leadership (a dead runtime's last flags are history, not news)."""
        out: dict[str, Any] = {"runtime": self.label(), "status": self.status,
                               "last_seen_age_s": round(max(self.age_s, 0.0), 1)}
        if self.live:
            bad = self.bad_flags()
            out["flags"] = "ok" if not bad else " ".join(f"!{f}" for f in bad)
            out["leader"] = self.leader
        else:
            out["flags"] = "-"
            out["leader"] = "was leader" if self.leader else "-"
        out["instance_id"] = self.instance_id
        return out


async def load_runtimes(session: OpsSession, stale_after_s: float | None = None) -> list[Runtime]:
    """Every registered runtime, leader first, then the most recently seen."""
    engine = await storage_engine(session)
    async with session.read():
        instances = await engine.runtime_instances(session.conn)
    runtimes = [Runtime.of(i, stale_after_s) for i in instances]
    runtimes.sort(key=lambda r: (not r.leader, r.age_s))
    return runtimes


def inferred_owner(runtimes: list[Runtime], queue: str,
                   heartbeat_age_s: float | None) -> Runtime | None:
    """The dead runtime most likely to have held an attempt whose heartbeats stopped."""
    dead = [r for r in runtimes if not r.live and r.serves(queue)]
    if not dead:
        return None
    if heartbeat_age_s is None:
        return min(dead, key=lambda r: r.age_s)
    return min(dead, key=lambda r: abs(r.age_s - heartbeat_age_s))


def live_servers(runtimes: list[Runtime], queue: str) -> list[Runtime]:
    return [r for r in runtimes if r.live and not r.row["shutting_down"] and r.serves(queue)]


# --- running attempts per queue, each judged by its own runtime's timing ----------

@dataclass(frozen=True)
class JudgedCounts:
    """Per queue with running attempts: how many, the oldest heartbeat, and how many are
    stale or overdue, each attempt judged by its own runtime's timing (``attempt_timing``);
    ``cutoffs``: the staleness cutoffs its stale attempts were judged by (else its
    runtimes')."""

    queue: str
    running: int
    oldest_heartbeat_s: float | None
    stale: int
    overdue: int
    cutoffs: tuple[float, ...]


async def judged_running_counts(conn: Any, reads: Any, runtimes: list[Runtime], *,
                                stale_after_s: float | None = None,
                                interval_s: float | None = None,
                                fallback: Timing | None = None, queue: str | None = None,
                                limit: int = config.OPS_JUDGED_ATTEMPTS_LIMIT
                                ) -> list[JudgedCounts]:
    """Stale and overdue running attempts per queue, by ``attempt_timing`` and
    ``past_deadline`` (call inside a read transaction on ``conn``).

    One count statement at the most lenient rule in use (the smallest staleness cutoff any
    runtime publishes, no grace) finds the queues where an attempt may be stale or
    overdue; in the usual case there are none and that is the answer.  Only then are the
    running attempts read (oldest heartbeat first, at most ``limit``) and each judged by
    its own runtime's timing.  Past ``limit`` attempts the lenient counts stand (an
    over-count, never a miss)."""
    fallback = fallback or Timing(DEFAULT_STALENESS_S, DEFAULT_INTERVAL_S)
    published = [r.heartbeat_staleness_ms / 1000 for r in runtimes if r.heartbeat_staleness_ms]
    lenient = stale_after_s if stale_after_s is not None else min(
        [fallback.stale_after_s, *published])
    counts: list[RunningCounts] = await reads.running_counts(conn, stale_after_s=lenient,
                                                             queue=queue)

    def timing(q: str, claimed_by: str | None) -> Timing:
        return attempt_timing(runtimes, q, claimed_by, is_live=lambda r: r.live,
                              stale_after_s=stale_after_s, interval_s=interval_s,
                              fallback=fallback)

    suspect = {c.queue for c in counts if c.stale or c.overdue}
    judged: dict[str, tuple[int, int, set[float]]] = {}
    if suspect:
        attempts = await reads.running_attempts(conn, limit=limit)
        if len(attempts) < limit:
            judged = {q: (0, 0, set()) for q in suspect}
            for a in attempts:
                if a.queue not in judged:
                    continue
                t = timing(a.queue, a.claimed_by)
                stale, overdue, cutoffs = judged[a.queue]
                is_stale = a.heartbeat_age_s is not None and a.heartbeat_age_s > t.stale_after_s
                judged[a.queue] = (stale + is_stale,
                                   overdue + past_deadline(a.deadline_remaining_s, t.grace_s),
                                   cutoffs | {t.stale_after_s} if is_stale else cutoffs)
    out = []
    for c in counts:
        stale, overdue, cutoffs = judged.get(c.queue, (c.stale, c.overdue, set()))
        if c.queue in suspect and c.queue not in judged:
            cutoffs = {lenient}
        out.append(JudgedCounts(c.queue, c.running, c.oldest_heartbeat_s, stale, overdue,
                                tuple(sorted(cutoffs or {timing(c.queue, None).stale_after_s}))))
    return out
