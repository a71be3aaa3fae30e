"""Maintenance: leader election and the leader's periodic branches.

``MaintenanceService(...).run()`` runs in every runtime.  Every runtime
stores its declarations (cron schedules once at start, descriptors every
snapshot tick); one elected leader per database runs the branches, each on
its own interval: promotion, the three rescues, retention, priority aging,
cron and the queue-health gauges.  Each pass is timed
(``awa.maintenance.branch.duration``) and a pass longer than its interval is
counted (``awa.maintenance.branch.overrun``).  A branch that fails logs one
line and runs again next tick; it never stops the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from awa import config, db, recording
from awa.batch_operations import run_batch_operations
from awa.runtime.health import Health
from awa.runtime.leader import LeaderElector, leader_application_name
from awa.runtime.maintenance import aging, cron, descriptors, promote, rescue, retention
from awa.runtime.maintenance.descriptors import Catalogue
from awa.runtime.maintenance.queue_health import QueueHealthPublisher
from awa.storage import open_engine
from awa.storage.engine import Engine

log = logging.getLogger("awa.maintenance")


@dataclass(frozen=True)
class Branch:
    name: str
    interval_ms: int
    run: Callable[[], Awaitable[Any]]


class MaintenanceService:
    """Runs as ``instance_id`` on ``pool``: stores the declarations (``sync_cron`` once,
    ``catalogue``'s descriptors every snapshot tick), takes part in elections (the lock
    session on ``database_url`` until the runtime says where: ``elector.use``) and, while
    leading, runs the branches for ``queues`` with ``settings``' intervals.  ``health``: it
    sets ``leader`` and ``maintenance_alive`` and reads when the database came back;
    ``in_flight`` and ``dlq_enabled`` are the runtime's (rescue)."""

    def __init__(self, *, pool: AsyncConnectionPool, settings: config.RuntimeSettings,
                 queues: dict[str, config.QueueConfig], instance_id: UUID, health: Health,
                 in_flight: Mapping[tuple[int, int], Any], dlq_enabled: Callable[[str], bool],
                 database_url: str,
                 sync_cron: Callable[[AsyncConnectionPool], Awaitable[object]],
                 catalogue: Callable[[], Catalogue]) -> None:
        self.pool = pool
        self.settings = settings
        self.queues = queues
        self.instance_id = instance_id
        self.health = health
        self.in_flight = in_flight
        self.dlq_enabled = dlq_enabled
        self.sync_cron = sync_cron
        self.catalogue = catalogue
        self.elector = LeaderElector(
            database_url, ping_interval_ms=self._ping_interval_ms(),
            application_name=leader_application_name(instance_id))
        self.queue_health = QueueHealthPublisher()
        # The latest result of each branch, for diagnostics and tests.
        self.last_results: dict[str, Any] = {}
        self.elections = 0
        self._branch_slots = asyncio.Semaphore(config.MAINTENANCE_MAX_CONCURRENT_BRANCHES)
        self._engine: Engine | None = None

    async def engine(self) -> Engine:
        """The storage engine every branch goes through, decided once."""
        if self._engine is None:
            self._engine = await open_engine(self.pool)
            recording.record_storage_engine(getattr(self._engine, "name", "unknown"))
        return self._engine

    def _ping_interval_ms(self) -> int:
        return min(self.settings.leader_election_interval_ms, config.LEADER_PING_MAX_INTERVAL_MS)

    # -- the branches ---------------------------------------------------------------
    def branches(self, engine: Engine) -> list[Branch]:
        s, pool, queues = self.settings, self.pool, self.queues

        def rescuer(kind: rescue.RescueKind) -> Callable[[], Awaitable[Any]]:
            return lambda: rescue.rescue(
                pool, kind, batch_size=s.rescue_batch_size,
                staleness_ms=s.heartbeat_staleness_ms, dlq_enabled=self.dlq_enabled,
                in_flight=self.in_flight, engine=engine)

        staleness_s = s.heartbeat_staleness_ms / 1000
        rescue_heartbeats = rescuer(rescue.HEARTBEAT_STALE)

        async def rescue_heartbeats_unless_recovering() -> Any:
            # After this process lost the database, live workers' heartbeats
            # were held back too: give them one staleness window to write
            # again before anyone is declared dead (deadlines are unaffected).
            steady_s = min(self.health.database_steady_for(), self.elector.database_steady_for())
            if steady_s < staleness_s:
                return None
            return await rescue_heartbeats()

        return [b for b in (
            Branch("promote", s.promote_interval_ms,
                   lambda: promote.promote(pool, batch_size=s.promote_batch_size,
                                           engine=engine)),
            Branch("rescue_heartbeat", s.heartbeat_rescue_interval_ms,
                   rescue_heartbeats_unless_recovering),
            Branch("rescue_deadline", s.deadline_rescue_interval_ms,
                   rescuer(rescue.DEADLINE_EXCEEDED)),
            Branch("rescue_callback", s.callback_rescue_interval_ms,
                   rescuer(rescue.CALLBACK_TIMEOUT)),
            Branch("cleanup", s.cleanup_interval_ms,
                   lambda: retention.clean(pool, s, queues, engine=engine)),
            Branch("priority_aging",
                   aging.tick_interval_ms(s.priority_aging_interval_ms, queues),
                   lambda: aging.age_priorities(
                       pool, default_interval_ms=s.priority_aging_interval_ms,
                       queues=queues, batch_size=s.cleanup_batch_size, engine=engine)),
            Branch("cron", s.cron_eval_interval_ms,
                   lambda: cron.evaluate(pool, engine=engine)),
            Branch("queue_health", s.queue_health_interval_ms,
                   lambda: self.queue_health.publish(pool, engine=engine)),
            Branch("batch_operations", s.batch_operations_interval_ms,
                   lambda: run_batch_operations(pool, engine, runner=self.instance_id,
                                                pace=s.batch_operations_pace)),
        ) if b.interval_ms > 0]

    # -- lifecycle ----------------------------------------------------------------------
    async def run(self) -> None:
        health = self.health
        health.maintenance_alive = True
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._declarations_loop(), name="awa-declarations")
                if self.settings.run_maintenance:
                    tg.create_task(self._election_loop(), name="awa-leader-election")
        finally:
            health.maintenance_alive = False
            health.leader = False
            await self.elector.release()

    async def _declarations_loop(self) -> None:
        """Every runtime: cron schedules once, descriptors every snapshot tick."""
        cron_synced = False
        while True:
            try:
                if not cron_synced:
                    await self.sync_cron(self.pool)
                    cron_synced = True
                await descriptors.sync_descriptors(
                    self.pool, self.catalogue(), self.instance_id, engine=await self.engine(),
                    sync_interval_ms=self.settings.snapshot_interval_ms)
            except Exception as exc:  # noqa: BLE001 - retried next tick, never fatal
                log.error("could not store cron schedules / descriptors (retrying): %s",
                          db.one_line(exc))
            await asyncio.sleep(self.settings.snapshot_interval_ms / 1000)

    async def _election_loop(self) -> None:
        interval_s = self.settings.leader_election_interval_ms / 1000
        while True:
            if await self.elector.try_acquire():
                await self._lead()
            await asyncio.sleep(interval_s)

    async def _lead(self) -> None:
        try:
            engine = await self.engine()
        except Exception as exc:  # noqa: BLE001 - retried at the next election, never fatal
            log.error("cannot lead maintenance: no storage engine (retrying): %s",
                      db.one_line(exc))
            return
        health = self.health
        self.elections += 1
        health.leader = True
        recording.record_leadership(True, elected=True)
        log.info("this runtime is now the maintenance leader (instance %s)",
                 self.instance_id)
        ping_s = self._ping_interval_ms() / 1000
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self._run_branch(b), name=f"awa-maint-{b.name}")
                         for b in self.branches(engine)]
                while await self.elector.still_leader():
                    await asyncio.sleep(ping_s)
                for task in tasks:
                    task.cancel()
        finally:
            health.leader = False
            recording.record_leadership(False)
            self.queue_health.reset()
            retention.RING_TRACKER.reset()
            log.info("this runtime is no longer the maintenance leader")

    async def _run_branch(self, branch: Branch) -> None:
        interval_s = branch.interval_ms / 1000
        while True:
            async with self._branch_slots:
                if not await self.elector.confirmed():
                    return  # fenced off while frozen: the election loop steps down
                started = time.monotonic()
                try:
                    self.last_results[branch.name] = await branch.run()
                except Exception as exc:  # noqa: BLE001 - one failing branch must not stop the rest
                    log.error("maintenance branch %s failed (retrying next tick): %s",
                              branch.name, db.one_line(exc))
                elapsed = time.monotonic() - started
            recording.record_branch(branch.name, elapsed, interval_s)
            await asyncio.sleep(max(interval_s - elapsed, 0.0))
