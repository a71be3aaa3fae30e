"""The HTTP callback receiver (an ASGI app) and the ``awa callbacks`` commands.

``POST <prefix>/<callback_id>/<action>`` with ``action`` one of complete,
fail, heartbeat, resume and a JSON object body:

* complete, resume: ``{"payload": <JSON object or null>}`` (body may be empty)
* fail:             ``{"error": "<message>"}``
* heartbeat:        ``{"timeout_seconds": <positive number>}`` (optional)

The request must carry ``X-Awa-Signature`` = hex BLAKE3 keyed hash of the
callback id under the shared 32-byte secret (``awa.callback_contract.sign``),
unless the server runs with ``--allow-unsigned``.  Answers are JSON:
``200 {id, job_id, state}``; errors ``{"error": ...}`` with 400 (malformed id
or body), 401 (missing or bad signature), 404 (unknown callback / no such
route), 405, 409 (callback already resolved), 413 (body too large), 503
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
from typing import Any, Awaitable, Callable

import click

from awa import callback_contract, config
from awa.callbacks import CallbackAlreadyResolved, parse_callback_id
from awa.db import one_line
from awa.job import AwaError, CallbackNotFound, DatabaseError, SerializationError, ValidationError

log = logging.getLogger("awa.callbacks.server")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# The fields each action's body may carry.
_FIELDS = {"complete": {"payload"}, "resume": {"payload"}, "fail": {"error"},
           "heartbeat": {"timeout_seconds"}}


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
        try:
            status, body = await self._handle(scope, receive)
            headers: list[tuple[bytes, bytes]] = []
        except HttpError as exc:
            status, body, headers = exc.status, {"error": str(exc)}, exc.headers
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
            raise HttpError(400, f"malformed callback id {raw_id[:80]!r}: expected a UUID")
        self._check_signature(scope, callback_id)
        fields = _validate(action, await self._read_json(scope, receive))
        try:
            job = await self._apply(action, callback_id, fields)
        except CallbackAlreadyResolved as exc:
            raise HttpError(409, str(exc))
        except CallbackNotFound as exc:
            raise HttpError(404, str(exc))
        except (ValidationError, SerializationError) as exc:
            raise HttpError(400, one_line(exc))
        except DatabaseError as exc:
            raise HttpError(503, one_line(exc))
        log.info("callback %s %s: job %s is %s", callback_id, action, job.id, job.state.value)
        return 200, {"id": callback_id, "job_id": job.id, "state": job.state.value}

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
                    raise HttpError(400, "invalid Content-Length header")
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
            raise HttpError(400, f"body is not valid JSON: {one_line(exc)}")

    async def _apply(self, action: str, callback_id: str, fields: dict[str, Any]) -> Any:
        client = self.client
        if action == "complete":
            return await client.complete_external(callback_id, fields.get("payload"))
        if action == "resume":
            return await client.resume_external(callback_id, fields.get("payload"))
        if action == "fail":
            return await client.fail_external(callback_id, fields["error"])
        return await client.heartbeat_callback(
            callback_id, fields.get("timeout_seconds", callback_contract.DEFAULT_HEARTBEAT_TIMEOUT_SECS))


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


# --- the `awa callbacks` commands ---------------------------------------------------
def load_secret(secret_file: str | None, secret_env: str | None) -> bytes | None:
    """The shared secret from a file (raw 32 bytes or hex) or an environment variable (hex)."""
    if secret_file and secret_env:
        raise click.UsageError("give --secret-file or --secret-env, not both")
    try:
        if secret_file:
            try:
                with open(secret_file, "rb") as fh:
                    return callback_contract.coerce_secret(fh.read())
            except OSError as exc:
                raise click.ClickException(f"cannot read --secret-file: {one_line(exc)}")
        if secret_env:
            value = os.environ.get(secret_env)
            if not value:
                raise click.ClickException(f"environment variable {secret_env} (--secret-env) "
                                           f"is not set")
            return callback_contract.coerce_secret(value)
    except ValidationError as exc:
        raise click.ClickException(str(exc))
    return None


def _parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {listen!r}", param_hint="--listen")
    return host.strip("[]"), int(port)


def _parse_payload(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {one_line(exc)}", param_hint="--payload")
    if value is not None and not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--payload")
    return value


_URL_KEY = "awa.callbacks.database_url"


def _database_url(ctx: click.Context) -> str | None:
    """--database-url given to us (before or after the subcommand), else the root command's."""
    if ctx.meta.get(_URL_KEY):
        return ctx.meta[_URL_KEY]
    root = ctx.find_root()
    for source in (root.params, root.obj if isinstance(root.obj, dict) else {}):
        if source.get("database_url"):
            return source["database_url"]
    url = getattr(root.obj, "database_url", None)
    return url if isinstance(url, str) else None


