"""Leader election: one maintenance leader per database.

The leader holds the session advisory lock ``config.ADVISORY_LOCK_LEADER``
on a dedicated connection (``application_name`` ``awa-leader <instance id>``, see
``leader_application_name``).  Postgres
releases a session lock when its connection ends, so a leader that crashes
or loses the network frees the lock for the next candidate; non-leaders try
again every ``leader_election_interval``.  The leader pings its connection
and steps down as soon as it is lost.

Fencing: a leader that is frozen (SIGSTOP, a GC pause, a swapped-out host, a
partition that keeps the TCP session) holds its socket open, so the server
would keep the lock forever.  The lock session therefore sets
``idle_session_timeout`` to the fence bound (``LEADER_FENCE_PINGS`` ping
intervals): a leader that stops pinging loses its session, and with it the
lock, without operator action or superuser rights.  A woken former leader
sees that its last confirmation is older than the bound and pings before it
runs another maintenance step (``confirmed()``).

Behind a transaction pooler (PgBouncer ``pool_mode = transaction``) with no
direct URL there is no session to hold a lock in: a session lock taken through
the pooler stays on whichever server connection ran it, owned by nobody.  The
elector then holds the same key as a *transaction* lock
(``pg_try_advisory_xact_lock``) in a transaction it keeps open for as long as it
leads -- a pooler never hands a server connection to anyone else while its
transaction is open -- and pings inside it.  The fence is
``idle_in_transaction_session_timeout``, set with ``set_config(..., true)`` (local
to that transaction).  A crashed leader's client connection closes, the pooler
ends its transaction, and the lock goes with it.  Both kinds of lock on one key
exclude each other, so runtimes with and without a direct URL share one election.
The open transaction has no transaction id and, between pings, no snapshot: it
does not hold the xmin horizon back.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from awa import config, db
from awa.job import DatabaseError

log = logging.getLogger("awa.leader")

# Session advisory locks: plain PostgreSQL, no job table, the same for every engine.
TRY_LEADER_LOCK = "SELECT pg_try_advisory_lock(%(key)s) AS acquired"
RELEASE_LEADER_LOCK = "SELECT pg_advisory_unlock(%(key)s) AS released"
LEADER_PING = "SELECT 1"


# The server ends the lock session once it idles this long (milliseconds).
SET_FENCE = "SELECT set_config('idle_session_timeout', %(ms)s, false)"

# The same lock held in a transaction kept open (a pooled connection has no session).
TRY_LEADER_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(%(key)s) AS acquired"
SET_XACT_FENCE = "SELECT set_config('idle_in_transaction_session_timeout', %(ms)s, true)"

SESSION_LOCK = "session"
TRANSACTION_LOCK = "transaction"


def leader_application_name(instance_id: object) -> str:
    """The lock connection's ``application_name``: ``awa-leader <instance id>``, so a
    read-only reader can tell from ``pg_locks`` / ``pg_stat_activity`` which runtime holds
    the leader lock before that runtime's snapshot says so (47 characters, within
    PostgreSQL's 63)."""
    return f"{config.APP_NAME_LEADER} {instance_id}"


def leader_instance_of(application_name: str | None) -> str | None:
    """The runtime instance id a lock connection's ``application_name`` names (None: a
    bare ``awa-leader`` of an older runtime, or another distribution's lock holder)."""
    prefix = config.APP_NAME_LEADER + " "
    if application_name and application_name.startswith(prefix):
        return application_name[len(prefix):].strip() or None
    return None


def is_leader_application_name(application_name: str | None) -> bool:
    """``awa-leader``, with or without the instance id."""
    return application_name == config.APP_NAME_LEADER or \
        leader_instance_of(application_name) is not None


def fence_ms(ping_interval_ms: int) -> int:
    """How long a leader may go without pinging before the server fences it off."""
    return max(config.LEADER_FENCE_MIN_MS,
               min(config.LEADER_FENCE_PINGS * ping_interval_ms, config.LEADER_FENCE_MAX_MS))


