"""Which database, and how we connect to it.

Resolution order: an explicit URL (``--database-url``) > ``DATABASE_URL`` >
an embedded PostgreSQL (``pgserver``) kept in the user's XDG data directory,
started on demand and reused by later commands.  Every connection carries an
``application_name`` so operators can tell ours apart in pg_stat_activity.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import re
import select
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from awa import config, extras
from awa.job import DatabaseError

DATABASE_URL_ENV = "DATABASE_URL"
# A second URL straight to PostgreSQL (no pooler) for the connections that need a session:
# the leader's lock session and the LISTEN connections (``direct_database_url``).
DIRECT_DATABASE_URL_ENV = "AWA_DIRECT_DATABASE_URL"
# psycopg's own default: a statement is prepared server-side from its sixth execution.
DEFAULT_PREPARE_THRESHOLD = 5
T = TypeVar("T")

# What one round trip says about the server behind a URL.  ``pg_backend_pid()`` is the
# backend that runs the statement; the pid the connection reported at startup
# (BackendKeyData) is that same backend when we talk to PostgreSQL itself, and a key the
# pooler made up when a pooler (PgBouncer, pgcat, Odyssey) sits in between: they hand out
# their own cancel keys.  The rest tells two URLs for the same server and database apart
# from two different ones, and a standby from a primary.
SERVER_IDENTITY = """
SELECT pg_backend_pid() AS backend_pid, current_database() AS database,
       pg_postmaster_start_time() AS started_at, pg_is_in_recovery() AS standby"""


def embedded_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "awa" / "pgdata"


def embedded_database_url() -> str:
    """Start (or reuse) the embedded server and return a URL for its awa database."""
    # pgserver asks platformdirs for a runtime dir, which warns on hosts
    # without XDG_RUNTIME_DIR (containers, CI); its fallback is fine.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    if extras.missing_modules("embedded"):
        raise DatabaseError("no database configured: set DATABASE_URL or pass --database-url "
                            "(or " + extras.install_hint("embedded", "the embedded PostgreSQL")
                            + ")")
    import pgserver  # the embedded extra: only needed without a configured database
    data_dir = embedded_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    if not (data_dir / "postmaster.pid").exists():
        # Never silently: the operator learns a server starts, where, and how not to.
        log.warning("awa: starting the embedded PostgreSQL in %s (set DATABASE_URL or pass "
                    "--database-url to use your own server)", data_dir)
    try:
        server = pgserver.get_server(str(data_dir), cleanup_mode=None)
        server.psql("SELECT 1")  # proves it answers
        exists = server.psql(
            f"SELECT 1 FROM pg_database WHERE datname = '{config.EMBEDDED_DB_NAME}'")
        if "1 row" not in exists:
            server.psql(f"CREATE DATABASE {config.EMBEDDED_DB_NAME}")
        return server.get_uri(config.EMBEDDED_DB_NAME)
    except Exception as exc:
        raise DatabaseError(f"could not start the embedded PostgreSQL in {data_dir}: "
                            f"{one_line(exc)}; set DATABASE_URL to use your own server") from exc


def resolve_database_url(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    env = os.environ.get(DATABASE_URL_ENV)
    if env:
        return env
    return embedded_database_url()


def describe_source(explicit: str | None = None) -> str:
    if explicit:
        return "--database-url"
    if os.environ.get(DATABASE_URL_ENV):
        return DATABASE_URL_ENV
    return f"embedded PostgreSQL ({embedded_data_dir()})"


_PASSWORD_IN_URL = re.compile(r"(://[^:/@]+:)([^@]*)(@)")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)(\S+)", re.IGNORECASE)


def redact(url: str) -> str:
    """The URL with any password replaced by ``***``."""
    url = _PASSWORD_IN_URL.sub(r"\1***\3", url)
    url = re.sub(r"([?&]password=)[^&]*", r"\1***", url)
    return _PASSWORD_KV.sub(r"\1***", url)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


# Array parameters sent in binary (a ``%b`` placeholder): psycopg dumps a list as text
# element by element, with a regular-expression search per element for quoting --
# ~20x the CPU of its binary dump, and the hot path sends the ids and leases of every
# completed attempt, an insert_many batch seven arrays of its rows (text and smallint:
# queue storage's insert_many 15.6 -> 10.2 us of client CPU per job).  Only element types
# whose binary dump takes any list the engines pass: ints, str, Jsonb or None, UUIDs.  (A
# float list may mix ints, which binary refuses; enum arrays are cast from text[].)
BINARY_ARRAY_TYPES = frozenset({"bigint[]", "jsonb[]", "uuid[]", "text[]", "smallint[]"})


def placeholder_format(sql_type: str) -> str:
    """The psycopg placeholder format for a parameter cast to ``sql_type``: ``b`` or ``s``."""
    return "b" if sql_type in BINARY_ARRAY_TYPES else "s"


# Attribute set on a wrapped method so a second decoration (a subclass) does not wrap it twice.
_TRANSLATED_MARKER = "_awa_translated"


def database_errors_raise_awa(cls: type[T]) -> type[T]:
    """Class decorator: every public coroutine method raises ``awa.DatabaseError`` for a
    driver failure (the psycopg error chained), as the client API promises.

    Errors the methods already translate (a unique violation becomes
    ``UniqueConflict``) never reach this; anything else from psycopg or the
    pool would otherwise leak raw driver types (``AdminShutdown`` ...) to users.
    """
    for name in dir(cls):
        method = getattr(cls, name)
        if name.startswith("_") and name not in ("__aenter__", "__aexit__"):
            continue
        if inspect.iscoroutinefunction(method) and not getattr(method, _TRANSLATED_MARKER, False):
            setattr(cls, name, _translated(method))
    return cls


def _translated(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except psycopg.Error as exc:
            raise DatabaseError(f"database error: {one_line(exc)}") from exc

    setattr(call, _TRANSLATED_MARKER, True)
    return call


def connection_error(url: str, exc: BaseException) -> DatabaseError:
    return DatabaseError(
        f"cannot connect to {redact(url)}: {one_line(exc)} "
        f"(check --database-url or {DATABASE_URL_ENV})")


def resolve_direct_database_url(explicit: str | None = None) -> str | None:
    """``direct_database_url`` as given, else ``AWA_DIRECT_DATABASE_URL``, else None."""
    return explicit or os.environ.get(DIRECT_DATABASE_URL_ENV) or None


# URLs whose server refused the startup ``options`` (PgBouncer does, unless told to ignore
# them: ``ignore_startup_parameters``): connected without them from then on.
_OPTIONS_REFUSED: set[str] = set()


def connect_kwargs(application_name: str, autocommit: bool = True, url: str | None = None,
                   pooled: bool = False) -> dict[str, Any]:
    """Every connection's parameters: ``config.SESSION_OPTIONS`` after any ``options`` the
    URL gives (a keyword argument would replace the URL's), unless its server refuses them."""
    kwargs: dict[str, Any] = {
        "application_name": application_name,
        "autocommit": autocommit,
        "connect_timeout": config.CONNECT_TIMEOUT_S,
    }
    if url is not None and url not in _OPTIONS_REFUSED:
        given = psycopg.conninfo.conninfo_to_dict(url).get("options")
        kwargs["options"] = f"{given} {config.SESSION_OPTIONS}" if given else config.SESSION_OPTIONS
    if pooled:
        # A transaction pooler hands each transaction whichever server connection is free:
        # a statement psycopg prepared on one is unknown (or already taken) on the next
        # ("prepared statement \"_pg3_0\" already exists").  Never prepare server-side.
        kwargs["prepare_threshold"] = None
    return kwargs


@dataclass(frozen=True)
class ServerIdentity:
    """What ``SERVER_IDENTITY`` found behind one URL."""

    pooled: bool  # a pooler answered: the startup pid is not the backend's
    database: str
    started_at: datetime
    standby: bool

    def same_database(self, other: ServerIdentity) -> bool:
        return (self.database, self.started_at) == (other.database, other.started_at)


async def server_identity(conn: psycopg.AsyncConnection[Any]) -> ServerIdentity:
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(SERVER_IDENTITY, prepare=False)
    row = await cur.fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    return ServerIdentity(pooled=int(row["backend_pid"]) != conn.info.backend_pid,
                          database=str(row["database"]), started_at=row["started_at"],
                          standby=bool(row["standby"]))


async def connect(url: str, application_name: str, *, autocommit: bool = True,
                  row_factory: Any = dict_row, pooled: bool = False
                  ) -> psycopg.AsyncConnection[Any]:
    while True:
        kwargs: dict[str, Any] = {}
        try:
            kwargs = connect_kwargs(application_name, autocommit, url, pooled)
            return await psycopg.AsyncConnection.connect(url, row_factory=row_factory, **kwargs)
        except (psycopg.Error, ValueError) as exc:
            if not _options_refused(url, kwargs, exc):
                raise connection_error(url, exc) from exc


def _options_refused(url: str, sent: dict[str, Any], exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing the startup ``options`` we ``sent`` (the
    caller then connects again, without them from now on)."""
    if "options" not in sent or "unsupported startup parameter" not in str(exc):
        return False
    _OPTIONS_REFUSED.add(url)
    return True


def connect_sync(url: str, application_name: str, *, autocommit: bool = True,
                 row_factory: Any = dict_row) -> psycopg.Connection[Any]:
    while True:
        kwargs: dict[str, Any] = {}
        try:
            kwargs = connect_kwargs(application_name, autocommit, url)
            return psycopg.Connection.connect(url, row_factory=row_factory, **kwargs)
        except (psycopg.Error, ValueError) as exc:
            if not _options_refused(url, kwargs, exc):
                raise connection_error(url, exc) from exc


class _SteadyReconnect(AttemptWithBackoff):
    """Reconnect attempts at a short, steady pace instead of psycopg_pool's 1, 2, 4, 8 s...

    After an outage the pool must be serving again within a fraction of a
    second of the server answering; exponential back-off would leave it
    waiting for its next scheduled attempt for seconds.
    """

    INITIAL_DELAY = config.POOL_RECONNECT_DELAY_MS / 1000
    DELAY_BACKOFF = 1.0


log = logging.getLogger("awa.db")


class ConnectionTrouble(logging.Filter):
    """psycopg_pool's warnings while the database is unreachable, as one line, then at most
    one every ``config.DB_ERROR_LOG_INTERVAL_S`` (saying how many were held back), then one
    line when a connection succeeds again (``ResilientPool._connect``)."""

    def __init__(self, interval_s: float = config.DB_ERROR_LOG_INTERVAL_S) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.since: float | None = None  # the first failure of this outage
        self.logged_at = 0.0
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now = time.monotonic()
        text = one_line(Exception(record.getMessage()))
        if self.since is None:
            self.since, self.logged_at, self.suppressed = now, now, 0
            record.msg = ("awa: database connection trouble (%s); retrying, further errors "
                          "logged at most every %gs")
            record.args = (text, self.interval_s)
            return True
        if now - self.logged_at < self.interval_s:
            self.suppressed += 1
            return False
        record.msg = "awa: still no database connection after %.0fs (%d errors held back): %s"
        record.args = (now - self.since, self.suppressed, text)
        self.logged_at, self.suppressed = now, 0
        return True

    def recovered(self) -> None:
        if self.since is not None:
            log.warning("awa: database connection restored after %.0fs",
                        time.monotonic() - self.since)
            self.since = None


CONNECTION_TROUBLE = ConnectionTrouble()
logging.getLogger("psycopg.pool").addFilter(CONNECTION_TROUBLE)


class ResilientPool(AsyncConnectionPool):
    """The pool every runtime and client uses: dead connections replaced before use, steady
    reconnects.

    A connection is checked with a round trip (psycopg_pool's ``check_connection``, an
    empty query) only when it is suspect: its socket is readable while it sat idle in the
    pool -- a healthy idle connection has nothing to read, one the server ended
    (restart, ``pg_terminate_backend``, a crash) has its FATAL message or the end of the
    stream waiting -- or it sat idle longer than ``config.POOL_CHECK_IDLE_S`` (a peer that
    vanished without a word).  Checking every checkout cost a round trip per claim and per
    completion flush (issue 32).
    """

    def __init__(self, *args: Any, server: ServerIdentity | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, check=AsyncConnectionPool.check_connection, **kwargs)
        # What the first connection found behind the URL (None: not asked).
        self.server = server
        # When each pooled connection was last put back (weak: closed ones go by themselves).
        self._idle_since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    async def _add_connection(self, attempt: AttemptWithBackoff | None,
                              growing: bool = False) -> None:
        """psycopg_pool's hook for every new connection; only the first attempt's pacing differs."""
        await super()._add_connection(
            attempt or _SteadyReconnect(timeout=self.reconnect_timeout), growing)

    async def _add_to_pool(self, conn: Any) -> None:
        """psycopg_pool's hook for a connection (new or returned) going back to the pool."""
        self._idle_since[conn] = time.monotonic()
        await super()._add_to_pool(conn)

    async def _connect(self, timeout: float | None = None) -> Any:
        """psycopg_pool's connect; a success after failures says so once (ConnectionTrouble)."""
        conn = await super()._connect(timeout)
        CONNECTION_TROUBLE.recovered()
        return conn

    async def _check_connection(self, conn: Any) -> None:
        """psycopg_pool's hook before a connection is handed out: the round-trip check,
        for a suspect connection only."""
        if connection_suspect(conn, self._idle_since.get(conn)):
            await super()._check_connection(conn)


def connection_suspect(conn: psycopg.AsyncConnection[Any], idle_since: float | None,
                       max_idle_s: float = config.POOL_CHECK_IDLE_S) -> bool:
    """Whether an idle pooled connection needs a round trip before use: it idled longer
    than ``max_idle_s`` (or since an unknown time), or its socket has input waiting
    (a zero-timeout poll: a system call, no round trip)."""
    if idle_since is None or time.monotonic() - idle_since > max_idle_s:
        return True
    try:  # poll, not select: any descriptor number (select stops at FD_SETSIZE)
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):  # closed already: let the check say so
        return True


def behind_pooler(pool: AsyncConnectionPool) -> bool:
    """Whether the pool's connections go through a pooler (detected, or declared)."""
    server = getattr(pool, "server", None)
    return bool(server is not None and server.pooled)


async def open_pool(url: str, application_name: str, max_size: int = config.MAX_CONNECTIONS,
                    min_size: int = 1, pooled: bool | None = None, *,
                    max_idle_s: float | None = None, max_lifetime_s: float | None = None,
                    acquire_timeout_s: float | None = None) -> AsyncConnectionPool:
    """An open pool of autocommit, dict-row connections; fails fast with one line.

    ``pooled``: whether ``url`` goes through a transaction pooler (PgBouncer in
    transaction mode); None asks the server (``server_identity``).  A pooled pool's
    connections never prepare statements server-side; ``pool.server`` keeps the answer.
    ``max_idle_s`` / ``max_lifetime_s`` / ``acquire_timeout_s``: psycopg_pool's
    ``max_idle`` / ``max_lifetime`` / ``timeout`` (its defaults when None).
    """
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(f"invalid database URL {redact(url)}: {one_line(exc)}") from exc
    # One direct connection first: a wrong URL fails at once with the server's
    # own reason instead of after the pool's timeout.
    probe = await connect(url, application_name, pooled=True)
    try:
        server = await server_identity(probe)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot ask {redact(url)} about its server: {one_line(exc)}") from exc
    finally:
        await probe.close()
    if pooled is not None:
        server = replace(server, pooled=pooled)
    pool = ResilientPool(
        url,
        server=server,
        min_size=min(min_size, max_size),
        max_size=max_size,
        kwargs={**connect_kwargs(application_name, url=url, pooled=server.pooled),
                "row_factory": dict_row},
        open=False,
        name=application_name,
        **{k: v for k, v in (("max_idle", max_idle_s), ("max_lifetime", max_lifetime_s),
                             ("timeout", acquire_timeout_s)) if v is not None},
        # A connection the server ended (restart, pg_terminate_backend) is found and
        # replaced by ResilientPool, not handed to the caller as AdminShutdown.
    )
    try:
        await pool.open(wait=True, timeout=config.CONNECT_TIMEOUT_S + 1)
    except PoolTimeout as exc:
        await pool.close()
        raise DatabaseError(f"cannot connect to {redact(url)}: pool timed out") from exc
    return pool