def _run_resolution(ctx: click.Context, method: str, *args: Any, as_json: bool = False) -> None:
    """Run one client resolution; one line out, one line on error (exit 1)."""
    from awa.client import AsyncClient

    async def go() -> Any:
        async with AsyncClient(_database_url(ctx)) as client:
            return await getattr(client, method)(*args)

    try:
        result = asyncio.run(go())
    except AwaError as exc:
        raise click.ClickException(one_line(exc))
    job = result.job if hasattr(result, "outcome") else result
    doc: dict[str, Any] = {"id": str(args[0]), "job_id": job.id if job else None,
                           "state": job.state.value if job else None}
    if hasattr(result, "outcome"):
        doc.update(outcome=result.outcome, reason=result.reason)
    if as_json:
        click.echo(json.dumps(doc))
    else:
        extra = f" ({doc['outcome']}: {doc['reason']})" if "outcome" in doc else ""
        click.echo(f"callback {doc['id']}: job {doc['job_id']} is {doc['state']}{extra}")


_db_option = click.option("--database-url", "database_url", default=None,
                          help="PostgreSQL URL (default: DATABASE_URL, else the embedded one).")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("callbacks")
@_db_option
@click.pass_context
def callbacks_group(ctx: click.Context, database_url: str | None) -> None:
    """Resolve external callbacks, or serve the HTTP callback receiver."""
    if database_url:
        ctx.meta[_URL_KEY] = database_url


def _pass_url(f: Callable[..., Any]) -> Callable[..., Any]:
    """Accept --database-url after the subcommand too."""
    def wrapper(ctx: click.Context, database_url: str | None, **kwargs: Any) -> Any:
        if database_url:
            ctx.meta[_URL_KEY] = database_url
        return f(ctx, **kwargs)
    wrapper.__name__ = f.__name__
    wrapper.__doc__ = f.__doc__
    return _db_option(click.pass_context(wrapper))


@callbacks_group.command("complete")
@click.argument("callback_id")
@click.option("--payload", default=None, help="JSON object stored as the result.")
@_json_option
@_pass_url
def complete_cmd(ctx: click.Context, callback_id: str, payload: str | None, as_json: bool) -> None:
    """Complete the job waiting on CALLBACK_ID."""
    _run_resolution(ctx, "complete_external", callback_id, _parse_payload(payload),
                    as_json=as_json)


@callbacks_group.command("fail")
@click.argument("callback_id")
@click.option("--error", required=True, help="The error recorded on the job.")
@_json_option
@_pass_url
def fail_cmd(ctx: click.Context, callback_id: str, error: str, as_json: bool) -> None:
    """Fail the job waiting on CALLBACK_ID."""
    _run_resolution(ctx, "fail_external", callback_id, error, as_json=as_json)


@callbacks_group.command("retry")
@click.argument("callback_id")
@_json_option
@_pass_url
def retry_cmd(ctx: click.Context, callback_id: str, as_json: bool) -> None:
    """Start the job waiting on CALLBACK_ID again from scratch (attempt reset)."""
    _run_resolution(ctx, "retry_external", callback_id, as_json=as_json)


