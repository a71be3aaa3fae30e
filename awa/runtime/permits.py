"""Worker slots per queue: hard limits, or weighted shares of a global pool.

Hard mode: a queue runs at most ``max_workers`` handlers.  Weighted mode:
each queue is guaranteed ``min_workers`` slots; the rest of
``global_max_workers`` (the overflow) is shared in proportion to ``weight``
among the queues that currently have work waiting, so an idle queue lends
its share and a busy one gets it back as soon as it has work again.
Everything runs on the event loop thread, so plain counters suffice.
"""

from __future__ import annotations

import asyncio
import math


class QueuePermits:
    """The slots one dispatcher may take; ``wait_for_capacity`` parks until one frees."""

    def __init__(self, name: str, *, max_workers: int | None = None,
                 min_workers: int = 0, weight: int = 1,
                 pool: WeightedPool | None = None) -> None:
        self.name = name
        self.max_workers = max_workers
        self.min_workers = min_workers
        self.weight = weight
        self.pool = pool
        self.in_use = 0
        self.overflow_held = 0
        self.hungry = False  # weighted mode: has work beyond what it holds
        self._freed = asyncio.Event()
        if pool is not None:
            pool.members.append(self)

    @property
    def capacity(self) -> int:
        if self.pool is None:
            return self.max_workers or 0
        return self.min_workers + self.pool.entitlement(self)

    def try_acquire(self, wanted: int) -> int:
        """Take up to ``wanted`` slots now; returns how many were granted."""
        if wanted <= 0:
            return 0
        if self.pool is None:
            granted = min(wanted, (self.max_workers or 0) - self.in_use)
            granted = max(granted, 0)
            self.in_use += granted
            return granted
        guaranteed = max(min(wanted, self.min_workers - (self.in_use - self.overflow_held)), 0)
        extra = self.pool.take_overflow(self, wanted - guaranteed)
        self.overflow_held += extra
        granted = guaranteed + extra
        self.in_use += granted
        return granted

    def release(self, n: int = 1) -> None:
        if n <= 0:
            return
        self.in_use -= n
        if self.pool is not None:
            # Overflow slots go back to the shared pool first, keeping the guarantee.
            from_overflow = min(n, self.overflow_held)
            self.overflow_held -= from_overflow
            self.pool.give_back(from_overflow)
        self._freed.set()

    def notify_freed(self) -> None:
        self._freed.set()

    async def wait_for_capacity(self, timeout: float) -> None:
        self._freed.clear()
        try:
            await asyncio.wait_for(self._freed.wait(), timeout)
        except TimeoutError:
            pass


class WeightedPool:
    """The overflow slots of weighted mode: ``global_max_workers - sum(min_workers)``."""

    def __init__(self, global_max_workers: int, total_min_workers: int) -> None:
        self.size = max(global_max_workers - total_min_workers, 0)
        self.used = 0
        self.members: list[QueuePermits] = []

    def entitlement(self, member: QueuePermits) -> int:
        """This queue's fair share of the overflow among queues with work waiting."""
        contenders = [m for m in self.members if m.hungry or m.overflow_held > 0]
        if member not in contenders:
            contenders.append(member)
        total_weight = sum(m.weight for m in contenders) or 1
        return math.ceil(self.size * member.weight / total_weight)

    def take_overflow(self, member: QueuePermits, wanted: int) -> int:
        if wanted <= 0:
            return 0
        room = min(self.size - self.used, self.entitlement(member) - member.overflow_held)
        granted = max(min(wanted, room), 0)
        self.used += granted
        return granted

    def give_back(self, n: int) -> None:
        self.used -= n
        for m in self.members:
            m.notify_freed()
