"""AsyncClient and its synchronous twin Client.

The client is assembled from three roles, each in its own module so the tree
shows the system:

* ``awa.producer.ProducerMixin`` -- insert, insert_many, COPY, transactions;
* ``awa.admin.AdminMixin``       -- the operator functions the CLI shares;
* ``awa.worker.WorkerMixin``     -- handler registration, start, shutdown;
* ``awa.cron.CronMixin``, ``awa.descriptors.DescriptorMixin``,
  ``awa.callbacks.CallbackMixin`` -- schedules, catalogue, external callbacks.

``Client`` runs one private event loop on a daemon thread and forwards every
coroutine method of an ``AsyncClient`` to it, so there is exactly one
implementation of each operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Iterator
from typing import Any, cast

from psycopg_pool import AsyncConnectionPool

from awa import config, db, schema
from awa.admin import AdminMixin
from awa.batch_operations import BatchOperationsMixin
from awa.callbacks import CallbackMixin
from awa.cron import CronMixin
from awa.descriptors import DescriptorMixin
from awa.producer import ProducerMixin, Transaction
from awa.storage import forget_engine, open_engine
from awa.storage import migrate as storage_migrate
from awa.storage.engine import Engine
from awa.storage_transition import StorageTransitionMixin
from awa.worker import WorkerMixin

# Set by launchers that load an application's client only to point it elsewhere.
_CONNECT_AT_CONSTRUCTION = contextvars.ContextVar("awa_connect_at_construction", default=True)


@contextlib.contextmanager
def clients_built_unconnected() -> Iterator[None]:
    """Clients constructed inside skip the reachability check of their URL.

    ``awa worker MODULE:CLIENT --database-url X`` imports the application's module, whose
    client may name a database this machine cannot reach, then re-points it with
    ``use_database_url()``: the check belongs to the URL it will really use.
    """
    token = _CONNECT_AT_CONSTRUCTION.set(False)
    try:
        yield
    finally:
        _CONNECT_AT_CONSTRUCTION.reset(token)


@db.database_errors_raise_awa
class AsyncClient(ProducerMixin, AdminMixin, WorkerMixin, CronMixin, DescriptorMixin,
                  CallbackMixin, StorageTransitionMixin, BatchOperationsMixin):
    def __init__(self, database_url: str | None = None,
                 max_connections: int = config.MAX_CONNECTIONS, *,
                 application_name: str = config.APP_NAME_WORKER,
                 direct_database_url: str | None = None,
                 behind_pooler: bool | None = None) -> None:
        """``direct_database_url`` (or ``AWA_DIRECT_DATABASE_URL``): PostgreSQL itself, for
        the runtime's leader lock session and LISTEN connections when ``database_url`` goes
        through a transaction pooler (PgBouncer).  ``behind_pooler``: whether
        ``database_url`` does (None: detected at the first connection).

        A ``database_url`` given here is connected to once, at once, as awa-pg 0.6.9's
        constructor did: an unreachable database raises ``DatabaseError`` here, not at
        the first call (see ``clients_built_unconnected``).  Without one, the URL is
        resolved (``DATABASE_URL``, else the embedded server) at the first call."""
        if database_url and _CONNECT_AT_CONSTRUCTION.get():
            db.connect_sync(database_url, application_name).close()
        self._database_url_arg = database_url
        self._database_url: str | None = None
        self._direct_database_url_arg = direct_database_url
        self.behind_pooler = behind_pooler
        self.max_connections = max_connections
        # What pg_stat_activity shows for this client's connections (the CLI names itself).
        self.application_name = application_name
        self._pool: AsyncConnectionPool | None = None
        self._pool_lock: asyncio.Lock | None = None
        self._schema_checked = False
        self._engine: Engine | None = None
        WorkerMixin.__init__(self)

    @property
    def database_url(self) -> str:
        if self._database_url is None:
            self._database_url = db.resolve_database_url(self._database_url_arg)
        return self._database_url

    @property
    def direct_database_url(self) -> str | None:
        """The URL straight to PostgreSQL for session work, when one is configured."""
        return db.resolve_direct_database_url(self._direct_database_url_arg)

    def use_database_url(self, url: str) -> None:
        """Point a client that has not connected yet at another database.

        For launchers such as ``awa worker --database-url``, which load an
        application's client and override where it connects.
        """
        if self._pool is not None:
            raise RuntimeError("use_database_url() after the client connected; close() it first")
        self._database_url_arg = url
        self._database_url = None

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        """The shared pool, opened on first use; refuses an unmigrated schema."""
        if self._pool_lock is None:
            self._pool_lock = asyncio.Lock()
        async with self._pool_lock:
            if self._pool is None:
                url = await asyncio.to_thread(lambda: self.database_url)
                self._pool = await db.open_pool(url, self.application_name,
                                                max_size=self.max_connections,
                                                pooled=self.behind_pooler)
            if check_schema and not self._schema_checked:
                async with self._pool.connection() as conn:
                    await schema.ensure_migrated(conn)
                self._schema_checked = True
        return self._pool

    async def _get_engine(self) -> Engine:
        """The storage engine serving this database, decided once (``awa.storage.open_engine``)."""
        pool = await self._get_pool()
        if self._engine is None:
            self._engine = await open_engine(pool)
        return self._engine

    async def check_database(self) -> None:
        """Connect and check the database now, instead of at the first operation.

        Raises ``DatabaseError`` (unreachable), ``SchemaNotMigrated`` (behind
        this code) or ``ForeignSchema`` (laid out by another awa distribution).
        """
        await self._get_engine()

    async def migrate(self, engine: str | None = None,
                      queue_storage_schema: str | None = None) -> list[int]:
        """Apply the migrations; ``engine`` lays out ``canonical`` or ``queue_storage``
        (default: the database's own engine; ``config.DEFAULT_STORAGE_ENGINE``, queue
        storage, when new); ``queue_storage_schema``: where a new queue-storage layout's
        tables go (``config.DEFAULT_QUEUE_STORAGE_SCHEMA`` when None)."""
        pool = await self._get_pool(check_schema=False)
        async with pool.connection() as conn:
            applied = await storage_migrate(conn, engine, queue_storage_schema)
        self._schema_checked = True
        self._engine = None
        forget_engine(pool)  # the layout may have changed engine under this pool
        return applied

    async def close(self) -> None:
        await self._close_runtime()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
            self._schema_checked = False
            self._engine = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _LoopThread:
    """A private asyncio loop on a daemon thread for the synchronous client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="awa-client-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        if threading.current_thread() is self._thread:
            raise RuntimeError("the synchronous awa.Client cannot be called from its own loop; "
                               "use the AsyncClient inside async code")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


