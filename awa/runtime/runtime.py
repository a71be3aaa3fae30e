"""The runtime: wires dispatchers, executor, completion batcher, heartbeat,
listeners, snapshot and maintenance together, and takes them down again.

Maintenance (issue: maintenance) reads these attributes: ``pool``,
``engine`` (the storage engine every job-table write goes through),
``database_url``, ``settings``, ``queues``, ``instance_id``, ``health``,
``in_flight``, ``dlq_enabled(queue)`` and ``client``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from awa import db, telemetry
from awa.config import QueueConfig, RuntimeSettings
from awa.runtime import recording
from awa.runtime.cancel_listener import CancelListener
from awa.runtime.completion import CompletionBatcher
from awa.runtime.context import JobContext
from awa.runtime.dispatcher import Dispatcher, QueueListener
from awa.runtime.events import EventHooks
from awa.runtime.executor import Executor, HandlerSpec
from awa.runtime.heartbeat import Heartbeat
from awa.runtime.permits import QueuePermits, WeightedPool
from awa.runtime.snapshot import Snapshot
from awa.storage.engine import AttemptWrite, Engine

if TYPE_CHECKING:  # pragma: no cover
    from awa.client import AsyncClient

log = logging.getLogger("awa.runtime")

# How long start() waits for the LISTEN connections before going on with
# polling alone (they keep reconnecting in the background).
LISTENER_READY_TIMEOUT_S = 5.0
# How long start waits for the pool to lend one more connection to warm (a pool the
# client's own callers are using may have none to spare; start does not wait for them),
# and at most how many it warms: start stays within a few hundred milliseconds however
# many queues a runtime serves (their dispatchers rarely all claim at once).
WARM_UP_TIMEOUT_S = 1.0
WARM_UP_MAX_CONNECTIONS = 4


class Health:
    """Mutable liveness flags; maintenance sets ``leader`` and ``maintenance_alive``."""

    def __init__(self) -> None:
        self.leader = False
        self.maintenance_alive = False
        self.heartbeat_alive = True
        self.poll_loop_alive = True
        self._postgres_connected = True
        self.shutting_down = False
        # When this process last saw the database come back after losing it
        # (time.monotonic()); None while it never lost it.
        self.database_back_at: float | None = None

    @property
    def postgres_connected(self) -> bool:
        return self._postgres_connected

    @postgres_connected.setter
    def postgres_connected(self, value: bool) -> None:
        if value and not self._postgres_connected:
            self.database_back_at = time.monotonic()
        self._postgres_connected = value

    def database_steady_for(self) -> float:
        """Seconds the database has answered since this process last lost it (inf: never lost)."""
        if not self._postgres_connected:
            return 0.0
        if self.database_back_at is None:
            return float("inf")
        return time.monotonic() - self.database_back_at

    @property
    def healthy(self) -> bool:
        return (self.postgres_connected and self.poll_loop_alive and self.heartbeat_alive
                and not self.shutting_down)

    def refresh(self, runtime: Runtime) -> None:
        """Recompute the loop flags from the tasks themselves."""
        if self.shutting_down:
            return
        self.poll_loop_alive = all(d.alive for d in runtime.dispatchers.values())
        hb = runtime.heartbeat
        stale_after = 3 * hb.interval + 1.0
        self.heartbeat_alive = (hb.task is not None and not hb.task.done()
                                and time.monotonic() - hb.last_beat_at < stale_after)


class Runtime:
    def __init__(self, client: AsyncClient, settings: RuntimeSettings,
                 queues: dict[str, QueueConfig], handlers: dict[str, HandlerSpec],
                 events: EventHooks) -> None:
        self.client = client
        self.settings = settings
        self.queues = queues
        self.handlers = handlers
        self.events = events
        self.instance_id = uuid.uuid4()
        self.health = Health()
        self.in_flight: dict[tuple[int, int], JobContext] = {}
        self.pool: AsyncConnectionPool = None  # type: ignore[assignment]
        self.engine: Engine = None  # type: ignore[assignment]  # set in start()
        self.database_url: str = ""  # resolved in start(): may start the embedded server
        self.permits = self._build_permits()
        self.dispatchers: dict[str, Dispatcher] = {}
        self.executor: Executor = None  # type: ignore[assignment]
        self.completion: CompletionBatcher = None  # type: ignore[assignment]
        self.heartbeat: Heartbeat = None  # type: ignore[assignment]
        self.snapshot: Snapshot = None  # type: ignore[assignment]
        self.listener: QueueListener | None = None
        self.cancel_listener: CancelListener | None = None
        self.maintenance: Any = None
        self._maintenance_task: asyncio.Task[Any] | None = None
        self._watchdog_task: asyncio.Task[None] | None = None
        self._stopped = False
        self.metrics_endpoint: Any = None
        self._in_flight_source: Any = None  # awa.job.in_flight, counted from in_flight

    def _build_permits(self) -> dict[str, QueuePermits]:
        gmw = self.settings.global_max_workers
        if gmw is None:
            return {name: QueuePermits(name, max_workers=q.max_workers)
                    for name, q in self.queues.items()}
        pool = WeightedPool(gmw, sum(q.min_workers or 0 for q in self.queues.values()))
        return {name: QueuePermits(name, min_workers=q.min_workers or 0, weight=q.weight,
                                   pool=pool)
                for name, q in self.queues.items()}

    def dlq_enabled(self, queue: str) -> bool:
        q = self.queues.get(queue)
        if q is not None and q.dlq_enabled is not None:
            return q.dlq_enabled
        return self.settings.dlq_enabled_by_default

    # -- start ---------------------------------------------------------------
    async def start(self) -> None:
        telemetry.init_telemetry_from_env()
        self.pool = await self.client._get_pool()
        self.engine = await self.client._get_engine()
        self.database_url = self.client.database_url  # resolved by the pool by now
        self.executor = Executor(self)
        self.completion = CompletionBatcher(self)
        self.heartbeat = Heartbeat(self)
        self.snapshot = Snapshot(self)
        self.dispatchers = {name: Dispatcher(self, q, self.permits[name])
                            for name, q in self.queues.items()}
        self.listener = QueueListener(self, self.dispatchers)
        self.cancel_listener = CancelListener(self)
        # The runtime's series first: a scrape during the warm-up already sees this runtime.
        self._start_metrics_endpoint()
        await self._warm_connections()
        self.completion.start()
        self.listener.start()
        self.cancel_listener.start()
        try:
            await asyncio.wait_for(asyncio.gather(self.listener.connected.wait(),
                                                  self.cancel_listener.listening.wait()),
                                   LISTENER_READY_TIMEOUT_S)
        except TimeoutError:
            log.warning("LISTEN connections not ready after %.0fs; polling meanwhile",
                        LISTENER_READY_TIMEOUT_S)
        for d in self.dispatchers.values():
            d.start()
        self.heartbeat.start()
        await self.snapshot.write()
        self.snapshot.start()
        self._watchdog_task = asyncio.create_task(self._deadline_watchdog(),
                                                  name="awa-deadline-watchdog")
        self._start_maintenance()
        log.info("runtime %s started: queues %s", self.instance_id, ", ".join(self.queues))

    async def _warm_connections(self) -> None:
        """Open the connections the hot path is about to use (each claimer, the completion
        batcher, the heartbeat; at most WARM_UP_MAX_CONNECTIONS) and warm each
        (``Engine.warm_up``), so the first claims and
        completions do not each wait for a new connection's first statements (10-15 ms
        apiece on queue storage).  Best effort: what the pool cannot lend at once, or what
        fails, is left to be opened on first use as before."""
        wanted = min(sum(d.claimers for d in self.dispatchers.values()) + 2,
                     WARM_UP_MAX_CONNECTIONS, self.pool.max_size)
        async with contextlib.AsyncExitStack() as held:
            for _ in range(wanted):
                try:
                    conn = await held.enter_async_context(
                        self.pool.connection(timeout=WARM_UP_TIMEOUT_S))
                    await self.engine.warm_up(conn)
                except (PoolTimeout, psycopg.Error) as exc:
                    log.debug("connection warm-up stopped: %s", db.one_line(exc))
                    break

    def _start_maintenance(self) -> None:
        if not self.settings.run_maintenance:
            return
        # TODO(maintenance landing): the service arrives with the maintenance issue.
        if importlib.util.find_spec("awa.runtime.maintenance") is None:
            return
        from awa.runtime.maintenance import MaintenanceService
        self.maintenance = MaintenanceService(self)
        self._maintenance_task = asyncio.create_task(self.maintenance.run(),
                                                     name="awa-maintenance")

    def _start_metrics_endpoint(self) -> None:
        from awa import __version__
        if self.settings.metrics_addr:
            self.metrics_endpoint = telemetry.serve_prometheus(self.settings.metrics_addr)
            log.info("serving metrics on %s", self.metrics_endpoint.url)
        # After the exporters exist: a gauge set while OTel has no provider is dropped.
        recording.runtime_started(__version__, str(self.instance_id), self.snapshot.hostname)
        self._in_flight_source = recording.track_in_flight(self.in_flight)

    async def _deadline_watchdog(self) -> None:
        grace = self.settings.deadline_drop_grace_ms / 1000.0
        tick = min(1.0, max(grace / 4, 0.05))
        while True:
            await asyncio.sleep(tick)
            self.executor.drop_overdue(grace)

    # -- used by JobContext --------------------------------------------------
    async def flush_progress(self, ctx: JobContext) -> None:
        progress, patch = ctx.take_buffered()
        if progress is None and patch is None:
            return
        job = ctx.job
        try:
            async with self.pool.connection() as conn:
                matched = await self.engine.flush_progress_batch(
                    conn, [AttemptWrite(job.id, job.run_lease, progress, patch)])
        except BaseException:
            ctx.restore_buffered(progress, patch)
            raise
        if not matched:
            ctx.cancel("attempt no longer owned by this worker")
            recording.stale_heartbeats(job.queue, 1)  # a stale write, counted

    # -- health ----------------------------------------------------------------
    async def available_counts(self) -> dict[str, int]:
        async with self.pool.connection() as conn:
            return await self.engine.available_counts(conn, list(self.queues))

    # -- shutdown --------------------------------------------------------------
    async def shutdown(self, timeout_ms: int) -> None:
        """Stop claiming, let running handlers finish (up to ``timeout_ms``),
        write their outcomes, and leave whatever is still running to rescue."""
        if self._stopped:
            return
        self._stopped = True
        if self.executor is None:  # start() failed before anything ran
            return
        deadline = time.monotonic() + timeout_ms / 1000.0
        self.health.shutting_down = True
        self.health.poll_loop_alive = False
        await asyncio.gather(*(d.stop() for d in self.dispatchers.values()))
        for ctx in list(self.in_flight.values()):
            ctx.cancel("shutting down")
        tasks = [c.task for c in self.in_flight.values() if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=max(deadline - time.monotonic(), 0))
        left = list(self.in_flight.values())
        for ctx in left:
            if ctx.task is not None and not ctx.task.done():
                ctx.dropped = True
                ctx.task.cancel()
        if left:
            log.warning("shutdown timed out with %d handler(s) running; left for rescue",
                        len(left))
        await self.completion.stop(max(deadline - time.monotonic(), 1.0))
        await self.events.drain(max(deadline - time.monotonic(), 0.1))
        if self._watchdog_task is not None:
            self._watchdog_task.cancel()
        if self._maintenance_task is not None:
            self._maintenance_task.cancel()
            try:
                await self._maintenance_task
            except (asyncio.CancelledError, Exception):  # its errors were its own to log
                pass
        await self.heartbeat.stop()
        await self.snapshot.stop()
        if self.listener is not None:
            await self.listener.stop()
        if self.cancel_listener is not None:
            await self.cancel_listener.stop()
        try:
            if self.snapshot.written:  # a runtime that never announced itself stays silent
                await self.snapshot.write()
        except psycopg.Error as exc:
            log.warning("final runtime snapshot failed (%s)", db.one_line(exc))
        self.executor.shutdown()
        if self._in_flight_source is not None:
            recording.untrack_in_flight(self._in_flight_source)
            self._in_flight_source = None
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        log.info("runtime %s stopped", self.instance_id)
