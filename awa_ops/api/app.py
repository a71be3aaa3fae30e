"""The REST API's application: settings, shared state, errors, auth, the TTL cache.

``build_app`` returns a FastAPI (Starlette) application with every route
under ``/api`` (``awa_ops.api.routes``) and the OpenAPI document at
``/api/openapi.json``.  ``awa serve`` (awa_tui.serve) adds the browser console
beside it and runs it on uvicorn.

Errors answer ``{"error": "<message>"}`` with the reference's statuses: 503
for a write on a read-only server, 404 for a missing job, 400 for bad input
(``validation error: ...``), 409 for a unique conflict, 401 without the
bearer token, 500 ``internal server error`` for anything unexpected (logged).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from awa import config
from awa.admin import AdminMixin
from awa.batch import BatchMixin
from awa.callbacks import CallbackMixin
from awa.cron import CronMixin
from awa.job import (
    AwaError,
    CallbackNotFound,
    DatabaseError,
    JobNotFound,
    UniqueConflict,
    ValidationError,
)
from awa.storage import open_engine
from awa.storage.engine import Engine
from awa.transition import StorageTransitionMixin
from awa_ops.api import shapes
from awa_ops.api.reads import ApiReads

log = logging.getLogger("awa.api")

READ_ONLY_MESSAGE = ("awa serve is connected to a read-only database; admin actions are "
                     "disabled")
PROBE_READ_ONLY = "SELECT current_setting('transaction_read_only') = 'on' AS read_only"
TOKEN_COOKIE = "awa_token"
API_PREFIX = "/api"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return shapes.dumps(content)


def error(status: int, message: str) -> JSON:
    return JSON({"error": message}, status_code=status)


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


class Actions(AdminMixin, CronMixin, CallbackMixin, StorageTransitionMixin, BatchMixin):
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


# --- errors ---------------------------------------------------------------------------

def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def map_error(exc: BaseException) -> JSON:
    """The reference's status for each failure, with an ``{"error"}`` body."""
    if isinstance(exc, ApiError):
        return error(exc.status, exc.message)
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return error(503, READ_ONLY_MESSAGE)
    if isinstance(exc, JobNotFound):
        return error(404, _one_line(exc))
    if isinstance(exc, CallbackNotFound) and not isinstance(exc, ValidationError):
        return error(404, _one_line(exc))
    if isinstance(exc, ValidationError):
        return error(400, f"validation error: {_one_line(exc)}")
    if isinstance(exc, UniqueConflict):
        return error(409, "unique conflict")
    if isinstance(exc, DatabaseError | psycopg.OperationalError | PoolTimeout):
        # Undefined by the reference (it answers 500): a REST client retries a 503.
        return error(503, f"database unavailable: {_one_line(exc)}")
    if isinstance(exc, AwaError):
        return error(400, f"validation error: {_one_line(exc)}")
    log.error("awa serve: unexpected error", exc_info=exc)
    return error(500, "internal server error")


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """Query/path errors are 400; a body that is not JSON 400, a wrong shape 422."""
    errors = exc.errors()
    status = 400
    parts = []
    for e in errors:
        loc = [str(p) for p in e.get("loc", ())]
        if loc and loc[0] == "body" and e.get("type") != "json_invalid":
            status = 422
        where = ".".join(loc[1:]) if len(loc) > 1 else (loc[0] if loc else "request")
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return status, "; ".join(parts) or "invalid request"


def install_errors(app: FastAPI) -> None:
    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        status, message = _validation_message(exc)
        return error(status, f"invalid request: {message}")

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            return error(404, f"no route {request.method} {request.url.path}")
        return error(exc.status_code, str(exc.detail))

    async def on_any(request: Request, exc: Exception) -> Response:
        return map_error(exc)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    # Expected failures are answered by the exception middleware (the connection stays
    # usable); a handler for bare Exception runs in Starlette's server-error middleware,
    # which re-raises after answering, so only the unexpected reach it.
    for expected in (ApiError, AwaError, psycopg.Error, PoolTimeout):
        app.add_exception_handler(expected, on_any)
    app.add_exception_handler(Exception, on_any)


# --- bearer auth (pure ASGI, so it also guards websockets and static files) -------------



class BearerAuth:
    """With a token: every ``/api`` request needs ``Authorization: Bearer <token>`` (the
    callback routes may instead carry a valid ``X-Awa-Signature`` when a callback secret is
    set); the browser console takes ``?token=`` once and keeps it in an HttpOnly cookie."""

    def __init__(self, app: ASGIApp, token: str, callbacks_signed: bool) -> None:
        self.app = app
        self.token = token.encode()
        self.callbacks_signed = callbacks_signed

    def _ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        path: str = scope.get("path", "")
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if self._ok(bearer):
            await self.app(scope, receive, send)
            return
        if path.startswith(API_PREFIX + "/"):
            if (self.callbacks_signed and path.startswith(API_PREFIX + "/callbacks/")
                    and "x-awa-signature" in headers):
                await self.app(scope, receive, send)  # the signature is checked by the route
                return
            await self._refuse(scope, send)
            return
        cookie = SimpleCookie(headers.get("cookie", ""))
        if TOKEN_COOKIE in cookie and self._ok(cookie[TOKEN_COOKIE].value):
            await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if self._ok((query.get("token") or [None])[0]):
            await self.app(scope, receive, self._setting_cookie(send))
            return
        await self._refuse(scope, send)

    def _setting_cookie(self, send: Send) -> Send:
        value = (f"{TOKEN_COOKIE}={self.token.decode()}; HttpOnly; SameSite=Strict; "
                 "Path=/").encode("latin-1")

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message,
                           "headers": [*message.get("headers", []), (b"set-cookie", value)]}
            await send(message)
        return wrapped

    async def _refuse(self, scope: Scope, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = shapes.dumps({"error": "missing or invalid bearer token (Authorization: "
                                      "Bearer <token from --token-file>)"})
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"www-authenticate", b'Bearer realm="awa"'),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


# --- the application ----------------------------------------------------------------------

def build_app(settings: ApiSettings, state: ApiState | None = None) -> FastAPI:
    """The API application; ``state`` when the caller opened it already (else at startup)."""
    from awa_ops.api.routes import router

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        opened = state is None
        app.state.api = state if state is not None else await open_state(settings)
        try:
            yield
        finally:
            if opened:
                await app.state.api.pool.close()

    app = FastAPI(title="awa REST API", version="1",
                  description="The awa job queue's operator API, served by `awa serve`. "
                              "Compatible with the Rust-core awa-ui REST API (v0.6.5); "
                              "additions are listed in docs/api.md.",
                  openapi_url=API_PREFIX + "/openapi.json", docs_url=API_PREFIX + "/docs",
                  redoc_url=None, lifespan=lifespan, default_response_class=JSON)
    install_errors(app)
    app.include_router(router, prefix=API_PREFIX)
    # The reference serves the API to its own browser frontend from any origin.
    from starlette.middleware.cors import CORSMiddleware
    if settings.token is None:
        app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"],
                           allow_headers=["*"])
    return app


def with_auth(app: ASGIApp, settings: ApiSettings) -> ASGIApp:
    if settings.token is None:
        return app
    return BearerAuth(app, settings.token, settings.callback_secret is not None)
