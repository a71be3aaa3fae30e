"""Per-queue dispatchers and the one LISTEN connection that wakes them.

A dispatcher takes permits first, then claims up to
``min(permits, tokens, claim_batch_size)`` rows in one statement, hands
them to the executor and goes again at once while claims come back full.
It claims nothing while a whole completion batch waits to be written
(``CompletionBatcher.backlogged``): an unwritten outcome is an attempt still
open in the database, so a runtime never holds more attempts open than its
slots plus one completion batch.
Otherwise it sleeps until a ``NOTIFY "awa:<queue>"``, freed capacity, or
the poll interval (the fallback when notifications are lost or the
listener connection is down).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

import psycopg

from awa import config, db, recording
from awa.config import QueueConfig, RuntimeSettings
from awa.job import Job
from awa.runtime.completion import CompletionBatcher
from awa.runtime.health import Health
from awa.runtime.loops import BackgroundLoop, listen_forever, stop_tasks
from awa.runtime.permits import QueuePermits
from awa.runtime.rate_limit import TokenBucket
from awa.storage.engine import AttemptWrite, Engine

if TYPE_CHECKING:  # pragma: no cover
    from psycopg_pool import AsyncConnectionPool

# Starts a claimed job's handler (``Executor.start_job``): (job, permits, deadline).
StartJob = Callable[[Job[Any], QueuePermits, float], object]

log = logging.getLogger("awa.runtime.dispatcher")

REASON_NOTIFY = "notify"
REASON_POLL = "poll"
REASON_CAPACITY = "capacity"


class Dispatcher:
    """Claims ``queue``'s jobs through ``engine`` on ``pool`` as ``instance_id`` and hands
    them to ``start_job``; holds back while ``completion`` is backlogged; tells ``health``
    whether the database answers.  ``settings``: the runtime's defaults for the queue."""

    def __init__(self, queue: QueueConfig, permits: QueuePermits, *,
                 settings: RuntimeSettings, pool: AsyncConnectionPool, engine: Engine,
                 health: Health, completion: CompletionBatcher, start_job: StartJob,
                 instance_id: UUID) -> None:
        self.pool = pool
        self.engine = engine
        self.health = health
        self.completion = completion
        self.start_job = start_job
        self.instance_id = instance_id
        self.queue = queue
        self.name = queue.name
        self.permits = permits
        self.bucket = TokenBucket(queue.rate_limit) if queue.rate_limit else None
        poll_ms = queue.poll_interval_ms or settings.poll_interval_ms
        self.poll_interval = poll_ms / 1000.0
        # 0: attempts without a deadline (deadline_at NULL, never dropped), as 0.6.9.
        self.deadline_ms = queue.deadline_duration_ms or None
        self.batch_size = max(queue.claim_batch_size, 1)
        # Claimers sharing this queue's permits: a second one claims while the
        # first waits for the database, when there are slots for two batches.
        # Each claims at most half the queue's slots, so the two alternate.
        capacity = permits.max_workers or settings.global_max_workers or 1
        self.claimers = int(queue.extra.get("claimers") or (2 if capacity >= 2 else 1))
        self.batch_size = min(self.batch_size, max(-(-capacity // self.claimers), 1))
        # A claim slower than this may hand back attempts rescue has already taken
        # (half the staleness after which an attempt that never heartbeated is rescued).
        self._paused_claim_ms = settings.heartbeat_staleness_ms / 2
        self._wake = asyncio.Event()
        self._stopping = False
        self.last_loop_at = time.monotonic()
        self.tasks: list[asyncio.Task[None]] = []
        self.woken_at: float | None = None  # metrics: first wake since the last claim
        self._claiming: set[asyncio.Task[Any]] = set()  # tasks with a claim statement out

    @property
    def alive(self) -> bool:
        return bool(self.tasks) and not any(t.done() for t in self.tasks)

    def wake(self) -> None:
        self.woken_at = recording.woken_at(self.woken_at)
        self._wake.set()

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._run(), name=f"awa-dispatch-{self.name}-{i}")
                      for i in range(self.claimers)]

    async def stop(self) -> None:
        """Claim no more.  A claim already sent is let finish and its jobs are started
        (the shutdown then runs them as it runs every handler in flight): cancelled, its
        statement may still have committed, leaving attempts open that nobody runs until
        rescue finds them.  Loops that are only waiting are cancelled at once."""
        self._stopping = True
        self._wake.set()
        self.permits.notify_freed()
        claiming = [t for t in self.tasks if t in self._claiming]
        if claiming:
            await asyncio.wait(claiming, timeout=config.CLAIM_STOP_GRACE_MS / 1000.0)
        await stop_tasks(self.tasks)

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            self.last_loop_at = time.monotonic()
            wanted = self.batch_size
            if self.bucket is not None:
                tokens = self.bucket.available()
                if tokens <= 0:
                    recording.rate_limited(self.name)
                    await asyncio.sleep(min(self.bucket.seconds_until_token(), self.poll_interval))
                    continue
                wanted = min(wanted, tokens)
            if self.completion.backlogged:
                # Back-pressure: the flushers are behind; claiming more would only add
                # attempts that are open in the database and waiting on them.
                await self.completion.wait_for_room(self.poll_interval)
                continue
            recording.capacity(self.name, self.permits)
            granted = self.permits.try_acquire(wanted)
            if granted == 0:
                await self.permits.wait_for_capacity(self.poll_interval)
                recording.wakeup(self.name, REASON_CAPACITY)
                continue
            if self.bucket is not None:
                self.bucket.consume(granted)  # reserved: a second claimer sees fewer tokens
            self._wake.clear()
            started = time.perf_counter()
            try:
                jobs = await self._claim_checked(granted, started)
                failures = 0
                self.health.postgres_connected = True
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._give_back(granted)
                self.health.postgres_connected = False
                failures += 1
                log.warning("claim on queue %s failed (%s); retrying", self.name, db.one_line(exc))
                await asyncio.sleep(min(self.poll_interval * failures, 5.0))
                continue
            except psycopg.Error as exc:
                self._give_back(granted)
                failures += 1
                log.error("claim on queue %s failed: %s", self.name, db.one_line(exc))
                await asyncio.sleep(min(self.poll_interval * failures, 5.0))
                continue
            if len(jobs) < granted:
                self._give_back(granted - len(jobs))
            self.permits.hungry = len(jobs) == granted
            recording.claimed(self.name, jobs, time.perf_counter() - started)
            recording.unused_permits(self.name, granted, len(jobs))
            self.woken_at = recording.wake_to_claim(self.name, self.woken_at)
            if jobs:
                self._start_jobs(jobs)
                if len(jobs) == granted:
                    continue  # probably more waiting: claim again at once
            if self._stopping:
                break
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
                recording.wakeup(self.name, REASON_NOTIFY)
            except TimeoutError:
                recording.wakeup(self.name, REASON_POLL)

    async def _claim_checked(self, n: int, started: float) -> list[Job[Any]]:
        """The claim, and after a slow one the check of which attempts are still ours;
        the task counts as claiming meanwhile (``stop`` lets it finish)."""
        me = asyncio.current_task()
        if me is not None:
            self._claiming.add(me)
        try:
            jobs = await self._claim(n)
            took_s = time.perf_counter() - started
            if jobs and took_s * 1000 >= self._paused_claim_ms:
                jobs = await self._still_ours(jobs, took_s)
            return jobs
        finally:
            if me is not None:
                self._claiming.discard(me)

    async def _still_ours(self, jobs: list[Job[Any]], took_s: float) -> list[Job[Any]]:
        """The claimed jobs whose attempt is still ours, after a claim that took so long
        (the process was paused, or its answer sat unread) that rescue may have moved
        them on meanwhile: one heartbeat says which.  The others are not run -- their
        next attempt will be -- instead of running twice."""
        async with self.pool.connection() as conn:
            alive = set(await self.engine.heartbeat_batch(
                conn, [AttemptWrite(j.id, j.run_lease) for j in jobs]))
        kept = [j for j in jobs if j.id in alive]
        if len(kept) < len(jobs):
            log.warning("claim on queue %s took %.1fs; %d of %d claimed job(s) were rescued "
                        "meanwhile and are left to their next attempt", self.name, took_s,
                        len(jobs) - len(kept), len(jobs))
        return kept

    def _give_back(self, n: int) -> None:
        """Slots and tokens reserved for rows the claim did not return."""
        self.permits.release(n)
        if self.bucket is not None:
            self.bucket.consume(-n)

    async def _claim(self, n: int) -> list[Job[Any]]:
        """One claim statement: the engine builds the running jobs from its rows."""
        async with self.pool.connection() as conn:
            return await self.engine.claim_batch(
                conn, self.name, n, self.deadline_ms, self.instance_id,
                aging_interval_ms=self.queue.priority_aging_interval_ms)

    def _start_jobs(self, jobs: list[Job[Any]]) -> None:
        start_job = self.start_job
        deadline = (math.inf if self.deadline_ms is None
                    else time.monotonic() + self.deadline_ms / 1000.0)
        for job in jobs:
            start_job(job, self.permits, deadline)


class QueueListener(BackgroundLoop):
    """One connection LISTENing on ``awa:<queue>`` for every queue of the runtime.

    Reconnects when the connection dies; after a reconnect every dispatcher
    is woken once, since notifications sent meanwhile were lost.
    """

    task_name = "awa-queue-listener"

    def __init__(self, url: str, dispatchers: dict[str, Dispatcher]) -> None:
        self.url = url  # a session: PostgreSQL itself, not a transaction pooler
        self.dispatchers = dispatchers
        self.by_channel = {config.NOTIFY_CHANNEL_PREFIX + name: d
                           for name, d in dispatchers.items()}
        self.connected = asyncio.Event()

    async def _run(self) -> None:
        await listen_forever(self.url, self.by_channel,
                             on_listening=self._listening, on_notify=self._notified,
                             on_lost=self._lost, log=log,
                             application_name=config.APP_NAME_QUEUE_LISTENER)

    def _listening(self) -> None:
        self.connected.set()
        for d in self.dispatchers.values():
            d.wake()

    def _notified(self, note: psycopg.Notify) -> None:
        d = self.by_channel.get(note.channel)
        if d is not None:
            d.wake()

    def _lost(self, exc: Exception) -> None:
        self.connected.clear()
        log.warning("queue listener connection lost (%s); polling until it is back",
                    db.one_line(exc))
