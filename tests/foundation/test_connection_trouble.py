"""Connection loss logs one line, then throttled retries, then one line on recovery
(issue 33: a 40 s outage wrote 880 psycopg.pool WARNING lines from one worker)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import awa
from awa import db
from awa.client import clients_built_unconnected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _proxy(port: int, target: tuple[str, int]) -> asyncio.Server:
    """A TCP forwarder to the real server: the database 'comes back' when it starts."""
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(handle, "127.0.0.1", port)


async def test_an_outage_is_one_line_then_throttled_then_one_line_on_recovery(database_url,
                                                                              caplog):
    parts = conninfo_to_dict(database_url)
    port = _free_port()
    url = make_conninfo(database_url, host="127.0.0.1", port=port)
    trouble = db.CONNECTION_TROUBLE
    trouble.since = None
    caplog.set_level(logging.WARNING)
    pool = db.ResilientPool(url, min_size=1, max_size=1, open=False, name="outage-test",
                            kwargs=db.connect_kwargs("outage-test"), reconnect_timeout=120)
    server = None
    try:
        await pool.open(wait=False)
        deadline = time.monotonic() + 20
        while trouble.suppressed < 1:  # failed attempts while "down" (pool backoff: 1s, 2s..)
            assert time.monotonic() < deadline, caplog.text
            await asyncio.sleep(0.1)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1 and "database connection trouble" in lines[0], lines
        assert "\n" not in lines[0]
        server = await _proxy(port, (parts.get("host") or "127.0.0.1",
                                     int(parts.get("port") or 5432)))
        await pool.wait(timeout=30)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 2 and "database connection restored" in lines[1], lines
    finally:
        await pool.close()
        if server is not None:
            server.close()


def test_a_client_given_an_unreachable_url_fails_when_constructed() -> None:
    """As awa-pg 0.6.9's constructor: the URL given is connected to at once (its own test
    ``test_client_connection_errors_use_database_error`` constructs and expects the error),
    except while a launcher imports an application it will re-point."""
    url = f"postgresql://postgres@127.0.0.1:{_free_port()}/nowhere"
    for cls in (awa.AsyncClient, awa.Client):
        with pytest.raises(awa.DatabaseError, match="cannot connect"):
            cls(url)
    with clients_built_unconnected():
        client = awa.AsyncClient(url)
    client.use_database_url(url.replace("nowhere", "elsewhere"))
