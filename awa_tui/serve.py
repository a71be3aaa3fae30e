"""``awa serve``: the REST API (``/api``) and the awa-tui console in a browser, one process.

One ASGI application on uvicorn: the API of ``awa_ops.api`` under ``/api``
(OpenAPI document at ``/api/openapi.json``) and, unless ``--no-console``, the
console at ``/``: each browser tab's websocket (``/ws``) drives its own console
process (``python -m awa_tui``, through textual-serve's ``AppService``), so it
reads the database exactly as the terminal console does.  The database URL
reaches that process through ``DATABASE_URL`` in its environment, never its
command line (where ``ps`` would show a password).

Safe by default: bound to 127.0.0.1; any other address is refused unless the
server is ``--read-only`` or has a bearer token (``--token-file``).  Read-only
is also detected (``transaction_read_only``, e.g. a hot standby).  No web page
can drive it: no CORS unless ``--cors-origin`` names origins, and the Host (and
a change's Origin) must be this server's (``awa_ops.api.app.BrowserGuard``).
The console's page loads nothing from outside the server (its font is served
from textual-serve's own static files).  The database is checked (migrated, not
another distribution's) and the port bound before the "serving" line.  FastAPI,
uvicorn, Textual and textual-serve (the ``tui`` extra) are imported when it runs,
so ``awa`` lists it without them and says which extra to install.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from awa import config, db, extras
from awa.cli import database_url_option, resolved_database_url
from awa.job import AwaError

log = logging.getLogger("awa.serve")


def console_command(refresh: str, read_only: bool, min_age: str) -> str:
    """The shell command each browser session's console process runs."""
    args = [sys.executable, "-m", "awa_tui", "--refresh", refresh, "--min-age", min_age]
    if read_only:
        args.append("--read-only")
    return subprocess.list2cmdline(args)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise click.ClickException(f"cannot read --token-file {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise click.ClickException(f"--token-file {path} holds a token of {len(token)} "
                                   "characters; use at least 16 (e.g. `openssl rand -hex 32`)")
    return token


# textual-serve's page asks a public CDN for its font; the font ships in its static files.
_CDN_FONT = re.compile(r"<link[^>]*fonts\.googleapis\.com[^>]*>", re.S)
FONT_FACE = ("<style>@font-face {{ font-family: \"Roboto Mono\"; src: "
             "url(\"{static}fonts/RobotoMono-VariableFont_wght.ttf\"); }}</style>")


def self_contained(page: str, static_url: str) -> str:
    """The console's page with its font from this server instead of the CDN."""
    return _CDN_FONT.sub(lambda _: FONT_FACE.format(static=static_url), page)


