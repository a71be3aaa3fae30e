"""The REST API's application: error mapping, auth, and its assembly (what the routes share
-- settings, state, the TTL cache, ``ApiError`` -- is in ``awa_ops.api.state``).

``build_app`` returns a FastAPI (Starlette) application with every route
under ``/api`` (``awa_ops.api.routes``) and the OpenAPI document at
``/api/openapi.json``.  ``awa serve`` (awa_tui.serve) adds the browser console
beside it and runs it on uvicorn.

Errors answer ``{"error": "<message>"}`` with the reference's statuses: 503
for a write on a read-only server, 404 for a missing job, 400 for bad input
(``validation error: ...``), 409 for a unique conflict, 401 without the
bearer token, 500 ``internal server error`` for anything unexpected (logged).
A body of the wrong shape is 422; a value the document's constraints refuse
(a NUL, an id past the integers JSON holds exactly, a number out of range) is
400, and an id past those bounds in a path is 404 (no such job).  A declared
path with another method is 405 with ``Allow``.

``with_auth`` puts ``BrowserGuard`` in front of everything: the Host
header must name this server (DNS rebinding), a state-changing request or a
websocket from a browser must come from this server's own origin (or one
``--cors-origin`` names), and a body is at most ``config.SERVE_MAX_BODY_BYTES``.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
from contextlib import asynccontextmanager
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from awa.job import (
    AwaError,
    CallbackNotFound,
    DatabaseError,
    JobNotFound,
    UniqueConflict,
    ValidationError,
)
from awa_ops.api import shapes
from awa_ops.api.state import (
    JSON,
    READ_ONLY_MESSAGE,
    ApiError,
    ApiSettings,
    ApiState,
    allowed_methods,
    error,
    open_state,
)

log = logging.getLogger("awa.api")

TOKEN_COOKIE = "awa_token"
API_PREFIX = "/api"


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
    if isinstance(exc, psycopg.errors.DataError):
        # SQLSTATE class 22 is bad input by definition (a value out of range, a NUL, ...):
        # the checks before the database should catch it first; this keeps it a 400.
        return error(400, f"validation error: {_one_line(exc)}")
    if isinstance(exc, DatabaseError | psycopg.OperationalError | PoolTimeout):
        # Undefined by the reference (it answers 500): a REST client retries a 503.
        return error(503, f"database unavailable: {_one_line(exc)}")
    if isinstance(exc, AwaError):
        return error(400, f"validation error: {_one_line(exc)}")
    log.error("awa serve: unexpected error", exc_info=exc)
    return error(500, "internal server error")


# What pydantic calls a value out of the document's bounds (as opposed to a wrong shape).
VALUE_ERRORS = frozenset({"string_pattern_mismatch", "string_unicode", "string_too_long",
                          "string_too_short", "greater_than", "greater_than_equal",
                          "less_than", "less_than_equal", "too_long", "too_short",
                          "finite_number", "value_error", "json_invalid", "literal_error",
                          "enum"})
ID_PARAMS = ("job_id",)


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """Query and path errors are 400 (a job id past the bounds in the path: 404, no such job);
    in a body, a value out of bounds is 400 and a wrong shape 422."""
    errors = exc.errors()
    status = 400
    parts = []
    for e in errors:
        loc = [str(p) for p in e.get("loc", ())]
        kind = e.get("type", "")
        if loc and loc[0] == "body" and kind not in VALUE_ERRORS:
            status = 422
        if loc[:1] == ["path"] and loc[-1] in ID_PARAMS and len(errors) == 1 and kind in (
                "greater_than_equal", "less_than_equal"):
            return 404, f"job not found: {e.get('input')}"
        where = ".".join(loc[1:]) if len(loc) > 1 else (loc[0] if loc else "request")
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return status, "invalid request: " + ("; ".join(parts) or "invalid request")


def _method_not_allowed(request: Request, allow: list[str]) -> JSON:
    methods = ", ".join(allow)
    return error(405, f"method {request.method} not allowed on {request.url.path}; "
                      f"allowed: {methods}", {"Allow": methods})


def install_errors(app: FastAPI) -> None:
    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        # DELETE /api/dlq/depth reached DELETE /api/dlq/{job_id}: the path is a route of
        # its own, without that method.
        allow = allowed_methods(request.app, request.url.path)
        if allow and request.method not in allow:
            return _method_not_allowed(request, allow)
        status, message = _validation_message(exc)
        return error(status, message)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            return error(404, f"no route {request.method} {request.url.path}")
        if exc.status_code == 405:
            return _method_not_allowed(request, allowed_methods(request.app,
                                                                request.url.path))
        return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))

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


# --- pure ASGI guards (so they also cover websockets and static files) ---------------------

async def refuse(scope: Scope, send: Send, status: int, message: str,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer ``{"error": message}`` (a websocket is closed: policy violation)."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = shapes.dumps({"error": message})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


WILDCARD_BINDS = ("", "0.0.0.0", "::")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class HostRule:
    """The Host names this server answers to: the bound address (any loopback name or
    address for a loopback bind; any IP literal and this machine's names for a wildcard
    bind) and ``--public-url``'s host.  A DNS-rebinding page reaches the server under its
    own name, which is none of these."""

    def __init__(self, bind_host: str, public_url: str | None = None) -> None:
        bind = bind_host.strip("[]").lower()
        self.names: set[str] = set()
        self.ips: set[str] = set()
        self.any_ip = bind in WILDCARD_BINDS
        self.loopback = bind == "localhost" or _is_loopback_ip(bind)
        self.public_origin = None
        if public_url:
            parts = urlsplit(public_url)
            if parts.hostname:
                self.names.add(parts.hostname.rstrip("."))
                self.public_origin = f"{parts.scheme}://{parts.netloc}".lower()
        if self.any_ip:
            self.names |= {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
        elif self.loopback:
            self.names.add("localhost")
        elif _ip(bind) is not None:
            self.ips.add(str(_ip(bind)))
        else:
            self.names.add(bind.rstrip("."))

    def allows(self, host: str | None) -> bool:
        name = _hostname(host)
        if name is None:
            return False
        ip = _ip(name)
        if ip is None:
            return name in self.names
        return self.any_ip or (self.loopback and ip.is_loopback) or str(ip) in self.ips


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _is_loopback_ip(text: str) -> bool:
    ip = _ip(text)
    return ip is not None and ip.is_loopback


def _hostname(netloc: str | None) -> str | None:
    if not netloc:
        return None
    try:
        name = urlsplit("//" + netloc).hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


class BrowserGuard:
    """No web page can drive the server: a Host that is not this server's is refused
    (403), and so is a state-changing request or a websocket whose ``Origin`` is another
    site's (unless ``--cors-origin`` names it); a body past ``max_body`` bytes is 413.
    Requests without ``Origin`` (curl, scripts) are not browsers' cross-site requests."""

    def __init__(self, app: ASGIApp, hosts: HostRule, cors_origins: tuple[str, ...],
                 max_body: int) -> None:
        self.app = app
        self.hosts = hosts
        self.cors_origins = {o.rstrip("/").lower() for o in cors_origins}
        self.max_body = max_body

    def _origin_ok(self, origin: str, host: str | None) -> bool:
        origin = origin.rstrip("/").lower()
        if origin in self.cors_origins or origin == self.hosts.public_origin:
            return True
        parts = urlsplit(origin)
        return (parts.scheme in ("http", "https", "ws", "wss") and host is not None
                and parts.netloc == host.lower())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = _header(scope, b"host")
        if not self.hosts.allows(host):
            await refuse(scope, send, 403, f"refused: Host {host!r} is not this server's "
                                           "address (start awa serve with --public-url for "
                                           "the name clients use)")
            return
        origin = _header(scope, b"origin")
        changes = scope["type"] == "websocket" or scope.get("method") not in SAFE_METHODS
        if changes and origin is not None and not self._origin_ok(origin, host):
            await refuse(scope, send, 403, f"refused: a cross-site request from {origin!r} "
                                           "(name it with --cors-origin to allow it)")
            return
        if scope["type"] == "http":
            replay = await self._read_body(scope, receive)
            if replay is None:
                await refuse(scope, send, 413, f"request body larger than {self.max_body} "
                                               "bytes")
                return
            receive = replay
        await self.app(scope, receive, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> Receive | None:
        """The body read whole (None: past the cap), replayed to the application."""
        length = _header(scope, b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.max_body:
            return None
        chunks: list[bytes] = []
        size = 0
        first: Message | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                first = message  # a disconnect: passed on as it came
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        pending: list[Message] = [first] if first is not None else [
            {"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            if pending:
                return pending.pop()
            return await receive()
        return replay


# --- bearer auth ------------------------------------------------------------------------



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
        await refuse(scope, send, 401, "missing or invalid bearer token (Authorization: "
                                       "Bearer <token from --token-file>)",
                     [(b"www-authenticate", b'Bearer realm="awa"')])


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
    shapes.document(app, bearer=settings.token is not None)
    return app


def with_auth(app: ASGIApp, settings: ApiSettings) -> ASGIApp:
    """The application behind the browser guard and, with a token, the bearer check."""
    if settings.token is not None:
        app = BearerAuth(app, settings.token, settings.callback_secret is not None)
    # The reference answers CORS from any origin; here only the origins named.  Outside
    # the bearer check: a browser's preflight carries no token.
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware
        app = CORSMiddleware(app, allow_origins=list(settings.cors_origins),
                             allow_methods=["GET", "POST", "PATCH", "DELETE"],
                             allow_headers=["Authorization", "Content-Type", "X-Awa-Signature"])
    return BrowserGuard(app, HostRule(settings.bind_host, settings.public_url),
                        settings.cors_origins, settings.max_body_bytes)
