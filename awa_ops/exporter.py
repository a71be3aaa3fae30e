"""`awa-ops exporter`: Prometheus metrics computed from the database at scrape time.

They keep working when every worker is dead, which is exactly when alerts
matter.  One scrape is one short read-only transaction of a fixed number of
index-backed queries under a statement timeout; names, labels and help come
from the DATABASE section of the metric catalogue (awa/metrics.py).  On a
queue-storage database it also reports each partition ring (position,
generation, occupied slots, time since its last rotation) through the storage
engine's ``ring_states`` read; canonical has no rings and reports none.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from awa import config, db, lifecycle, metrics
from awa.known_queues import CONFIGURED_QUEUES, has_waiting, known_queues, unserved_queues
from awa.liveness import runtime_live
from awa.storage.engine import RingState, RuntimeInstance
from awa_ops.cron import lateness
from awa_ops.diagnose.dead_tuples import churn_query
from awa_ops.replication import STANDBYS_WORST
from awa_ops.replication import STATE as REPLICATION_STATE
from awa_ops.replication import from_row as replication_from_row
from awa_ops.runtimes import (
    LEADER_LOCK_HELD,
    Runtime,
    attempt_timing,
    judged_running_counts,
    judging_timing,
)
from awa_ops.session import OpsSession
from awa_ops.storage import DetectedEngine, column_exists, detect_engine, storage_engine

log = logging.getLogger("awa_ops.exporter")
# Storage layout is re-detected this often, so a storage transition is noticed.
ENGINE_RECHECK_S = 60.0

# Depth counts stop here (the engine's read is bounded): a queue deeper than
# this reports the cap, which every depth alert fires on long before.
DEPTH_CAP = 1_000_000
# Runtimes read per scrape, most recently seen first: more than ever live at once.
RUNTIME_LIMIT = 1_000

# Not counted: a leader behind a transaction pooler holds its lock in an open transaction
# with no xid and, idle, no snapshot (awa.runtime.leader): it pins nothing.
TRANSACTIONS = f"""
SELECT coalesce(state, 'unknown') AS state,
       max(EXTRACT(EPOCH FROM (now() - xact_start)))::float8 AS oldest_s
FROM pg_stat_activity
WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
  AND NOT (split_part(application_name, ' ', 1) = '{config.APP_NAME_LEADER}'
           AND backend_xid IS NULL
           AND state = 'idle in transaction')
GROUP BY 1
"""
HORIZON = """
SELECT 'transaction' AS source,
       max(EXTRACT(EPOCH FROM (now() - xact_start)))::float8 AS age_s,
       max(greatest(age(backend_xmin), age(backend_xid))) AS xid_age
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
  AND (datname = current_database() OR datname IS NULL)
  AND backend_type <> 'autovacuum worker'
UNION ALL
SELECT 'replication_slot', NULL, max(age(xmin)) FROM pg_replication_slots WHERE xmin IS NOT NULL
UNION ALL
SELECT 'replication_slot_catalog', NULL, max(age(catalog_xmin)) FROM pg_replication_slots
WHERE catalog_xmin IS NOT NULL
UNION ALL
SELECT 'standby_feedback', NULL, max(age(backend_xmin)) FROM pg_stat_replication
WHERE backend_xmin IS NOT NULL
UNION ALL
SELECT 'prepared_transaction', max(EXTRACT(EPOCH FROM (now() - prepared)))::float8,
       max(age(transaction)) FROM pg_prepared_xacts WHERE database = current_database()
"""
# The slots that hold a data xmin, for their age in seconds: PostgreSQL records no time
# for a slot's xmin, so the exporter times how long it has seen each one inactive with the
# same xmin (an active slot's xmin follows its consumer; standby_feedback covers that).
# Every slot: the xmin it holds (the horizon's age for an inactive one) and the WAL it keeps
# (NULL on a standby, where the current WAL position cannot be read).
SLOTS = """
SELECT slot_name, active, xmin::text AS xmin,
       CASE WHEN pg_is_in_recovery() OR restart_lsn IS NULL THEN NULL
            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::float8
       END AS retained_wal_bytes
