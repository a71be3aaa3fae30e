"""Polling until a condition holds, for tests that watch a real system settle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any


def _polls(predicate: Callable[[], Any], timeout: float, message: str) -> Iterator[Any]:
    """Yield ``predicate()`` once per poll; a falsy value after ``timeout``
    seconds fails the test with what it was waiting for."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if not value and time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        yield value


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> Any:
    """Blocking poll: for tests whose system runs in other processes."""
    for value in _polls(predicate, timeout, message):
        if value:
            return value
        time.sleep(interval)


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0,
                     message: str = "condition", interval: float = 0.05) -> Any:
    """Poll without blocking the loop, so in-process runtimes keep running."""
    for value in _polls(predicate, timeout, message):
        if value:
            return value
        await asyncio.sleep(interval)