class LeaderElector:
    def __init__(self, database_url: str, *, lock_key: int = config.ADVISORY_LOCK_LEADER,
                 application_name: str = config.APP_NAME_LEADER,
                 ping_interval_ms: int = config.LEADER_PING_MAX_INTERVAL_MS,
                 lock_scope: str = SESSION_LOCK) -> None:
        """``lock_scope``: ``SESSION_LOCK`` (``database_url`` reaches PostgreSQL itself)
        or ``TRANSACTION_LOCK`` (it goes through a transaction pooler)."""
        if lock_scope not in (SESSION_LOCK, TRANSACTION_LOCK):
            raise ValueError(f"lock_scope must be {SESSION_LOCK!r} or {TRANSACTION_LOCK!r}")
        self.database_url = database_url
        self.lock_scope = lock_scope
        self.lock_key = lock_key
        self.application_name = application_name
        self.fence_ms = fence_ms(ping_interval_ms)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.is_leader = False
        self._confirmed_at = 0.0  # time.monotonic() of the last proof we hold the lock
        self._lost_database = False
        # When an election attempt first succeeded again after the database was lost.
        self.database_back_at: float | None = None

    def use(self, database_url: str, lock_scope: str) -> None:
        """Elect through another URL / lock scope (before the first attempt)."""
        if lock_scope not in (SESSION_LOCK, TRANSACTION_LOCK):
            raise ValueError(f"lock_scope must be {SESSION_LOCK!r} or {TRANSACTION_LOCK!r}")
        self.database_url = database_url
        self.lock_scope = lock_scope

    async def try_acquire(self) -> bool:
        """One election attempt; True when this elector holds (or already held) the lock."""
        if self.is_leader:
            return await self.still_leader()
        try:
            row = await self._try_lock()
        except (psycopg.Error, DatabaseError, OSError) as exc:
            log.warning("leader election attempt failed: %s", db.one_line(exc))
            self._lost_database = True
            await self._drop_connection()
            return False
        if self._lost_database:
            self._lost_database = False
            self.database_back_at = time.monotonic()
        self.is_leader = row is not None and bool(row["acquired"])
        if self.is_leader:
            self._confirmed_at = time.monotonic()
        else:
            # Followers do not keep an idle connection open between attempts.
            await self._drop_connection()
        return self.is_leader

    async def _try_lock(self) -> Any:
        if self.lock_scope == SESSION_LOCK:
            if self._conn is None or self._conn.closed:
                self._conn = await db.connect(self.database_url, self.application_name)
                await self._conn.execute(SET_FENCE, {"ms": str(self.fence_ms)})
            return await (await self._conn.execute(TRY_LEADER_LOCK,
                                                   {"key": self.lock_key})).fetchone()
        # A fresh transaction per attempt (a follower holds no connection between them):
        # not autocommit, so the lock lives until this transaction ends.
        await self._drop_connection()
        self._conn = await db.connect(self.database_url, self.application_name,
                                      autocommit=False, pooled=True)
        await self._conn.execute(SET_XACT_FENCE, {"ms": str(self.fence_ms)})
        return await (await self._conn.execute(TRY_LEADER_XACT_LOCK,
                                               {"key": self.lock_key})).fetchone()

    async def still_leader(self) -> bool:
        """Ping the lock's connection; a lost connection means the lock is gone."""
        if not self.is_leader or self._conn is None:
            return False
        try:
            await self._conn.execute(LEADER_PING)
            self._confirmed_at = time.monotonic()
            return True
        except (psycopg.Error, OSError) as exc:
            log.warning("leader connection lost, stepping down: %s", db.one_line(exc))
            self._lost_database = True
            self.is_leader = False
            await self._drop_connection()
            return False

    def database_steady_for(self) -> float:
        """Seconds the lock connection has worked since it was last lost (inf: never lost)."""
        if self._lost_database:
            return 0.0
        if self.database_back_at is None:
            return float("inf")
        return time.monotonic() - self.database_back_at

    async def confirmed(self) -> bool:
        """Still the leader, asking the server first when the last proof is older than the fence.

        Maintenance steps call this before they write: a process that was
        frozen past the fence has lost its session (and the lock) meanwhile,
        and must not act on leadership it no longer has.
        """
        if not self.is_leader:
            return False
        if (time.monotonic() - self._confirmed_at) * 1000 < self.fence_ms / 2:
            return True
        return await self.still_leader()

    async def release(self) -> None:
        """Give up leadership (graceful shutdown): unlock, then close."""
        if self.is_leader and self._conn is not None and not self._conn.closed:
            try:
                if self.lock_scope == SESSION_LOCK:
                    await self._conn.execute(RELEASE_LEADER_LOCK, {"key": self.lock_key})
                else:
                    await self._conn.rollback()  # ends the transaction, and its lock
            except (psycopg.Error, OSError) as exc:
                log.warning("could not release the leader lock cleanly: %s", db.one_line(exc))
        self.is_leader = False
        await self._drop_connection()

    @property
    def backend_pid(self) -> int | None:
        """The lock connection's server pid (tests and diagnostics)."""
        if self._conn is None or self._conn.closed:
            return None
        return self._conn.info.backend_pid

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except (psycopg.Error, OSError):
                pass
