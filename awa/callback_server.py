"""The HTTP callback receiver: an ASGI app, served by ``awa callbacks serve``.

``POST <prefix>/<callback_id>/<action>`` with ``action`` one of complete,
fail, heartbeat, resume, resolve and a JSON object body:

* complete, resume: ``{"payload": <JSON object or null>}`` (body may be empty)
* fail:             ``{"error": "<message>"}``
* heartbeat:        ``{"timeout_seconds": <positive number>}`` (optional)
* resolve:          ``{"payload": {...}, "default_action": "ignore|complete|fail"}``:
                    the job's CEL rules decide; the answer adds ``outcome``, ``reason``

The request must carry ``X-Awa-Signature`` = hex BLAKE3 keyed hash of the
callback id under the shared 32-byte secret (``awa.callback_contract.sign``),
unless the server runs with ``--allow-unsigned``.  Answers are JSON:
``200 {id, job_id, state}``; errors ``{"error": ...}`` with 400 (malformed id
or body), 401 (missing or bad signature), 404 (unknown callback / no such
route), 405, 409 (callback already resolved, or the job's unique key was taken
meanwhile), 413 (body too large), 503
(database unavailable).  Every refusal happens before any write, and every
write is one guarded statement, so a refused or replayed request changes
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, cast

import psycopg
from psycopg_pool import PoolTimeout

from awa import callback_contract, config, extras
from awa.callbacks import CallbackAlreadyResolved, ResolveResult, parse_callback_id
from awa.db import one_line
from awa.job import (
    AwaError,
    CallbackNotFound,
    Job,
    SerializationError,
    UniqueConflict,
    ValidationError,
)

log = logging.getLogger("awa.callbacks.server")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# The fields each action's body may carry.
_FIELDS = {"complete": {"payload"}, "resume": {"payload"}, "fail": {"error"},
           "heartbeat": {"timeout_seconds"}, "resolve": {"payload", "default_action"}}


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or []


class CallbackApp:
    """ASGI callable resolving callbacks through ``AsyncClient`` (the same code as the API)."""

    def __init__(self, *, database_url: str | None = None, client: Any = None,
                 secret: bytes | str | None = None, allow_unsigned: bool = False,
                 max_body_bytes: int = config.CALLBACK_MAX_BODY_BYTES,
                 path_prefix: str = callback_contract.DEFAULT_PATH_PREFIX) -> None:
        if secret is None and not allow_unsigned:
            raise ValidationError("the callback receiver needs a secret (--secret-file or "
                                  "--secret-env); pass --allow-unsigned only for development")
        self.secret = callback_contract.coerce_secret(secret) if secret is not None else None
        self.allow_unsigned = allow_unsigned
        self.max_body_bytes = max_body_bytes
        self.prefix = "/" + path_prefix.strip("/")
        self._database_url = database_url
        self._client = client
        self._owns_client = client is None

    @property
    def client(self) -> Any:
        if self._client is None:
            from awa.client import AsyncClient  # the client imports this package's modules
            self._client = AsyncClient(self._database_url)
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers: list[tuple[bytes, bytes]] = []
        try:
            status, body = await self._handle(scope, receive)
        except HttpError as exc:
            status, body, headers = exc.status, {"error": str(exc)}, exc.headers
        except Exception:
            log.exception("callback request %s failed", scope.get("path"))
            status, body = 500, {"error": "internal error; see the receiver's log"}
        await _respond(send, status, body, headers)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._owns_client and self._client is not None:
                    await self._client.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[int, dict[str, Any]]:
        raw_id, action = self._route(scope["path"])
        if scope["method"] != "POST":
            raise HttpError(405, "use POST", [(b"allow", b"POST")])
        try:
            callback_id = str(parse_callback_id(raw_id))
        except CallbackNotFound:
            raise HttpError(400, f"malformed callback id {raw_id[:80]!r}: "
                                 "expected a UUID") from None
        self._check_signature(scope, callback_id)
        fields = _validate(action, await self._read_json(scope, receive))
        try:
            result = await self._apply(action, callback_id, fields)
        except (CallbackAlreadyResolved, UniqueConflict) as exc:
            raise HttpError(409, str(exc)) from exc
        except CallbackNotFound as exc:
            raise HttpError(404, str(exc)) from exc
        except (ValidationError, SerializationError) as exc:
            raise HttpError(400, one_line(exc)) from exc
        except (AwaError, psycopg.Error, PoolTimeout) as exc:  # database down or unmigrated
            log.error("callback %s %s not applied: %s", callback_id, action, one_line(exc))
            raise HttpError(503, f"callback not applied, try again: {one_line(exc)}") from exc
        # An ignored resolution has no job (as in awa-pg 0.6.9): report the one still waiting.
        if isinstance(result, ResolveResult):
            job = cast(Job[Any], result.job or result.waiting)
        else:
            job = cast(Job[Any], result)
        log.info("callback %s %s: job %s is %s", callback_id, action, job.id, job.state.value)
        answer = {"id": callback_id, "job_id": job.id, "state": job.state.value}
        if isinstance(result, ResolveResult):
            answer.update(outcome=result.outcome, reason=result.reason)
        return 200, answer

    def _route(self, path: str) -> tuple[str, str]:
        rest = path[len(self.prefix):] if path.startswith(self.prefix + "/") else None
        parts = rest.strip("/").split("/") if rest else []
        if len(parts) != 2 or parts[1] not in callback_contract.ACTIONS:
            raise HttpError(404, f"no such endpoint; use POST {self.prefix}/<callback_id>/"
                                 f"{'|'.join(callback_contract.ACTIONS)}")
        return parts[0], parts[1]

    def _check_signature(self, scope: Scope, callback_id: str) -> None:
        header = callback_contract.SIGNATURE_HEADER.lower().encode()
        presented = next((v.decode("latin-1") for k, v in scope["headers"] if k == header), None)
        if self.secret is None:
            return  # --allow-unsigned without a secret: nothing to verify against
        if presented is None:
            if self.allow_unsigned:
                return
            raise HttpError(401, f"missing {callback_contract.SIGNATURE_HEADER} header")
        if not callback_contract.verify(self.secret, callback_id, presented):
            raise HttpError(401, f"invalid {callback_contract.SIGNATURE_HEADER} for this "
                                 f"callback id")

    async def _read_json(self, scope: Scope, receive: Receive) -> Any:
        too_large = HttpError(413, f"body larger than {self.max_body_bytes} bytes")
        for key, value in scope["headers"]:
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise HttpError(400, "invalid Content-Length header") from None
                if declared > self.max_body_bytes:
                    raise too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise HttpError(400, "client disconnected before sending the body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks).strip()
        if not body:
            return {}
        try:
            return json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise HttpError(400, f"body is not valid JSON: {one_line(exc)}") from exc

    async def _apply(self, action: str, callback_id: str, fields: dict[str, Any]) -> Any:
        client = self.client
        if action == "complete":
            return await client.complete_external(callback_id, fields.get("payload"))
        if action == "resume":
            return await client.resume_external(callback_id, fields.get("payload"))
        if action == "fail":
            return await client.fail_external(callback_id, fields["error"])
        if action == "resolve":
            return await client.resolve_callback(callback_id, fields.get("payload"),
                                                 fields.get("default_action", "ignore"))
        return await client.heartbeat_callback(
            callback_id,
            fields.get("timeout_seconds", callback_contract.DEFAULT_HEARTBEAT_TIMEOUT_SECS))


def _validate(action: str, body: Any) -> dict[str, Any]:
    """The body's fields for ``action``, or a 400 naming what is wrong."""
    allowed = _FIELDS[action]
    if not isinstance(body, dict):
        raise HttpError(400, f"body must be a JSON object with {', '.join(sorted(allowed))}")
    unexpected = sorted(set(body) - allowed)
    if unexpected:
        raise HttpError(400, f"unexpected field {unexpected[0]!r} for {action}; allowed: "
                             f"{', '.join(sorted(allowed))}")
    if "payload" in body and body["payload"] is not None and not isinstance(body["payload"], dict):
        raise HttpError(400, "payload must be a JSON object or null")
    if action == "fail":
        error = body.get("error")
        if not isinstance(error, str) or not error.strip():
            raise HttpError(400, "fail needs a non-empty string field 'error'")
    if "timeout_seconds" in body:
        timeout = body["timeout_seconds"]
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not math.isfinite(timeout) or timeout <= 0:
            raise HttpError(400, "timeout_seconds must be a positive number")
    return body