FROM pg_replication_slots
ORDER BY slot_name
"""
NOTIFY_USAGE = "SELECT pg_notification_queue_usage()::float8 AS usage"
# Queues an operator configured (paused, sharded): known even while empty.
QUEUE_META_QUEUES = CONFIGURED_QUEUES
# Per-queue series are emitted, zeros included, for every known queue
# (awa.known_queues.known_queues), at most this many.
KNOWN_QUEUE_LIMIT = config.OPS_KNOWN_QUEUE_LIMIT
DB_NOW = "SELECT now() AS now"
# The dlq_reason label of a queue's zero DLQ series (and of an entry without a reason).
NO_REASON = metrics.UNSET_LABEL_VALUE


def _spec(name: str) -> metrics.MetricSpec:
    return metrics.by_name(name)


def _family(name: str) -> tuple[GaugeMetricFamily, metrics.MetricSpec]:
    spec = _spec(name)
    return GaugeMetricFamily(spec.prometheus, spec.help, labels=list(spec.labels)), spec


class DatabaseCollector(Collector):
    """Computes every DATABASE metric of the catalogue, per scrape."""

    def __init__(self, url: str, heartbeat_staleness_s: float | None = None):
        self.url = url
        # None: each queue's attempts are judged by the staleness its runtimes publish.
        self.staleness = heartbeat_staleness_s
        self._session: OpsSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._engine_checked_at = 0.0
        # (database now, completions per queue) of the previous scrape, where the engine
        # keeps lifetime totals: the rate is then their difference, exact even for
        # completions whose rows were folded away between two scrapes.
        self._last_totals: tuple[datetime, dict[str, int]] | None = None
        # (slot, xmin) -> when this exporter first saw that slot inactive holding that xmin
        self._slot_inactive_since: dict[tuple[str, str], float] = {}

    # --- the async core (usable directly from tests and benchmarks) --------
    async def _ensure_session(self) -> OpsSession:
        if self._session is None or self._session.conn.closed:
            self._session = await OpsSession.open(
                self.url, statement_timeout_ms=config.OPS_EXPORTER_STATEMENT_TIMEOUT_MS)
        return self._session

    async def scrape(self) -> list[Metric]:
        started = time.perf_counter()
        families: list[Metric] = []
        ok = 1.0
        try:
            session = await self._ensure_session()
            if time.monotonic() - self._engine_checked_at > ENGINE_RECHECK_S:
                session.cache.clear()
                self._engine_checked_at = time.monotonic()
            engine = await detect_engine(session)
            if engine.installed:
                families = await self._database_metrics(session, engine)
        except Exception as exc:  # a failed scrape is reported as a metric, never as an HTTP 500
            log.warning("awa-ops exporter: scrape failed: %s", db.one_line(exc))
            ok = 0.0
            if self._session is not None and self._session.conn.closed:
                self._session = None
        if not families and ok:
            log.warning("awa-ops exporter: no awa schema in this database (run `awa migrate`)")
            ok = 0.0  # nothing to report is itself a failure worth alerting on
        duration, _ = _family("awa.db.exporter.scrape_duration")
        duration.add_metric([], time.perf_counter() - started)
        success, _ = _family("awa.db.exporter.scrape_success")
        success.add_metric([], ok)
        return [*families, duration, success]

    async def _database_metrics(self, session: OpsSession,
                                engine: DetectedEngine) -> list[Metric]:
        reads = await storage_engine(session)
        with_meta = await column_exists(session, "awa", "queue_meta", "queue")
        # One short read-only transaction: the catalogue queries, then the job reads.
        async with session.read() as cur:
            catalogue = []
            for query in (TRANSACTIONS, HORIZON, NOTIFY_USAGE, churn_query(engine),
                          REPLICATION_STATE, SLOTS):
                await cur.execute(query)
                catalogue.append(await cur.fetchall())
            txns, horizon, notify, tables, replication_rows, slots = catalogue
            standbys_worst: dict[str, Any] | None = None
            if replication_rows and not replication_rows[0]["standby"]:
                await cur.execute(STANDBYS_WORST)
                standbys_worst = await cur.fetchone()
            dlq = [(d.queue, d.reason, d.count) for d in await reads.dlq_depths(session.conn)]
            runtimes = await reads.runtime_instances(session.conn, limit=RUNTIME_LIMIT)
            running = await self._running_counts(session, reads, runtimes)
            await cur.execute(LEADER_LOCK_HELD, {"key": config.ADVISORY_LOCK_LEADER})
            lock_held = bool((await cur.fetchone() or {}).get("held"))
            depths = await reads.queue_depths(session.conn, cap=DEPTH_CAP)
            wedged_rows = await reads.wedged_claims(session.conn)
            # Superseded is not wedged: a running attempt whose unique key a newer job took
            # (a mask without running admits one) is normal while it runs and heartbeats,
            # and rescue cancels it once stale.  Only one past its runtime's staleness --
            # rescue should be moving it and is not -- counts (as for diagnose unique-wedge).
            wedged_by_queue = await self._stale_superseded(
                session, reads, {w.queue for w in wedged_rows if w.wedged}, runtimes)
            rings = await reads.ring_states(session.conn)  # queue storage only; else []
            cron = [lateness(c) for c in await reads.list_active_cron_jobs(session.conn)]
            configured: list[str] = []
            if with_meta:
                await cur.execute(QUEUE_META_QUEUES, {"limit": KNOWN_QUEUE_LIMIT})
                configured = [r["queue"] for r in await cur.fetchall()]
            queues = known_queues(
                holding=({d.queue for d in depths} | {q for q, _, _ in dlq}
                         | {r[0] for r in running} | {w.queue for w in wedged_rows}),
                configured=configured, descriptors=await reads.descriptors(session.conn),
                runtimes=runtimes, limit=KNOWN_QUEUE_LIMIT,
                recent=await reads.recently_completed_queues(
                    session.conn, within_s=config.OPS_KNOWN_QUEUE_HISTORY_S,
                    limit=KNOWN_QUEUE_LIMIT))
            await cur.execute(DB_NOW)
            until = (await cur.fetchall())[0]["now"]
            since = until - timedelta(seconds=config.OPS_COMPLETED_WINDOW_S)
            details = await reads.queue_details(session.conn, queues, since=since, until=until,
                                                cap=DEPTH_CAP)
            totals = await reads.completed_totals(session.conn)
        out: list[Metric] = []
        live_runtimes = [r for r in runtimes if runtime_live(
            r.last_seen_age_s, r.snapshot_interval_ms, self.staleness if self.staleness
            is not None else judging_timing([r]).stale_after_s)]

        # Every known queue gets its per-queue series, zeros included: a queue whose jobs
        # all finished still has depth 0 (the dashboards' queue picker lists it, and an
        # alert comparing with a past value sees 0, not a missing series).
        depth, _ = _family("awa.db.queue.depth")
        lag, _ = _family("awa.db.queue.lag")
        by_queue = {d.queue: d for d in depths}
        for queue in queues:
            d = by_queue.get(queue)
            counts = d.depth if d is not None else {}
            for state in lifecycle.DEPTH_STATES:
                depth.add_metric([queue, state], counts.get(state, 0))
            for state, n in sorted(counts.items()):
                if state not in lifecycle.DEPTH_STATES:
                    depth.add_metric([queue, state], n)
            lag.add_metric([queue], (d.lag_s if d is not None else None) or 0.0)
        unserved_gauge, _ = _family("awa.db.queue.unserved")
        unserved = set(unserved_queues((d.queue for d in depths if has_waiting(d.depth)),
                                       (r.queues for r in live_runtimes if not r.shutting_down)))
        for queue in queues:
            unserved_gauge.add_metric([queue], 1.0 if queue in unserved else 0.0)
        out.append(unserved_gauge)
        completed, _ = _family("awa.db.queue.completed_rate")
        rate_by_queue = {d.queue: d.completed / config.OPS_COMPLETED_WINDOW_S for d in details}
        previous, self._last_totals = self._last_totals, (
            None if totals is None else (until, totals))
        if totals is not None and previous is not None and until > previous[0]:
            seconds = (until - previous[0]).total_seconds()
            rate_by_queue = {q: max(n - previous[1].get(q, 0), 0) / seconds
                             for q, n in totals.items()}
        for queue in queues:
            completed.add_metric([queue], rate_by_queue.get(queue, 0.0))
        out.append(completed)
        wedged, _ = _family("awa.db.unique.wedged")
        for queue in queues:
            wedged.add_metric([queue], wedged_by_queue.get(queue, 0))
        out += [depth, lag, wedged]

        oldest, _ = _family("awa.db.running.oldest_heartbeat_age")
        stale, _ = _family("awa.db.running.heartbeat_stale")
        overdue, _ = _family("awa.db.running.deadline_overdue")
        running_by_queue = {r[0]: r for r in running}
        for queue in queues:
            _, oldest_s, stale_n, overdue_n = running_by_queue.get(queue, (queue, 0.0, 0, 0))
            oldest.add_metric([queue], max(oldest_s or 0.0, 0.0))  # clocks differ: never < 0
            stale.add_metric([queue], stale_n)
            overdue.add_metric([queue], overdue_n)
        live, _ = _family("awa.db.runtimes.live")
        leader, _ = _family("awa.db.leader.present")
        live.add_metric([], len([r for r in live_runtimes if not r.shutting_down]))
        # The lock as well as the flags: a new leader's flag reaches the registry only with
        # its next snapshot, while it holds the lock already.
        leader.add_metric([], 1.0 if lock_held or any(r.leader for r in live_runtimes) else 0.0)
        dlq_depth, _ = _family("awa.db.dlq.depth")
        for queue, reason, n in dlq:
            dlq_depth.add_metric([queue, reason or NO_REASON], n)
        for queue in sorted(set(queues) - {q for q, _, _ in dlq}):
            # An empty DLQ is a 0, not a missing series; no label value is ever empty.
            dlq_depth.add_metric([queue, NO_REASON], 0)
        txn, _ = _family("awa.db.transaction.oldest_age")
        for r in txns:
            txn.add_metric([r["state"] or "unknown"], max(r["oldest_s"] or 0.0, 0.0))
        horizon_age, _ = _family("awa.db.xmin_horizon.age")
        horizon_xids, _ = _family("awa.db.xmin_horizon.xid_age")
        slot_age = self._inactive_slot_age([r for r in slots if r["xmin"] is not None])
        for r in horizon:
            age_s = slot_age if r["source"] == "replication_slot" else r["age_s"]
            if age_s is not None:
                horizon_age.add_metric([r["source"]], max(age_s, 0.0))
            horizon_xids.add_metric([r["source"]], r["xid_age"] or 0)
        dead, _ = _family("awa.db.table.dead_tuples")
        live_t, _ = _family("awa.db.table.live_tuples")
        vacuum_age, _ = _family("awa.db.table.last_autovacuum_age")
        for r in tables:
            dead.add_metric([r["relname"]], r["n_dead_tup"])
            live_t.add_metric([r["relname"]], r["n_live_tup"])
            if r["last_autovacuum"] is not None:
                vacuum_age.add_metric([r["relname"]],
                                      max(time.time() - r["last_autovacuum"].timestamp(), 0.0))
        cron_overdue, _ = _family("awa.db.cron.overdue")
        for c in cron[:KNOWN_QUEUE_LIMIT]:
            cron_overdue.add_metric([c.name], c.overdue_s)
        slot_wal, _ = _family("awa.db.replication_slot.retained_wal_bytes")
        for r in slots:
            if r["retained_wal_bytes"] is not None:
                slot_wal.add_metric([r["slot_name"], "true" if r["active"] else "false"],
                                    max(r["retained_wal_bytes"], 0.0))
        usage, _ = _family("awa.db.notification_queue.usage")
        usage.add_metric([], notify[0]["usage"])
        out += [oldest, stale, overdue, live, leader, dlq_depth, txn, horizon_age, horizon_xids,
                dead, live_t, vacuum_age, cron_overdue, slot_wal, usage]
        out += _ring_families(rings)
        out += _replication_families(replication_rows[0] if replication_rows else None,
                                     standbys_worst)
        return out

    async def _running_counts(self, session: OpsSession, reads: Any,
                              runtimes: list[RuntimeInstance]
                              ) -> list[tuple[str, float | None, int, int]]:
        """(queue, oldest heartbeat, stale, overdue) per queue with running attempts, each
        attempt judged by its own runtime's published timing: stale past its staleness,
        overdue one heartbeat interval past its deadline (``--heartbeat-staleness``
        overrides the staleness) -- the rule of the console and ``diagnose``."""
        counts = await judged_running_counts(
            session.conn, reads, [Runtime.of(r, self.staleness) for r in runtimes],
            stale_after_s=self.staleness)
        return [(c.queue, c.oldest_heartbeat_s, c.stale, c.overdue) for c in counts]

    def _inactive_slot_age(self, slots: list[dict[str, Any]]) -> float | None:
        """Seconds the longest-abandoned slot has been seen inactive holding its xmin (None:
        no inactive slot holds one).  Counted from this exporter's first sight of it, so
        after an exporter restart the age starts again: the alert comes late, never wrong."""
        now = time.monotonic()
        held = {(r["slot_name"], r["xmin"]) for r in slots if not r["active"]}
        self._slot_inactive_since = {key: self._slot_inactive_since.get(key, now)
                                     for key in held}
        return max((now - since for since in self._slot_inactive_since.values()), default=None)

    async def _stale_superseded(self, session: OpsSession, reads: Any, queues: set[str],
                                runtimes: list[RuntimeInstance]) -> dict[str, int]:
        """Per queue of ``queues`` (those whose running attempts include one whose unique key
        another job holds: ``wedged_claims``), the running attempts whose heartbeat is past
        the staleness of the runtime that runs them and whose unique key another job holds:
        rescue should have cancelled them (``rescued as duplicate``).  Stale attempts are
        few, so each one's key is looked up (``job_record``), on every engine alike."""
        if not queues:
            return {}
        judged = [Runtime.of(r, self.staleness) for r in runtimes]
        stale = []
        for a in await reads.running_attempts(session.conn,
                                              limit=config.OPS_JUDGED_ATTEMPTS_LIMIT):
            if a.queue not in queues or a.heartbeat_age_s is None:
                continue
            timing = attempt_timing(judged, a.queue, a.claimed_by, is_live=lambda r: bool(r.live),
                                    stale_after_s=self.staleness)
            if a.heartbeat_age_s > timing.stale_after_s:
                stale.append(a)
        keys: dict[int, bytes] = {}
        for a in stale[:config.OPS_EVIDENCE_LIMIT * 20]:
            record = await reads.job_record(session.conn, a.id)
            key = record.job.unique_key if record is not None else None
            if key:
                keys[a.id] = bytes(key)
        if not keys:
            return {}
        holders: dict[bytes, set[int]] = {}
        for h in await reads.unique_claim_holders(session.conn, list(set(keys.values()))):
            holders.setdefault(bytes(h.unique_key), set()).add(h.job_id)
        out: dict[str, int] = {}
        for a in stale:
            if a.id in keys and holders.get(keys[a.id], set()) - {a.id}:
                out[a.queue] = out.get(a.queue, 0) + 1
        return out

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- the prometheus_client side -----------------------------------------
    def start_loop(self) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="awa-ops-exporter",
                         daemon=True).start()

    def collect(self) -> Iterable[Metric]:
        if self._loop is None:
            self.start_loop()
        assert self._loop is not None
        with self._lock:  # one scrape at a time: never more than one connection
            future = asyncio.run_coroutine_threadsafe(self.scrape(), self._loop)
            return future.result()


