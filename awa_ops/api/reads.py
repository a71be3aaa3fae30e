"""The REST API's read side: the ops read model on a pool of connections.

Each read borrows a pooled connection, wraps it in an ``OpsSession`` (so it is
one short ``READ ONLY`` transaction with the ops timeouts, as every console
refresh is) and calls the storage engine's read side through it; the
control-surface tables (runtime registry, descriptors, queue_meta) are read
with awa_ops' own statements in ``awa_ops/sql``.  Nothing here writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from psycopg.types.numeric import FloatLoader
from psycopg_pool import AsyncConnectionPool

from awa import config
from awa.fingerprint import group_errors
from awa.job import Job, JobState
from awa.liveness import runtime_live
from awa.storage.engine import DlqEntry, DlqFilter, ReadEngine
from awa_ops.api import shapes
from awa_ops.session import OpsSession, load_sql
from awa_ops.storage import storage_engine

DESCRIPTORS = load_sql("api_descriptors")
QUEUE_META = load_sql("api_queue_meta")
RUNTIME_REGISTRY = load_sql("api_runtime_registry")
RUNTIME_LIMIT = 1_000
# A descriptor no runtime refreshed for this many of its sync intervals is stale.
DESCRIPTOR_STALE_INTERVALS = 3
DEPTH_KEYS = ("scheduled", "available", "retryable", "running", "failed", "waiting_external")


@dataclass
class Bound:
    """A read in progress: the session (its transaction open) and the engine's read side."""

    session: OpsSession
    engine: ReadEngine

    @property
    def conn(self) -> Any:
        return self.session.conn

    async def rows(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        async with self.session.conn.cursor() as cur:
            await cur.execute(query, params)
            return list(await cur.fetchall())


@dataclass
class ApiReads:
    pool: AsyncConnectionPool
    url: str
    read_only: bool = False
    statement_timeout_ms: int = config.OPS_STATEMENT_TIMEOUT_MS
    # Facts a session caches (engine, layout); shared by every request's session.
    cache: dict[str, Any] = field(default_factory=dict)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Bound]:
        async with self.pool.connection() as conn:
            # Every numeric the ops layer reads is an age, a ratio or a count: a float.
            conn.adapters.register_loader("numeric", FloatLoader)
            session = OpsSession(conn, self.url, self.statement_timeout_ms,
                                 read_only=self.read_only, cache=self.cache)
            engine = await storage_engine(session)
            async with session.read():
                yield Bound(session, engine)

    def forget_engine(self) -> None:
        """The layout may have changed (``awa migrate --engine``): detect it again."""
        self.cache.clear()

    # -- descriptors ---------------------------------------------------------------
    async def _descriptor_rows(self, b: Bound) -> list[dict[str, Any]]:
        return await b.rows(DESCRIPTORS)

    @staticmethod
    def _descriptors(rows: list[dict[str, Any]]) -> shapes.Descriptors:
        found = shapes.Descriptors()
        for r in rows:
            target = found.queues if r["type"] == "queue" else found.kinds
            target[r["key"]] = shapes.descriptor(r)
        return found

    # -- jobs ------------------------------------------------------------------------
    async def jobs(self, *, state: str | None, kind: str | None, queue: str | None,
                   tag: str | None, before_id: int | None, limit: int) -> list[dict[str, Any]]:
        async with self.read() as b:
            jobs = await b.engine.list_jobs(
                b.conn, state=None if state is None else JobState(state), kind=kind,
                queue=queue, tag=tag, limit=limit, before_id=before_id)
            descriptors = self._descriptors(await self._descriptor_rows(b)) if jobs else \
                shapes.Descriptors()
        return [shapes.job_response(j, descriptors) for j in jobs]

    async def job(self, job_id: int) -> dict[str, Any] | None:
        async with self.read() as b:
            record = await b.engine.job_record(b.conn, job_id)
            if record is None:
                return None
            entry = await b.engine.get_dlq_job(b.conn, job_id) if record.in_dlq else None
            descriptors = self._descriptors(await self._descriptor_rows(b))
        out = shapes.job_response(record.job, descriptors)
        if entry is not None:
            out["dlq"] = shapes.dlq_metadata(entry)
        return out

    async def matching_ids(self, states: tuple[str, ...], *, kind: str | None,
                           queue: str | None, tag: str | None, cap: int) -> list[int]:
        """Ids of the jobs in ``states`` matching the filter, newest first, at most ``cap``
        (keyset pages through ``list_jobs``; one read transaction per state)."""
        ids: list[int] = []
        for state in states:
            before: int | None = None
            while len(ids) < cap:
                async with self.read() as b:
                    page = await b.engine.list_jobs(
                        b.conn, state=JobState(state), kind=kind, queue=queue, tag=tag,
                        limit=min(config.SERVE_JOBS_MAX_LIMIT, cap - len(ids)),
                        before_id=before)
                ids += [j.id for j in page]
                if len(page) < min(config.SERVE_JOBS_MAX_LIMIT, cap):
                    break
                before = page[-1].id
        return sorted(ids, reverse=True)[:cap]

    async def responses(self, jobs: list[Job[Any]]) -> list[dict[str, Any]]:
        """JobResponse for jobs an action returned (descriptors read once)."""
        if not jobs:
            return []
        async with self.read() as b:
            descriptors = self._descriptors(await self._descriptor_rows(b))
        return [shapes.job_response(j, descriptors) for j in jobs]

    # -- stats -----------------------------------------------------------------------
    async def stats(self) -> dict[str, int]:
        async with self.read() as b:
            counts = await b.engine.state_counts(b.conn)
        return {state: counts.get(state, 0) for state in shapes.JOB_STATES}

    async def timeseries(self, minutes: int) -> list[dict[str, Any]]:
        async with self.read() as b:
            points = await b.engine.created_timeseries(b.conn, minutes=minutes,
                                                       cap=config.SERVE_SUMMARY_CAP)
        return [{"bucket": p.bucket, "state": p.state, "count": p.count, "capped": p.capped}
                for p in points]

    # -- queues and kinds --------------------------------------------------------------
    async def _live_hashes(self, b: Bound) -> dict[str, dict[str, set[str]]]:
        """Per type (queues, kinds) and name: the descriptor hashes live runtimes report."""
        hashes: dict[str, dict[str, set[str]]] = {"queues": {}, "kinds": {}}
        for r in await b.rows(RUNTIME_REGISTRY, {"limit": RUNTIME_LIMIT}):
            if not runtime_live(r["last_seen_age_s"], r["snapshot_interval_ms"]):
                continue
            reported = r["descriptor_hashes"] if isinstance(r["descriptor_hashes"], dict) else {}
            for kind in ("queues", "kinds"):
                for name, digest in (reported.get(kind) or {}).items():
                    hashes[kind].setdefault(name, set()).add(str(digest))
        return hashes

    @staticmethod
    def _descriptor_fields(row: dict[str, Any] | None, live: set[str] | None) -> dict[str, Any]:
        if row is None:
            return {**shapes.descriptor({}), "descriptor_last_seen_at": None,
                    "descriptor_stale": False, "descriptor_mismatch": False}
        interval_s = (row["sync_interval_ms"] or config.SNAPSHOT_INTERVAL_MS) / 1000
        stale = (row["age_s"] or 0.0) > max(DESCRIPTOR_STALE_INTERVALS * interval_s,
                                            config.OPS_RUNTIME_LIVE_MIN_S)
        mismatch = bool(live) and (len(live or ()) > 1
                                   or row["descriptor_hash"] not in (live or set()))
        return {**shapes.descriptor(row), "descriptor_last_seen_at": row["last_seen_at"],
                "descriptor_stale": stale, "descriptor_mismatch": mismatch}

    async def queues(self) -> list[dict[str, Any]]:
        async with self.read() as b:
            stats = {s.queue: s for s in await b.engine.queue_stats(b.conn)}
            meta = {r["queue"]: r for r in await b.rows(QUEUE_META)}
            rows = [r for r in await self._descriptor_rows(b) if r["type"] == "queue"]
            live = await self._live_hashes(b)
        by_name = {r["key"]: r for r in rows}
        names = sorted(set(stats) | set(meta) | set(by_name) | set(live["queues"]))
        out = []
        for name in names:
            s = stats.get(name)
            counts = {k: int(getattr(s, k, 0) or 0) if s else 0 for k in DEPTH_KEYS}
            paused = bool(s.paused) if s else bool(meta.get(name, {}).get("paused", False))
            out.append({
                "queue": name,
                **self._descriptor_fields(by_name.get(name), live["queues"].get(name)),
                "total_queued": sum(counts[k] for k in DEPTH_KEYS if k != "failed"),
                **counts,
                "completed_last_hour": int(s.completed_last_hour) if s else 0,
                "lag_seconds": s.lag_seconds if s else None,
                "paused": paused,
            })
        return out

    async def kinds(self) -> list[dict[str, Any]]:
        async with self.read() as b:
            counts = {c.kind: c for c in await b.engine.kind_counts(
                b.conn, cap=config.SERVE_SUMMARY_CAP)}
            rows = [r for r in await self._descriptor_rows(b) if r["type"] == "kind"]
            live = await self._live_hashes(b)
        by_name = {r["key"]: r for r in rows}
        out = []
        for name in sorted(set(counts) | set(by_name)):
            c = counts.get(name)
            out.append({"kind": name,
                        **self._descriptor_fields(by_name.get(name), live["kinds"].get(name)),
                        "job_count": c.job_count if c else 0,
                        "queue_count": c.queue_count if c else 0,
                        "completed_last_hour": c.completed_last_hour if c else 0,
                        "capped": c.capped if c else False})
        return out

    # -- runtime -----------------------------------------------------------------------
    async def runtime_instances(self) -> list[dict[str, Any]]:
        async with self.read() as b:
            rows = await b.rows(RUNTIME_REGISTRY, {"limit": RUNTIME_LIMIT})
            capability = b.engine.name
        return [_instance(r, capability) for r in rows]

    # -- cron --------------------------------------------------------------------------
    async def cron(self) -> list[dict[str, Any]]:
        async with self.read() as b:
            infos = await b.engine.list_cron_jobs(b.conn)
        out = []
        for info in sorted(infos, key=lambda i: i.name):
            row = {k: getattr(info, k) for k in (
                "name", "cron_expr", "timezone", "kind", "queue", "args", "priority",
                "max_attempts", "tags", "metadata", "missed_fire_policy", "last_enqueued_at",
                "created_at", "updated_at", "paused_at", "paused_by")}
            row["next_fire_at"] = next_fire(info.cron_expr, info.timezone)
            out.append(row)
        return out

    # -- DLQ ---------------------------------------------------------------------------
    async def dlq(self, where: DlqFilter, limit: int) -> list[dict[str, Any]]:
        async with self.read() as b:
            entries = await b.engine.list_dlq(b.conn, where, limit)
        return [shapes.dlq_row(e) for e in entries]

    async def dlq_depth(self) -> dict[str, Any]:
        async with self.read() as b:
            counts = await b.engine.dlq_depth_by_queue(b.conn)
        pairs = sorted(((c.queue, c.count) for c in counts if c.count),
                       key=lambda p: (-p[1], p[0]))
        return {"total": sum(n for _, n in pairs),
                "by_queue": [{"queue": q, "count": n} for q, n in pairs]}

    async def dlq_entry(self, job_id: int) -> DlqEntry | None:
        async with self.read() as b:
            return await b.engine.get_dlq_job(b.conn, job_id)

    async def dlq_causes(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` DLQ entries grouped by error fingerprint, biggest first."""
        async with self.read() as b:
            entries = await b.engine.list_dlq(b.conn, DlqFilter(), limit)
        rows = []
        for e in entries:
            last = e.job.errors[-1] if e.job.errors else {}
            rows.append({"job_id": e.job.id, "kind": e.job.kind, "queue": e.job.queue,
                         "last_error": last.get("error") if isinstance(last, dict) else None,
                         "dlq_at": e.dlq_at})
        return [{"fingerprint": g.fingerprint, "count": g.count, "kinds": sorted(g.kinds),
                 "example": g.example, "job_ids": list(g.job_ids)[:20]}
                for g in group_errors(rows)]


def next_fire(expr: str, timezone: str) -> datetime | None:
    """The schedule's next tick after now (even while paused), as the reference reports it."""
    try:
        from zoneinfo import ZoneInfo

        from croniter import croniter

        now = datetime.now(ZoneInfo(timezone))
        nxt = croniter(expr, now).get_next(datetime)
        return nxt.astimezone(UTC) if isinstance(nxt, datetime) else None
    except Exception:  # noqa: BLE001 (a bad stored expression shows as "no next fire")
        return None


def _queue_config(q: dict[str, Any], global_max: int | None) -> dict[str, Any]:
    weighted = q.get("min_workers") is not None
    deadline_ms = q.get("deadline_duration_ms")
    return {
        "mode": "weighted" if weighted else "hard_reserved",
        "max_workers": q.get("max_workers"), "min_workers": q.get("min_workers"),
        "weight": q.get("weight"), "global_max_workers": global_max,
        "poll_interval_ms": int(q.get("poll_interval_ms") or config.POLL_INTERVAL_MS),
        "deadline_duration_secs": int((deadline_ms if deadline_ms is not None
                                       else config.DEADLINE_DURATION_MS) / 1000),
        "priority_aging_interval_secs": int(config.PRIORITY_AGING_INTERVAL_MS / 1000),
        "claimers": None, "claim_batch_size": None,
        "dlq_enabled": q.get("dlq_enabled"), "rate_limit": q.get("rate_limit"),
    }


def _instance(r: dict[str, Any], capability: str) -> dict[str, Any]:
    live = runtime_live(r["last_seen_age_s"], r["snapshot_interval_ms"])
    queues = []
    for q in r["queues"] or []:
        q = q if isinstance(q, dict) else {"queue": str(q)}
        name = q.get("queue") or q.get("name")
        if not name:
            continue
        queues.append({"queue": name, "in_flight": int(q.get("in_flight") or 0),
                       "overflow_held": q.get("overflow_held"),
                       "config": _queue_config(q, r["global_max_workers"])})
    return {
        "instance_id": str(r["instance_id"]), "hostname": r["hostname"], "pid": r["pid"],
        "version": r["version"], "storage_capability": capability, "transition_role": "auto",
        "started_at": r["started_at"], "last_seen_at": r["last_seen_at"],
        "snapshot_interval_ms": int(r["snapshot_interval_ms"]), "stale": not live,
        "healthy": bool(r["healthy"]), "postgres_connected": bool(r["postgres_connected"]),
        "poll_loop_alive": bool(r["poll_loop_alive"]),
        "heartbeat_alive": bool(r["heartbeat_alive"]),
        "maintenance_alive": bool(r["maintenance_alive"]),
        "shutting_down": bool(r["shutting_down"]), "leader": bool(r["leader"]),
        "global_max_workers": r["global_max_workers"], "queues": queues,
    }


def runtime_overview(instances: list[dict[str, Any]]) -> dict[str, Any]:
    live = [i for i in instances if not i["stale"]]
    return {"total_instances": len(instances), "live_instances": len(live),
            "stale_instances": len(instances) - len(live),
            "healthy_instances": sum(1 for i in live if i["healthy"]),
            "leader_instances": sum(1 for i in live if i["leader"]),
            "instances": instances}


def queue_runtime(instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """QueueRuntimeSummary per queue any runtime reported, sorted by queue."""
    by_queue: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for inst in instances:
        for q in inst["queues"]:
            by_queue.setdefault(q["queue"], []).append((inst, q))
    out = []
    for name in sorted(by_queue):
        pairs = by_queue[name]
        live = [(i, q) for i, q in pairs if not i["stale"]]
        source = live or pairs
        configs = [q["config"] for _, q in source]
        representative = configs[0] if configs else None
        weighted = representative is not None and representative["mode"] == "weighted"
        out.append({
            "queue": name, "instance_count": len(pairs), "live_instances": len(live),
            "stale_instances": len(pairs) - len(live),
            "healthy_instances": sum(1 for i, _ in live if i["healthy"]),
            "total_in_flight": sum(q["in_flight"] for _, q in live),
            "overflow_held_total": (sum(int(q["overflow_held"] or 0) for _, q in live)
                                    if weighted else None),
            "config_mismatch": any(c != representative for c in configs),
            "config": representative,
        })
    return out