class _SyncProxy:
    """Exposes an async object's coroutine methods as blocking calls."""

    def __init__(self, target: Any, loop: _LoopThread) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):
            @functools.wraps(attr)
            def blocking(*args: Any, **kwargs: Any) -> Any:
                return _wrap_result(self._loop.run(attr(*args, **kwargs)), self._loop)
            return blocking
        return attr

    def __enter__(self) -> Any:
        return _wrap_result(self._loop.run(self._target.__aenter__()), self._loop)

    def __exit__(self, *exc: Any) -> Any:
        return self._loop.run(self._target.__aexit__(*exc))

    def __repr__(self) -> str:
        return f"Sync({self._target!r})"


class SyncTransaction(_SyncProxy):
    """A transaction of the blocking ``Client`` (``client.transaction()``): the methods of
    ``awa.Transaction``, blocking; a context manager that commits, or rolls back on error."""


def _wrap_result(value: Any, loop: _LoopThread) -> Any:
    """Async helper objects (transactions) come back wrapped so they block too."""
    if isinstance(value, Transaction):
        return SyncTransaction(value, loop)
    if hasattr(value, "__aenter__") and not isinstance(value, AsyncClient):
        return _SyncProxy(value, loop)
    return value


# The worker role stays on AsyncClient: as in awa-pg 0.6.9, ``hasattr(awa.Client, "task")``
# is False (workers are async; ``awa worker`` runs them as a process).
WORKER_ONLY = frozenset({"task", "worker", "start", "shutdown", "on_event"})


class Client(_SyncProxy):
    """The synchronous client: the producer, admin and callback API of ``AsyncClient``,
    blocking.  Workers (``task``, ``start``, ``shutdown``, ``on_event``) are the
    ``AsyncClient``'s alone, as in awa-pg 0.6.9.
    """

    def __init__(self, database_url: str | None = None,
                 max_connections: int = config.MAX_CONNECTIONS, *,
                 application_name: str = config.APP_NAME_WORKER,
                 direct_database_url: str | None = None,
                 behind_pooler: bool | None = None) -> None:
        super().__init__(AsyncClient(database_url, max_connections,
                                     application_name=application_name,
                                     direct_database_url=direct_database_url,
                                     behind_pooler=behind_pooler), _LoopThread())

    def __getattr__(self, name: str) -> Any:
        if name in WORKER_ONLY:
            raise AttributeError(f"awa.Client has no {name}(): workers run on awa.AsyncClient "
                                 "(or as a process: awa worker MODULE:CLIENT)")
        return super().__getattr__(name)

    @property
    def async_client(self) -> AsyncClient:
        return cast(AsyncClient, self._target)

    def close(self) -> None:
        try:
            self._loop.run(self._target.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RawClient = Client
"""awa-pg 0.6.9's low-level client; here the same object as ``Client``."""