def _replication_families(row: dict[str, Any] | None,
                          standbys_worst: dict[str, Any] | None) -> list[Metric]:
    """A standby's own lag; on a primary, its furthest-behind standby's (0 with none)."""
    state = replication_from_row(row)
    standby, _ = _family("awa.db.replication.standby")
    standby.add_metric([], 1.0 if state.standby else 0.0)
    lag, _ = _family("awa.db.replication.replay_lag")
    lag_bytes, _ = _family("awa.db.replication.replay_lag_bytes")
    source: Any = state if state.standby else None
    lag_s = source.replay_lag_s if source else (standbys_worst or {}).get("replay_lag_s")
    behind = (source.replay_lag_bytes if source
              else (standbys_worst or {}).get("replay_lag_bytes"))
    if lag_s is not None:
        lag.add_metric([], lag_s)
    if behind is not None:
        lag_bytes.add_metric([], behind)
    return [standby, lag, lag_bytes]


def _ring_families(rings: list[RingState]) -> list[Metric]:
    """Ring position and occupancy per ring (families without samples on canonical)."""
    current, _ = _family("awa.db.ring.current_slot")
    generation, _ = _family("awa.db.ring.generation")
    slots, _ = _family("awa.db.ring.slot_count")
    occupied, _ = _family("awa.db.ring.occupied_slots")
    age, _ = _family("awa.db.ring.rotation_age")
    for r in rings:
        current.add_metric([r.ring], r.current_slot)
        generation.add_metric([r.ring], r.generation)
        slots.add_metric([r.ring], r.slot_count)
        occupied.add_metric([r.ring], len(r.occupied))
        age.add_metric([r.ring], max(r.rotated_age_s, 0.0))
    return [current, generation, slots, occupied, age]

def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen must be HOST:PORT (e.g. {config.EXPORTER_LISTEN}), "
                         f"got {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def build_registry(url: str, heartbeat_staleness_s: float | None = None
                   ) -> tuple[CollectorRegistry, DatabaseCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = DatabaseCollector(url, heartbeat_staleness_s)
    collector.start_loop()
    loop = collector._loop
    assert loop is not None  # start_loop() just set it
    # Fail fast with one line when the database is unreachable at start.
    asyncio.run_coroutine_threadsafe(collector._ensure_session(), loop).result()
    registry.register(collector)
    return registry, collector


def serve(url: str, host: str, port: int, heartbeat_staleness_s: float | None = None) -> None:
    from prometheus_client import start_http_server

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    registry, _ = build_registry(url, heartbeat_staleness_s)
    server, thread = start_http_server(port, addr=host, registry=registry)
    print(f"awa-ops exporter: serving http://{host}:{port}/metrics", flush=True)
    try:
        thread.join()
    finally:
        server.shutdown()