async def _respond(send: Send, status: int, body: dict[str, Any],
                   headers: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})


# --- serving ----------------------------------------------------------------------
def load_secret(secret_file: str | None, secret_env: str | None) -> bytes | None:
    """The shared secret from a file (raw 32 bytes or hex) or an environment variable (hex)."""
    if secret_file and secret_env:
        raise ValidationError("give --secret-file or --secret-env, not both")
    if secret_file:
        try:
            with open(secret_file, "rb") as fh:
                return callback_contract.coerce_secret(fh.read())
        except OSError as exc:
            raise ValidationError(f"cannot read --secret-file {secret_file}: "
                                  f"{exc.strerror or exc}") from None
    if secret_env:
        value = os.environ.get(secret_env)
        if not value:
            raise ValidationError(f"environment variable {secret_env} (--secret-env) is not set")
        return callback_contract.coerce_secret(value)
    return None


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"--listen expects HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def bind(host: str, port: int) -> socket.socket:
    """Bind before starting, so a busy port is one clear error rather than a server log."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto=IPPROTO_TCP lets asyncio set TCP_NODELAY on accepted connections;
        # without it a response written in two parts waits ~40 ms for delayed ACKs.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise ValidationError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                              f"(choose another --listen)") from None
    return sock


def serve_forever(app: CallbackApp, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn until SIGTERM/SIGINT, then finish in-flight requests."""
    extras.require("callbacks", "the callback receiver")
    import uvicorn

    sock = bind(host, port)
    mode = ("signatures required" if app.secret is not None and not app.allow_unsigned
            else "UNSIGNED requests accepted (development only)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                           access_log=False))
    # Exit 0 after a graceful stop (uvicorn's own handlers re-raise the signal).
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]  # no-op hook

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, setattr, server, "should_exit", True)
        print(f"awa callbacks: listening on http://{host}:{port}{app.prefix} ({mode})",
              file=sys.stderr, flush=True)
        await server.serve(sockets=[sock])

    try:
        asyncio.run(run())
    finally:
        sock.close()
    print("awa callbacks: stopped", file=sys.stderr, flush=True)


@contextlib.contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run an ASGI ``app`` with uvicorn on a background thread (to embed the
    receiver in another process, and for tests); yields its base URL."""
    extras.require("callbacks", "the callback receiver")
    import uvicorn

    sock = bind(host, port)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="awa-callback-server", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            sock.close()
            raise AwaError(f"the HTTP server on {host}:{port} failed to start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
