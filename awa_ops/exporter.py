"""`awa-ops exporter`: Prometheus metrics computed from the database at scrape time.

They keep working when every worker is dead, which is exactly when alerts
matter.  One scrape is one short read-only transaction of a fixed number of
index-backed queries under a statement timeout; names, labels and help come
from the DATABASE section of the metric catalogue (awa/metrics.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from awa import config, db, metrics
from awa_ops.diagnose.dead_tuples import churn_query
from awa_ops.session import OpsSession
from awa_ops.storage import Engine, detect_engine, quote, render

log = logging.getLogger("awa_ops.exporter")
# Storage layout is re-detected this often, so a storage transition is noticed.
ENGINE_RECHECK_S = 60.0

# Non-terminal states only: terminal rows are retention history, and counting
# them would walk most of a large table on every scrape.
CANONICAL_DEPTH = """
SELECT queue, state::text AS state, count(*) AS depth,
       EXTRACT(EPOCH FROM (now() - min(run_at) FILTER (WHERE state = 'available')))::float8 AS lag_s
FROM awa.jobs_hot WHERE state IN ('available', 'running', 'waiting_external')
GROUP BY queue, state
UNION ALL
SELECT queue, state::text, count(*), NULL
FROM awa.scheduled_jobs WHERE state IN ('scheduled', 'retryable')
GROUP BY queue, state
"""
CANONICAL_RUNNING = """
SELECT queue,
       max(EXTRACT(EPOCH FROM (now() - heartbeat_at)))::float8 AS oldest_heartbeat_s,
       count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => %(staleness)s)) AS stale,
       count(*) FILTER (WHERE deadline_at < now()) AS overdue
FROM awa.jobs_hot WHERE state = 'running'
GROUP BY queue
"""
LEASES_RUNNING = """
SELECT queue,
       max(EXTRACT(EPOCH FROM (now() - heartbeat_at)))::float8 AS oldest_heartbeat_s,
       count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => %(staleness)s)) AS stale,
       count(*) FILTER (WHERE deadline_at < now()) AS overdue
FROM {schema}.leases WHERE state = 'running'
GROUP BY queue
"""
RUNTIMES = f"""
SELECT count(*) FILTER (WHERE live AND NOT shutting_down) AS live,
       count(*) FILTER (WHERE live AND leader) AS leaders
FROM (SELECT shutting_down, leader,
             last_seen_at > now() - make_interval(secs => greatest(
                 {config.OPS_RUNTIME_LIVE_FACTOR} * snapshot_interval_ms / 1000.0,
                 {config.OPS_RUNTIME_LIVE_MIN_S})) AS live
      FROM awa.runtime_instances) r
"""
DLQ = "SELECT queue, dlq_reason, count(*) AS depth FROM {schema}.dlq_entries GROUP BY queue, dlq_reason"
WEDGED = f"""
WITH seed AS ({render("unique_wedge", as_subquery=True)})
SELECT queue, count(*) AS wedged FROM seed GROUP BY queue
"""
TRANSACTIONS = """
SELECT coalesce(state, 'unknown') AS state,
       max(EXTRACT(EPOCH FROM (now() - xact_start)))::float8 AS oldest_s
FROM pg_stat_activity
WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
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
PREFER_INDEXES = "SELECT set_config('enable_seqscan', 'off', true)"
NOTIFY_USAGE = "SELECT pg_notification_queue_usage()::float8 AS usage"


def _spec(name: str) -> metrics.MetricSpec:
    return metrics.by_name(name)


def _family(name: str) -> tuple[GaugeMetricFamily, metrics.MetricSpec]:
    spec = _spec(name)
    return GaugeMetricFamily(spec.prometheus, spec.help, labels=list(spec.labels)), spec