@callbacks_group.command("resume")
@click.argument("callback_id")
@click.option("--payload", default=None, help="JSON object handed to the waiting handler.")
@_json_option
@_pass_url
def resume_cmd(ctx: click.Context, callback_id: str, payload: str | None, as_json: bool) -> None:
    """Resume the handler waiting on CALLBACK_ID with a payload."""
    _run_resolution(ctx, "resume_external", callback_id, _parse_payload(payload),
                    as_json=as_json)


@callbacks_group.command("heartbeat")
@click.argument("callback_id")
@click.option("--timeout-seconds", type=float,
              default=callback_contract.DEFAULT_HEARTBEAT_TIMEOUT_SECS, show_default=True)
@_json_option
@_pass_url
def heartbeat_cmd(ctx: click.Context, callback_id: str, timeout_seconds: float,
                  as_json: bool) -> None:
    """Extend the wait of CALLBACK_ID to now + timeout."""
    _run_resolution(ctx, "heartbeat_callback", callback_id, timeout_seconds, as_json=as_json)


@callbacks_group.command("resolve")
@click.argument("callback_id")
@click.option("--payload", default=None, help="JSON object the CEL expressions see.")
@click.option("--default-action", type=click.Choice(["ignore", "complete", "fail"]),
              default="ignore", show_default=True)
@_json_option
@_pass_url
def resolve_cmd(ctx: click.Context, callback_id: str, payload: str | None, default_action: str,
                as_json: bool) -> None:
    """Let the callback's CEL expressions decide (filter, on_fail, on_complete, default)."""
    _run_resolution(ctx, "resolve_callback", callback_id, _parse_payload(payload),
                    default_action, as_json=as_json)


@callbacks_group.command("serve")
@click.option("--listen", default=config.CALLBACK_LISTEN, show_default=True, help="HOST:PORT.")
@click.option("--secret-file", type=click.Path(dir_okay=False), default=None,
              help="File holding the 32-byte secret (raw, or 64 hex characters).")
@click.option("--secret-env", default=None, metavar="NAME",
              help="Environment variable holding the secret as hex.")
@click.option("--allow-unsigned", is_flag=True,
              help="Accept requests without X-Awa-Signature (development only).")
@click.option("--max-body-bytes", type=click.IntRange(min=1),
              default=config.CALLBACK_MAX_BODY_BYTES, show_default=True)
@click.option("--path-prefix", default=callback_contract.DEFAULT_PATH_PREFIX, show_default=True)
@_pass_url
def serve_cmd(ctx: click.Context, listen: str, secret_file: str | None, secret_env: str | None,
              allow_unsigned: bool, max_body_bytes: int, path_prefix: str) -> None:
    """Serve POST <prefix>/<id>/complete|fail|heartbeat|resume over HTTP."""
    import uvicorn

    host, port = _parse_listen(listen)
    secret = load_secret(secret_file, secret_env)
    try:
        app = CallbackApp(database_url=_database_url(ctx), secret=secret,
                          allow_unsigned=allow_unsigned, max_body_bytes=max_body_bytes,
                          path_prefix=path_prefix)
    except ValidationError as exc:
        raise click.ClickException(str(exc))
    mode = "signatures required" if secret is not None and not allow_unsigned else \
        "UNSIGNED requests accepted (development only)"
    sock = _bind(host, port)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                           access_log=False))
    # SIGTERM/SIGINT finish in-flight requests and exit 0 (uvicorn's own
    # handlers would re-raise the signal after the graceful stop).
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, setattr, server, "should_exit", True)
        click.echo(f"awa callbacks: listening on http://{host}:{port}{app.prefix} ({mode})",
                   err=True)
        await server.serve(sockets=[sock])

    try:
        asyncio.run(run())
    finally:
        sock.close()
    click.echo("awa callbacks: stopped", err=True)


def _bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                                   f"(choose another --listen)")
    return sock


if __name__ == "__main__":  # `python -m awa.callback_server serve ...`
    callbacks_group(prog_name=f"{os.path.basename(sys.executable)} -m awa.callback_server")