def console_routes(command: str, public_url: str | None) -> list[Any]:
    """textual-serve's console (``/``, ``/ws``, ``/static``, ``/download``) as Starlette
    routes, so it shares the API's port and process."""
    import jinja2
    import textual_serve
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response, StreamingResponse
    from starlette.routing import Mount, Route, WebSocketRoute
    from starlette.staticfiles import StaticFiles
    from starlette.websockets import WebSocket, WebSocketDisconnect
    from textual_serve.app_service import AppService
    from textual_serve.download_manager import DownloadManager

    base = Path(textual_serve.__file__).parent
    templates = jinja2.Environment(loader=jinja2.FileSystemLoader(base / "templates"),
                                   autoescape=True)
    downloads = DownloadManager()

    def _int(value: str | None, default: int) -> int:
        try:
            return int(value) if value is not None else default
        except ValueError:
            return default

    async def index(request: Request) -> Response:
        root = (public_url or str(request.base_url)).rstrip("/")
        ws_root = "wss:" + root.split(":", 1)[1] if root.startswith("https") else \
            "ws:" + root.split(":", 1)[1]
        page = templates.get_template("app_index.html").render(
            font_size=_int(request.query_params.get("fontsize"), 16),
            app_websocket_url=f"{ws_root}/ws", ping_url=f"{root}/",
            config={"static": {"url": f"{root}/static/"}},
            application={"name": "awa-tui"})
        return HTMLResponse(self_contained(page, f"{root}/static/"))

    async def download(request: Request) -> Response:
        key = request.path_params["key"]
        try:
            meta = await downloads.get_download_metadata(key)
        except KeyError:
            return Response(f"download {key!r} not found", status_code=404)
        content_type = meta.mime_type + (f"; charset={meta.encoding}" if meta.encoding else "")
        disposition = "inline" if meta.open_method == "browser" else "attachment"
        return StreamingResponse(downloads.download(key), media_type=content_type, headers={
            "Content-Disposition": f"{disposition}; filename={meta.file_name}"})

    async def websocket(ws: WebSocket) -> None:
        await ws.accept()
        width = _int(ws.query_params.get("width"), 80)
        height = _int(ws.query_params.get("height"), 24)

        async def write_bytes(data: bytes) -> None:
            await ws.send_bytes(data)

        async def write_str(data: str) -> None:
            await ws.send_text(data)

        async def close() -> None:
            try:
                await ws.close()
            except RuntimeError:
                pass  # already closed by the browser

        service = AppService(command, write_bytes=write_bytes, write_str=write_str,
                             close=close, download_manager=downloads)
        await service.start(width, height)
        try:
            while True:
                envelope = await ws.receive_json()
                if not isinstance(envelope, list) or not envelope:
                    continue
                kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
                if kind == "stdin":
                    await service.send_bytes(str(data).encode("utf-8"))
                elif kind == "resize" and isinstance(data, dict):
                    await service.set_terminal_size(data["width"], data["height"])
                elif kind == "ping":
                    await ws.send_json(["pong", data])
                elif kind == "blur":
                    await service.blur()
                elif kind == "focus":
                    await service.focus()
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            await service.stop()

    return [Route("/", index), Route("/download/{key}", download),
            WebSocketRoute("/ws", websocket),
            Mount("/static", app=StaticFiles(directory=base / "static"), name="static")]


@click.command("serve")
@database_url_option
@click.option("--host", default=config.SERVE_HOST, show_default=True,
              help="Address to bind; any non-loopback address needs --token-file or "
                   "--read-only.")
@click.option("--port", default=config.SERVE_PORT, show_default=True,
              type=click.IntRange(0, 65535))
@click.option("--token-file", default=None, metavar="PATH", envvar="AWA_SERVE_TOKEN_FILE",
              help="A file holding the bearer token every /api request must carry "
                   "(Authorization: Bearer <token>); the console takes it once as ?token=.")
@click.option("--read-only", is_flag=True, envvar="AWA_READ_ONLY",
              help="Refuse every action (503); detected by itself on a hot standby.")
@click.option("--no-console", is_flag=True, help="Serve the REST API alone.")
@click.option("--cache-ttl", default=config.SERVE_CACHE_TTL_S, show_default=True,
              type=click.FloatRange(0), envvar="AWA_CACHE_TTL", metavar="SECONDS",
              help="How long /api/stats, /api/queues, /api/runtime, /api/queues/runtime and "
                   "/api/storage are served from cache.")
@click.option("--pool-max", default=config.SERVE_POOL_MAX, show_default=True,
              type=click.IntRange(1), envvar="AWA_POOL_MAX")
@click.option("--pool-min", default=config.SERVE_POOL_MIN, show_default=True,
              type=click.IntRange(0), envvar="AWA_POOL_MIN")
@click.option("--pool-idle-timeout", default=config.SERVE_POOL_IDLE_TIMEOUT_S,
              show_default=True, type=click.FloatRange(0, min_open=True),
              envvar="AWA_POOL_IDLE_TIMEOUT", metavar="SECONDS")
@click.option("--pool-max-lifetime", default=config.SERVE_POOL_MAX_LIFETIME_S,
              show_default=True, type=click.FloatRange(0, min_open=True),
              envvar="AWA_POOL_MAX_LIFETIME", metavar="SECONDS")
@click.option("--pool-acquire-timeout", default=config.SERVE_POOL_ACQUIRE_TIMEOUT_S,
              show_default=True, type=click.FloatRange(0, min_open=True),
              envvar="AWA_POOL_ACQUIRE_TIMEOUT", metavar="SECONDS")
@click.option("--callback-hmac-secret", default=None, envvar="AWA_CALLBACK_HMAC_SECRET",
              metavar="HEX", help="64 hex characters: /api/callbacks/* then need "
                                  "X-Awa-Signature (BLAKE3 keyed hash of the callback id).")
