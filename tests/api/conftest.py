"""A real ``awa serve`` process for each test, spoken to over HTTP with httpx."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from support.pgcluster import free_port

AWA = Path(sys.executable).with_name("awa")


class Served:
    def __init__(self, proc: subprocess.Popen[str], base: str) -> None:
        self.proc = proc
        self.base = base

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30)


@contextmanager
def awa_serve(database_url: str, *args: str, host: str = "127.0.0.1", console: bool = False,
              timeout: float = 30.0) -> Iterator[Served]:
    """``awa serve`` (``--no-console`` unless asked) on a free port, until it answers
    /api/capabilities (200, or 401 with a token)."""
    port = free_port()
    proc = subprocess.Popen(
        [str(AWA), "--database-url", database_url, "serve", "--host", host,
         "--port", str(port), "--cache-ttl", "0", *([] if console else ["--no-console"]),
         *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "DATABASE_URL": ""})
    base = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                r = httpx.get(f"{base}/api/capabilities", timeout=2)
                if r.status_code in (200, 401):
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise AssertionError(f"awa serve exited {proc.returncode}: "
                                     f"{proc.stderr.read() if proc.stderr else ''}")
            if time.monotonic() > deadline:
                raise AssertionError("awa serve never answered")
            time.sleep(0.1)
        yield Served(proc, base)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def served(database_url: str) -> Iterator[Served]:
    with awa_serve(database_url) as s:
        yield s
