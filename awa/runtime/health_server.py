"""A worker's ``/healthz`` and ``/readyz``: minimal HTTP/1.1 on its own asyncio listener.

Opt-in: ``client.start(..., health_addr="HOST:PORT")`` or ``AWA_HEALTH_ADDR``
(port 0 picks a free one; ``client.health_listener_addr()`` says which).
Bound during ``start()`` before the dispatchers, so a bad address fails start.

* ``GET /healthz``: 200 ``{"status": "ok"}`` while the process runs (also while draining).
* ``GET /readyz``: 200 when ready, else 503, with the report: ``postgres_connected``
  (a ``SELECT 1`` now, bounded by the heartbeat interval, so a database that went away
  shows within one heartbeat interval), ``schema_version`` / ``expected_schema_version`` /
  ``schema_compatible``, ``poll_loop_alive`` (every dispatcher), ``heartbeat_alive``,
  ``maintenance_alive`` (the maintenance task, when this runtime runs one),
  ``shutting_down``, ``leader`` (informational).
* Anything else: 404 / 405 / 431 with ``{"error": ...}``; one request per connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from awa import config
from awa.config import RuntimeSettings
from awa.job import AwaError, ValidationError
from awa.runtime.health import Health

log = logging.getLogger("awa.runtime.health")

MAX_REQUEST_LINE = 4096
CONNECTION_TIMEOUT_S = 5.0
# The database probe answers within this, and never later than one heartbeat interval.
PROBE_TIMEOUT_S = 2.0
REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431:
           "Request Header Fields Too Large", 503: "Service Unavailable"}


def parse_health_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` / ``:PORT`` / ``PORT`` (host defaults to loopback)."""
    text = str(addr).strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValidationError(f"invalid {config.HEALTH_ADDR_ENV} {addr!r}: use HOST:PORT, "
                              f"e.g. 0.0.0.0:8321 (port 0 picks a free one)")
    return host.strip("[]") or config.SERVE_HOST, port


def configured_addr(setting: str | None) -> str | None:
    """The client option, else ``AWA_HEALTH_ADDR``, else None (no health server)."""
    return setting or os.environ.get(config.HEALTH_ADDR_ENV) or None


class HealthServer:
    """Answers from ``health`` (refreshed first), a probe of the database on ``pool`` and
    ``maintenance_running`` (the runtime's maintenance task runs); ``settings``: the
    heartbeat interval bounds the probe, ``run_maintenance`` whether maintenance counts."""

    def __init__(self, host: str, port: int, *, settings: RuntimeSettings, health: Health,
                 pool: AsyncConnectionPool, maintenance_running: Callable[[], bool]) -> None:
        self.settings = settings
        self.health = health
        self.pool = pool
        self.maintenance_running = maintenance_running
        self.host = host
        self.port = port
        self.server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        if self.server is None or not self.server.sockets:
            return self.host, self.port
        sock = self.server.sockets[0].getsockname()
        return str(sock[0]), int(sock[1])

    async def start(self) -> None:
        try:
            self.server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            raise AwaError(f"cannot serve /healthz on {self.host}:{self.port}: "
                           f"{exc.strerror or exc}") from None
        log.info("serving /healthz and /readyz on %s:%d", *self.address)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    # -- the report -------------------------------------------------------------------
    async def _postgres(self) -> tuple[bool, int | None, bool]:
        """(connected, schema version, compatible), from the database now."""
        from awa import schema

        budget = min(PROBE_TIMEOUT_S, self.settings.heartbeat_interval_ms / 1000)

        async def probe() -> tuple[bool, int | None, bool]:
            async with self.pool.connection(timeout=budget) as conn:
                await conn.execute("SELECT 1")
                try:
                    return True, await schema.ensure_migrated(conn), True
                except AwaError:
                    return True, None, False
        try:
            return await asyncio.wait_for(probe(), budget)
        except (TimeoutError, PoolTimeout, psycopg.Error, OSError):
            return False, None, False

    async def readiness(self) -> dict[str, Any]:
        from awa import schema

        health = self.health
        health.refresh()
        connected, version, compatible = await self._postgres()
        maintenance = not self.settings.run_maintenance or self.maintenance_running()
        report = {
            "postgres_connected": connected, "schema_version": version,
            "expected_schema_version": schema.current_migration_version(),
            "schema_compatible": compatible, "poll_loop_alive": health.poll_loop_alive,
            "heartbeat_alive": health.heartbeat_alive, "maintenance_alive": maintenance,
            "shutting_down": health.shutting_down, "leader": health.leader,
        }
        report["ready"] = (connected and compatible and health.poll_loop_alive
                           and health.heartbeat_alive and maintenance
                           and not health.shutting_down)
        return {"ready": report.pop("ready"), **report}

    # -- HTTP ------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await asyncio.wait_for(self._answer(reader), CONNECTION_TIMEOUT_S)
            payload = json.dumps(body).encode()
            writer.write(f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"
                         f"content-type: application/json\r\n"
                         f"content-length: {len(payload)}\r\n"
                         f"connection: close\r\n\r\n".encode() + payload)
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            return 431, {"error": "request too large"}
        if len(line) > MAX_REQUEST_LINE:
            return 431, {"error": "request too large"}
        parts = line.decode("latin-1").split()
        while (await reader.readline()).strip():  # the headers: not needed
            pass
        if len(parts) < 2:
            return 404, {"error": "not found"}
        method, target = parts[0], parts[1].split("?", 1)[0]
        if target not in ("/healthz", "/readyz"):
            return 404, {"error": "not found"}
        if method != "GET":
            return 405, {"error": "method not allowed"}
        if target == "/healthz":
            return 200, {"status": "ok"}
        report = await self.readiness()
        return (200 if report["ready"] else 503), report


async def start_for(settings: RuntimeSettings, *, health: Health, pool: AsyncConnectionPool,
                    maintenance_running: Callable[[], bool]) -> HealthServer | None:
    """The runtime's health server, listening, when an address is configured."""
    addr = configured_addr(settings.health_addr)
    if addr is None:
        return None
    host, port = parse_health_addr(addr)
    server = HealthServer(host, port, settings=settings, health=health, pool=pool,
                          maintenance_running=maintenance_running)
    await server.start()
    return server