@click.option("--instance-name", default=None, envvar="AWA_INSTANCE_NAME",
              help="A name shown in /api/capabilities.")
@click.option("--public-url", default=None, metavar="URL",
              help="The URL browsers use, when behind a proxy; its host is accepted in "
                   "the Host header besides the bound address.")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="A web origin (https://ops.example.com) whose pages may call the API "
                   "(CORS); repeat for several.  None by default.")
@click.option("--refresh", default=str(config.TUI_REFRESH_SECONDS), show_default=True,
              metavar="SECONDS", help="How often each console re-reads its screen.")
@click.option("--min-age", default="0", metavar="SECONDS",
              help="Running screen: hide attempts younger than this.")
def serve_command(host: str, port: int, token_file: str | None, read_only: bool,
                  no_console: bool, cache_ttl: float, pool_max: int, pool_min: int,
                  pool_idle_timeout: float, pool_max_lifetime: float,
                  pool_acquire_timeout: float, callback_hmac_secret: str | None,
                  instance_name: str | None, public_url: str | None,
                  cors_origins: tuple[str, ...], refresh: str, min_age: str) -> None:
    """Serve the REST API (/api) and the awa-tui console in a browser."""
    if not is_loopback(host) and token_file is None and not read_only:
        raise click.ClickException(
            f"refusing to serve on {host}: a non-loopback address needs --token-file "
            f"(bearer auth) or --read-only")
    # This command is listed by `awa` without the tui extra; it needs it to run.
    extras.require("tui", "awa serve")
    from awa import callback_contract
    from awa_ops.api import ApiSettings
    from awa_tui.app import parse_seconds

    parse_seconds(refresh, "--refresh")
    parse_seconds(min_age, "--min-age")
    token = read_token(token_file) if token_file is not None else None
    secret = None
    if callback_hmac_secret:
        try:
            secret = callback_contract.coerce_secret(callback_hmac_secret.strip())
        except AwaError as exc:
            raise click.ClickException(f"invalid callback secret: {exc}") from None
    url = resolved_database_url()
    settings = ApiSettings(
        database_url=url, read_only=read_only, cache_ttl_s=cache_ttl, token=token,
        callback_secret=secret, pool_max=pool_max, pool_min=min(pool_min, pool_max),
        pool_idle_timeout_s=pool_idle_timeout, pool_max_lifetime_s=pool_max_lifetime,
        pool_acquire_timeout_s=pool_acquire_timeout,
        instance_name=(instance_name or "").strip() or None,
        cors_origins=tuple(o.strip() for o in cors_origins if o.strip()), bind_host=host,
        public_url=public_url)
    os.environ[db.DATABASE_URL_ENV] = url
    command = None if no_console else console_command(refresh, read_only, min_age)
    try:
        asyncio.run(_serve(settings, host, port, command, public_url))
    except AwaError as exc:
        raise click.ClickException(str(exc)) from None


async def _serve(settings: Any, host: str, port: int, command: str | None,
                 public_url: str | None) -> None:
    import uvicorn

    from awa_ops.api import build_app, open_state, with_auth

    state = await open_state(settings)  # a database problem is one line, before binding
    try:
        sock = bind(host, port)
    except BaseException:
        await state.pool.close()
        raise
    try:
        app = build_app(settings, state)
        if command is not None:
            for route in console_routes(command, public_url):
                app.router.routes.append(route)
        mode = "read-only" if state.read_only else "read-write"
        auth = "bearer token" if settings.token else "no auth (loopback)"
        click.echo(f"awa serve: {mode}, {auth}, engine {state.engine_name}; "
                   f"http://{host}:{port}/api/ (OpenAPI: /api/openapi.json)"
                   + ("" if command is None else f"; console at http://{host}:{port}/"),
                   err=True)
        server = uvicorn.Server(uvicorn.Config(with_auth(app, settings), host=host, port=port,
                                               log_level="warning", lifespan="on"))
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        await state.pool.close()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the "serving" line (uvicorn serves on it): a busy
    port is one line, not a traceback after the announcement."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc.strerror}"
        raise click.ClickException(f"port {port} on {host} {why}; choose another with --port "
                                   "(or stop what holds it)") from None
    sock.setblocking(False)
    return sock
