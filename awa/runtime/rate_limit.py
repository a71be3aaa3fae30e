"""Token bucket per queue: ``max_rate`` claims per second, bursts of ``burst``."""

from __future__ import annotations

import time
from collections.abc import Callable

from awa.config import RateLimit


class TokenBucket:
    def __init__(self, limit: RateLimit,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(limit.max_rate)
        self.burst = max(int(limit.burst), 1)
        self._clock = clock
        self._tokens = float(self.burst)
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def available(self) -> int:
        """Whole tokens available now."""
        self._refill()
        return int(self._tokens)

    def consume(self, n: int) -> None:
        """Take ``n`` tokens (negative: give unused ones back, up to the burst)."""
        self._refill()
        self._tokens = min(self.burst, self._tokens - n)

    def seconds_until_token(self) -> float:
        """How long until at least one whole token is available."""
        self._refill()
        missing = 1.0 - self._tokens
        return 0.0 if missing <= 0 else missing / self.rate
