"""`awa serve`: the same console in a browser via textual-serve, on 127.0.0.1 by default."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import httpx

from tui.conftest import add_runtime

AWA = Path(sys.executable).with_name("awa")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, proc: subprocess.Popen, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            if proc.poll() is not None:
                raise AssertionError(f"awa serve exited: {proc.stderr.read()}")
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def console_output(url: str, want: str, timeout: float = 30.0) -> str:
    """What the browser's websocket receives from the console, until ``want`` shows up."""
    seen = ""
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as ws:
            deadline = time.monotonic() + timeout
            while want not in seen:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{want!r} never reached the browser; got:\n{seen[-3000:]}")
                try:
                    msg = await ws.receive(timeout=remaining)
                except TimeoutError:
                    continue
                if msg.type == aiohttp.WSMsgType.BINARY:
                    seen += msg.data.decode("utf-8", "replace")
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    seen += msg.data
                else:
                    raise AssertionError(f"websocket closed ({msg.type}); got:\n{seen[-3000:]}")
    return seen


async def test_awa_serve_serves_the_console_on_loopback(database_url, db):
    add_runtime(db, host="served-worker", pid=77, leader=True, last_seen=datetime.now(UTC))
    port = free_port()
    proc = subprocess.Popen([str(AWA), "--database-url", database_url, "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DATABASE_URL": ""})
    try:
        page = await asyncio.to_thread(wait_for_http, f"http://127.0.0.1:{port}/", proc)
        assert page.status_code == 200
        assert "awa-tui" in page.text
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                                   text=True).stdout
        local = {line.split()[3] for line in listening.splitlines()}
        assert local == {f"127.0.0.1:{port}"}  # loopback only
        output = await console_output(f"ws://127.0.0.1:{port}/ws?width=140&height=40",
                                      "served-worker")
        assert "LEADER" in output
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