class DatabaseCollector(Collector):
    """Computes every DATABASE metric of the catalogue, per scrape."""

    def __init__(self, url: str, heartbeat_staleness_s: float = config.HEARTBEAT_STALENESS_MS / 1000):
        self.url = url
        self.staleness = heartbeat_staleness_s
        self._session: OpsSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._engine_checked_at = 0.0

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

    async def _database_metrics(self, session: OpsSession, engine: Engine) -> list[Metric]:
        params = {"staleness": self.staleness}
        schema = quote(engine.schema)
        queries: list[tuple[str, Any]] = [
            (LEASES_RUNNING.format(schema=schema) if engine.is_queue_storage
             else CANONICAL_RUNNING, params),
            (RUNTIMES, None),
            (DLQ.format(schema=schema if engine.is_queue_storage else "awa"), None),
            (TRANSACTIONS, None), (HORIZON, None), (NOTIFY_USAGE, None),
            (churn_query(engine), None),
        ]
        canonical = not engine.is_queue_storage and not engine.foreign_layout
        if canonical:
            # scheduled_jobs holds only scheduled/retryable rows, so the planner would
            # rather read the whole heap; the (state, queue, id) index answers from the
            # index alone, with a cost that does not grow with the width of args.
            queries += [(PREFER_INDEXES, None), (CANONICAL_DEPTH, None), (WEDGED, None)]
        rows = await session.fetch_sets(*queries)
        running, runtimes, dlq, txns, horizon, notify, tables = rows[:7]
        out: list[Metric] = []

        if canonical:
            _, depth_rows, wedged_rows = rows[7:]
            depth, _ = _family("awa.db.queue.depth")
            lag, _ = _family("awa.db.queue.lag")
            for r in depth_rows:
                depth.add_metric([r["queue"], r["state"]], r["depth"])
                if r["state"] == "available":
                    lag.add_metric([r["queue"]], max(r["lag_s"] or 0.0, 0.0))
            wedged, _ = _family("awa.db.unique.wedged")
            for r in wedged_rows:
                wedged.add_metric([r["queue"]], r["wedged"])
            out += [depth, lag, wedged]

        oldest, _ = _family("awa.db.running.oldest_heartbeat_age")
        stale, _ = _family("awa.db.running.heartbeat_stale")
        overdue, _ = _family("awa.db.running.deadline_overdue")
        for r in running:
            oldest.add_metric([r["queue"]], r["oldest_heartbeat_s"] or 0.0)
            stale.add_metric([r["queue"]], r["stale"])
            overdue.add_metric([r["queue"]], r["overdue"])
        live, _ = _family("awa.db.runtimes.live")
        leader, _ = _family("awa.db.leader.present")
        live.add_metric([], runtimes[0]["live"] or 0)
        leader.add_metric([], 1.0 if runtimes[0]["leaders"] else 0.0)
        dlq_depth, _ = _family("awa.db.dlq.depth")
        for r in dlq:
            dlq_depth.add_metric([r["queue"], r["dlq_reason"]], r["depth"])
        txn, _ = _family("awa.db.transaction.oldest_age")
        for r in txns:
            txn.add_metric([r["state"]], r["oldest_s"] or 0.0)
        horizon_age, _ = _family("awa.db.xmin_horizon.age")
        horizon_xids, _ = _family("awa.db.xmin_horizon.xid_age")
        for r in horizon:
            if r["age_s"] is not None:
                horizon_age.add_metric([r["source"]], r["age_s"])
            horizon_xids.add_metric([r["source"]], r["xid_age"] or 0)
        dead, _ = _family("awa.db.table.dead_tuples")
        live_t, _ = _family("awa.db.table.live_tuples")
        vacuum_age, _ = _family("awa.db.table.last_autovacuum_age")
        for r in tables:
            dead.add_metric([r["relname"]], r["n_dead_tup"])
            live_t.add_metric([r["relname"]], r["n_live_tup"])
            if r["last_autovacuum"] is not None:
                vacuum_age.add_metric([r["relname"]], time.time() - r["last_autovacuum"].timestamp())
        usage, _ = _family("awa.db.notification_queue.usage")
        usage.add_metric([], notify[0]["usage"])
        out += [oldest, stale, overdue, live, leader, dlq_depth, txn, horizon_age, horizon_xids,
                dead, live_t, vacuum_age, usage]
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


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen must be HOST:PORT (e.g. {config.EXPORTER_LISTEN}), got {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def build_registry(url: str, heartbeat_staleness_s: float) -> tuple[CollectorRegistry, DatabaseCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = DatabaseCollector(url, heartbeat_staleness_s)
    collector.start_loop()
    # Fail fast with one line when the database is unreachable at start.
    asyncio.run_coroutine_threadsafe(collector._ensure_session(), collector._loop).result()
    registry.register(collector)
    return registry, collector


def serve(url: str, host: str, port: int, heartbeat_staleness_s: float) -> None:
    from prometheus_client import start_http_server

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    registry, _ = build_registry(url, heartbeat_staleness_s)
    server, thread = start_http_server(port, addr=host, registry=registry)
    print(f"awa-ops exporter: serving http://{host}:{port}/metrics", flush=True)
    try:
        thread.join()
    finally:
        server.shutdown()
