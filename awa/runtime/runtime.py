"""The runtime: wires dispatchers, executor, completion batcher, heartbeat,
listeners, snapshot and maintenance together, and takes them down again.

The runtime is the one place that knows every part: each part is given, at construction,
only what it uses (the pool, the engine, ``Health``, the shared ``in_flight`` map, the
completion batcher or its ``submit``, config values, ...), never the runtime itself; and
the runtime is given what it needs of the client (its opened pool and engine, its URLs and
``application_name``, a cron-sync callable and the descriptor catalogue), never the client
(docs/architecture.md §9).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from awa import db, recording, telemetry
from awa.config import QueueConfig, RuntimeSettings
from awa.job import DatabaseError
from awa.runtime.attempts import AttemptWrites
from awa.runtime.cancel_listener import CancelListener
from awa.runtime.completion import CompletionBatcher
from awa.runtime.context import JobContext
from awa.runtime.dispatcher import Dispatcher, QueueListener
from awa.runtime.events import EventHooks
from awa.runtime.executor import Executor, HandlerSpec
from awa.runtime.health import Health
from awa.runtime.heartbeat import Heartbeat
from awa.runtime.leader import SESSION_LOCK, TRANSACTION_LOCK
from awa.runtime.maintenance import MaintenanceService
from awa.runtime.maintenance.descriptors import Catalogue
from awa.runtime.permits import QueuePermits, WeightedPool
from awa.runtime.snapshot import Snapshot
from awa.schema.catalogue import current_migration_version
from awa.storage.engine import Engine
from awa.version import __version__

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

POLL_ONLY_NOTICE = (
    "database_url goes through a connection pooler and no direct_database_url / "
    f"{db.DIRECT_DATABASE_URL_ENV} is set: poll-only dispatch (every %d ms, no LISTEN "
    "wake-ups), no early notice of admin cancels, and the maintenance leader holds its lock "
    "in an open transaction; set a direct URL to PostgreSQL itself for LISTEN and a lock session")


def connection_budget(pool_max: int, *, listening: bool, leader: bool) -> dict[str, int]:
    """The most server connections one runtime opens, by use (``total``: their sum).

    ``pool``: claims, completions, heartbeats, snapshots, maintenance branches (through the
    pooler when there is one); ``queue_listener`` and ``cancel_listener``: one LISTEN
    connection each, on the direct URL, none when poll-only; ``leader``: the lock session
    (or, behind a pooler with no direct URL, the server connection its open transaction
    holds) -- one while this runtime takes part in elections.  A handler waiting in
    ``wait_for_callback`` adds one shared LISTEN connection (``awa-callback-listener``).
    """
    budget = {"pool": pool_max, "queue_listener": int(listening),
              "cancel_listener": int(listening), "leader": int(leader)}
    budget["total"] = sum(budget.values())
    return budget


class Runtime:
    """One worker runtime, built with its parts on an opened pool and storage engine (the
    client opens them first: the schema check and the foreign-layout refusal happen before
    any part exists), so every part exists (and is typed) from construction on, and
    ``start`` only starts them.

    ``database_url``: what the pool reached (may be the embedded server);
    ``direct_database_url``: PostgreSQL itself for the session work, when configured;
    ``application_name``: what the direct-URL check's connection is called;
    ``sync_cron``: stores the declared cron schedules on a pool (``client.sync_cron_jobs``);
    ``catalogue``: the queue and kind descriptors to store (``awa.descriptors.catalogue``).
    """

    def __init__(self, settings: RuntimeSettings, queues: dict[str, QueueConfig],
                 handlers: dict[str, HandlerSpec], events: EventHooks, *,
                 pool: AsyncConnectionPool, engine: Engine, database_url: str,
                 direct_database_url: str | None, application_name: str,
                 sync_cron: Callable[[AsyncConnectionPool], Awaitable[object]],
                 catalogue: Callable[[], Catalogue]) -> None:
        self.settings = settings
        self.queues = queues
        self.handlers = handlers
        self.events = events
        self.pool = pool
        self.engine = engine  # every job-table write goes through it
        self.database_url = database_url
        self.direct_database_url = direct_database_url
        self.application_name = application_name
        self.sync_cron = sync_cron
        self.catalogue = catalogue
        self.instance_id = uuid.uuid4()
        self.health = Health()
        self.in_flight: dict[tuple[int, int], JobContext] = {}
        # Where the connections that need a session go (leader lock, LISTEN): the direct
        # URL, else database_url unless it goes through a pooler (None: poll-only).
        self.session_url: str | None = None
        self.behind_pooler = False
        # The server-connection budget by use, filled in by start() (the snapshot reads it).
        self.connections: dict[str, int] = {}
        self.permits = self._build_permits()
        self.completion = CompletionBatcher(pool=pool, engine=engine, health=self.health,
                                            events=events)
        self.heartbeat = Heartbeat(pool=pool, engine=engine, health=self.health,
                                   in_flight=self.in_flight,
                                   unflushed=self.completion.unflushed_attempts,
                                   interval_ms=settings.heartbeat_interval_ms)
        self.executor = Executor(handlers=handlers, threads=settings.sync_handler_threads,
                                 in_flight=self.in_flight, io=AttemptWrites(pool, engine),
                                 submit=self.completion.submit, events=events,
                                 dlq_enabled=self.dlq_enabled)
        self.snapshot = Snapshot(pool=pool, engine=engine, health=self.health,
                                 instance_id=self.instance_id, settings=settings, queues=queues,
                                 permits=self.permits, dlq_enabled=self.dlq_enabled,
                                 connections=self.connections)
        self.dispatchers = {
            name: Dispatcher(q, self.permits[name], settings=settings, pool=pool, engine=engine,
                             health=self.health, completion=self.completion,
                             start_job=self.executor.start_job, instance_id=self.instance_id)
            for name, q in queues.items()}
        self.health.watch(poll_loops_alive=self._dispatchers_alive,
                          heartbeat_alive=self.heartbeat.alive)
        # The LISTEN connections, made in start() once it knows there is a session URL.
        self.listener: QueueListener | None = None
        self.cancel_listener: CancelListener | None = None
        self.maintenance: MaintenanceService | None = None
        self._maintenance_task: asyncio.Task[Any] | None = None
        self._watchdog_task: asyncio.Task[None] | None = None
        self._running = False  # start() got past its checks and started parts
        self._stopped = False
        self.metrics_endpoint: Any = None
        self._in_flight_source: Any = None  # awa.job.in_flight, counted from in_flight
        self._open_attempts_source: Any = None  # awa.job.open_attempts, from open_attempts()
        self.health_server: Any = None  # awa.runtime.health_server, when an address is set

    def _dispatchers_alive(self) -> bool:
        return all(d.alive for d in self.dispatchers.values())

    def _maintenance_running(self) -> bool:
        task = self._maintenance_task
        return task is not None and not task.done()

    def _build_permits(self) -> dict[str, QueuePermits]:
        gmw = self.settings.global_max_workers
        if gmw is None:
            return {name: QueuePermits(name, max_workers=q.max_workers)
                    for name, q in self.queues.items()}
        pool = WeightedPool(gmw, sum(q.min_workers or 0 for q in self.queues.values()))
        return {name: QueuePermits(name, min_workers=q.min_workers or 0, weight=q.weight,
                                   pool=pool)
                for name, q in self.queues.items()}

    def open_attempts(self) -> int:
        """Attempts this runtime holds open in the database: every slot taken (claims in
        flight and running handlers) plus the outcomes not yet written.  The dispatchers'
        back-pressure keeps it at most the slots plus one completion batch."""
        taken = sum(p.in_use for p in self.permits.values())
        return taken + self.completion.unflushed

    def dlq_enabled(self, queue: str) -> bool:
        q = self.queues.get(queue)
        if q is not None and q.dlq_enabled is not None:
            return q.dlq_enabled
        return self.settings.dlq_enabled_by_default

    # -- start ---------------------------------------------------------------
    async def start(self) -> None:
        telemetry.init_telemetry_from_env()
        await self._choose_session_url()
        from awa.runtime import health_server  # /healthz, /readyz: bound first, or start fails
        self.health_server = await health_server.start_for(
            self.settings, health=self.health, pool=self.pool,
            maintenance_running=self._maintenance_running)
        self._running = True
        if self.session_url is not None:
            self.listener = QueueListener(self.session_url, self.dispatchers)
            self.cancel_listener = CancelListener(self.session_url, self.in_flight)
        # The runtime's series first: a scrape during the warm-up already sees this runtime.
        self._start_metrics_endpoint()
        # Every queue/kind series of the catalogue from the start, zeros included.
        recording.seed_zeros(list(self.queues), list(self.handlers))
        await self._warm_connections()
        self.completion.start()
        if self.listener is not None and self.cancel_listener is not None:
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

    async def _choose_session_url(self) -> None:
        """Decide where the session work goes; refuse a direct URL that cannot be right.

        Each refusal is one line: a direct URL through a pooler (no session there either),
        to a standby, or to another server or database than ``database_url``; and a
        ``database_url`` that reaches a standby (workers write).
        """
        server = getattr(self.pool, "server", None)
        if server is not None and server.standby:
            raise DatabaseError(f"database_url {db.redact(self.database_url)} reaches a hot "
                                "standby (read-only); point workers at the primary")
        self.behind_pooler = db.behind_pooler(self.pool)
        direct = self.direct_database_url
        if direct is not None:
            conn = await db.connect(direct, self.application_name, pooled=True)
            try:
                found = await db.server_identity(conn)
            finally:
                await conn.close()
            what = f"direct_database_url ({db.DIRECT_DATABASE_URL_ENV}) {db.redact(direct)}"
            if found.pooled:
                raise DatabaseError(f"{what} goes through a connection pooler; point it at "
                                    "PostgreSQL itself (the leader lock and LISTEN need a session)")
            if found.standby:
                raise DatabaseError(f"{what} reaches a hot standby; point it at the primary")
            if server is not None and not found.same_database(server):
                raise DatabaseError(f"{what} reaches database {found.database!r} of another "
                                    f"server or database than database_url "
                                    f"({server.database!r}); both must reach the same one")
            self.session_url = direct
        elif not self.behind_pooler:
            self.session_url = self.database_url
        else:
            self.session_url = None
            log.warning(POLL_ONLY_NOTICE, self.settings.poll_interval_ms)
        self.connections.update(connection_budget(
            self.pool.max_size, listening=self.session_url is not None,
            leader=self.settings.run_maintenance))

    @property
    def leader_lock_scope(self) -> str:
        """A session lock on a direct connection, else one held in an open transaction."""
        return SESSION_LOCK if self.session_url is not None else TRANSACTION_LOCK

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
        # Every runtime runs the service: its declarations loop (cron schedules, descriptor
        # refresh) is every runtime's; only the election, and so the leader's branches,
        # depend on run_maintenance (MaintenanceService.run).
        self.maintenance = MaintenanceService(
            pool=self.pool, settings=self.settings, queues=self.queues,
            instance_id=self.instance_id, health=self.health, in_flight=self.in_flight,
            dlq_enabled=self.dlq_enabled, database_url=self.database_url,
            sync_cron=self.sync_cron, catalogue=self.catalogue)
        self.maintenance.elector.use(self.session_url or self.database_url,
                                     self.leader_lock_scope)
        self._maintenance_task = asyncio.create_task(self.maintenance.run(),
                                                     name="awa-maintenance")

    def _layout_spoken(self) -> str:
        """``awa_runtime_info``'s layout label: the engine's layout version, canonical's
        schema version (``metrics.ATTR_RUNTIME_LAYOUT``)."""
        # An engine's snapshot writes carry it (RuntimeSnapshotWrites); not in the protocol,
        # which read-only engines implement too.
        layout = getattr(self.engine, "layout_version", None)
        return f"{self.engine.name} {current_migration_version() if layout is None else layout}"

    def _start_metrics_endpoint(self) -> None:
        if self.settings.metrics_addr:
            self.metrics_endpoint = telemetry.serve_prometheus(self.settings.metrics_addr)
            log.info("serving metrics on %s", self.metrics_endpoint.url)
        # After the exporters exist: a gauge set while OTel has no provider is dropped.
        recording.runtime_started(__version__, str(self.instance_id), self.snapshot.hostname,
                                  self._layout_spoken())
        self._in_flight_source = recording.track_in_flight(self.in_flight)
        self._open_attempts_source = recording.track_open_attempts(self.open_attempts)

    async def _deadline_watchdog(self) -> None:
        grace = self.settings.deadline_drop_grace_ms / 1000.0
        tick = min(1.0, max(grace / 4, 0.05))
        while True:
            await asyncio.sleep(tick)
            self.executor.drop_overdue(grace)

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
        if not self._running:  # start() failed before anything ran
            self.executor.shutdown()  # its threads (none started yet)
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
        if self._open_attempts_source is not None:
            recording.untrack_open_attempts(self._open_attempts_source)
            self._open_attempts_source = None
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        if self.health_server is not None:
            await self.health_server.close()
        log.info("runtime %s stopped", self.instance_id)
