"""What every route of the REST API shares: its settings, the state built once at start
(pool, reads, the admin layer, the TTL cache), the errors a route raises, and the methods the
OpenAPI document declares for a path.

Apart from ``awa_ops.api.app`` (the application: error mapping, auth, assembly) so that the
routes (``awa_ops.api.routes``) import what they use without importing the application
that mounts them.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from psycopg_pool import AsyncConnectionPool
from starlette.responses import JSONResponse

from awa import config, schema
from awa.admin import AdminMixin
from awa.batch_operations import BatchOperationsMixin
from awa.callbacks import CallbackMixin
from awa.cron import CronMixin
from awa.storage import open_engine
from awa.storage.engine import Engine
from awa.storage_transition import StorageTransitionMixin
from awa_ops.api import shapes
from awa_ops.api.reads import ApiReads

READ_ONLY_MESSAGE = ("awa serve is connected to a read-only database; admin actions are "
                     "disabled")
PROBE_READ_ONLY = "SELECT current_setting('transaction_read_only') = 'on' AS read_only"

class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class JSON(JSONResponse):
    """JSON of the shapes' own encoding (a JSONResponse, so the document shows each
    route's model)."""

    def render(self, content: Any) -> bytes:
        return shapes.dumps(content)


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSON:
    return JSON({"error": message}, status_code=status, headers=headers)


@dataclass
class ApiSettings:
    database_url: str
    read_only: bool = False  # forced; otherwise probed once at start
    cache_ttl_s: float = config.SERVE_CACHE_TTL_S
    token: str | None = None
    callback_secret: bytes | None = None
    pool_max: int = config.SERVE_POOL_MAX
    pool_min: int = config.SERVE_POOL_MIN
    pool_idle_timeout_s: float = config.SERVE_POOL_IDLE_TIMEOUT_S
    pool_max_lifetime_s: float = config.SERVE_POOL_MAX_LIFETIME_S
    pool_acquire_timeout_s: float = config.SERVE_POOL_ACQUIRE_TIMEOUT_S
    instance_name: str | None = None
    cors_origins: tuple[str, ...] = ()  # no CORS unless named (--cors-origin)
    max_body_bytes: int = config.SERVE_MAX_BODY_BYTES
    bind_host: str = config.SERVE_HOST  # with public_url: the Host names accepted
    public_url: str | None = None


class Actions(AdminMixin, CronMixin, CallbackMixin, StorageTransitionMixin, BatchOperationsMixin):
    """The admin layer (awa.admin and its siblings) on the API's pool."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        self._engine: Engine | None = None

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        return self.pool

    async def _get_engine(self) -> Engine:
        if self._engine is None:
            self._engine = await open_engine(self.pool)
        return self._engine


class TTLCache:
    """One value per key for ``ttl_s``; concurrent misses share one load."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.values: dict[str, tuple[float, Any]] = {}
        self.locks: dict[str, asyncio.Lock] = {}

    async def get(self, key: str, load: Callable[[], Awaitable[Any]]) -> Any:
        if self.ttl_s <= 0:
            return await load()
        hit = self.values.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            hit = self.values.get(key)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
            value = await load()
            self.values[key] = (time.monotonic() + self.ttl_s, value)
            return value

    def clear(self) -> None:
        self.values.clear()


@dataclass
class ApiState:
    settings: ApiSettings
    pool: AsyncConnectionPool
    reads: ApiReads
    actions: Actions
    read_only: bool
    cache: TTLCache
    engine_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def require_writable(self) -> None:
        if self.read_only:
            raise ApiError(503, READ_ONLY_MESSAGE)

    @property
    def poll_interval_ms(self) -> int:
        return int(max(self.settings.cache_ttl_s * 1000, 5000))


async def open_state(settings: ApiSettings) -> ApiState:
    """Connect (one line on failure), probe read-only mode, and decide the engine once."""
    from awa import db

    pool = await db.open_pool(settings.database_url, config.APP_NAME_SERVE,
                              max_size=settings.pool_max, min_size=settings.pool_min,
                              max_idle_s=settings.pool_idle_timeout_s,
                              max_lifetime_s=settings.pool_max_lifetime_s,
                              acquire_timeout_s=settings.pool_acquire_timeout_s)
    try:
        async with pool.connection() as conn:
            # An unmigrated or foreign database is refused here, in one line, as the CLI does.
            await schema.ensure_migrated(conn)
            probed: Any = await (await conn.execute(PROBE_READ_ONLY)).fetchone()
        read_only = settings.read_only or bool(probed and probed["read_only"])
        actions = Actions(pool)
        engine = await actions._get_engine()
    except BaseException:
        await pool.close()
        raise
    reads = ApiReads(pool, settings.database_url, read_only=read_only)
    return ApiState(settings, pool, reads, actions, read_only, TTLCache(settings.cache_ttl_s),
                    engine_name=engine.name)


def state_of(request: Request) -> ApiState:
    st: ApiState = request.app.state.api
    return st


def allowed_methods(app: Any, path: str) -> list[str]:
    """The methods the OpenAPI document declares for ``path`` (empty: no such route)."""
    patterns: list[tuple[re.Pattern[str], list[str]]] | None = getattr(
        app.state, "method_patterns", None)
    if patterns is None:
        # Literal paths first: /api/jobs/bulk-retry is that route, not /api/jobs/{job_id}.
        templates = sorted(app.openapi().get("paths", {}).items(), key=lambda t: "{" in t[0])
        patterns = [(re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
                                + "$"), sorted(m.upper() for m in item))
                    for template, item in templates]
        app.state.method_patterns = patterns
    for pattern, methods in patterns:
        if pattern.match(path):
            return methods
    return []
