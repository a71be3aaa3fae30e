"""Which database, and how we connect to it.

Resolution order: an explicit URL (``--database-url``) > ``DATABASE_URL`` >
an embedded PostgreSQL (``pgserver``) kept in the user's XDG data directory,
started on demand and reused by later commands.  Every connection carries an
``application_name`` so operators can tell ours apart in pg_stat_activity.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from awa import config
from awa.job import DatabaseError

DATABASE_URL_ENV = "DATABASE_URL"
T = TypeVar("T")


def embedded_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "awa" / "pgdata"


def embedded_database_url() -> str:
    """Start (or reuse) the embedded server and return a URL for its awa database."""
    # pgserver asks platformdirs for a runtime dir, which warns on hosts
    # without XDG_RUNTIME_DIR (containers, CI); its fallback is fine.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import pgserver  # imported lazily: it is only needed without a configured database
    except ImportError as exc:  # pragma: no cover - pgserver is a declared dependency
        raise DatabaseError("no database configured and pgserver is not installed; "
                            "set DATABASE_URL or pass --database-url") from exc
    data_dir = embedded_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
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
        if inspect.iscoroutinefunction(method) and not getattr(method, "_awa_translated", False):
            setattr(cls, name, _translated(method))
    return cls


def _translated(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except psycopg.Error as exc:
            raise DatabaseError(f"database error: {one_line(exc)}") from exc

    call._awa_translated = True  # type: ignore[attr-defined] - a marker against double wrapping
    return call


def connection_error(url: str, exc: BaseException) -> DatabaseError:
    return DatabaseError(
        f"cannot connect to {redact(url)}: {one_line(exc)} "
        f"(check --database-url or {DATABASE_URL_ENV})")


def connect_kwargs(application_name: str, autocommit: bool = True) -> dict[str, Any]:
    return {
        "application_name": application_name,
        "autocommit": autocommit,
        "connect_timeout": config.CONNECT_TIMEOUT_S,
    }


async def connect(url: str, application_name: str, *, autocommit: bool = True,
                  row_factory: Any = dict_row) -> psycopg.AsyncConnection[Any]:
    try:
        return await psycopg.AsyncConnection.connect(
            url, row_factory=row_factory, **connect_kwargs(application_name, autocommit))
    except (psycopg.Error, ValueError) as exc:
        raise connection_error(url, exc) from exc


def connect_sync(url: str, application_name: str, *, autocommit: bool = True,
                 row_factory: Any = dict_row) -> psycopg.Connection[Any]:
    try:
        return psycopg.Connection.connect(
            url, row_factory=row_factory, **connect_kwargs(application_name, autocommit))
    except (psycopg.Error, ValueError) as exc:
        raise connection_error(url, exc) from exc


class _SteadyReconnect(AttemptWithBackoff):
    """Reconnect attempts at a short, steady pace instead of psycopg_pool's 1, 2, 4, 8 s...

    After an outage the pool must be serving again within a fraction of a
    second of the server answering; exponential back-off would leave it
    waiting for its next scheduled attempt for seconds.
    """

    INITIAL_DELAY = config.POOL_RECONNECT_DELAY_MS / 1000
    DELAY_BACKOFF = 1.0


class ResilientPool(AsyncConnectionPool):
    """The pool every runtime and client uses: connections checked before use, steady reconnects."""

    async def _add_connection(self, attempt: AttemptWithBackoff | None,
                              growing: bool = False) -> None:
        """psycopg_pool's hook for every new connection; only the first attempt's pacing differs."""
        await super()._add_connection(
            attempt or _SteadyReconnect(timeout=self.reconnect_timeout), growing)


async def open_pool(url: str, application_name: str, max_size: int = config.MAX_CONNECTIONS,
                    min_size: int = 1) -> AsyncConnectionPool:
    """An open pool of autocommit, dict-row connections; fails fast with one line."""
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(f"invalid database URL {redact(url)}: {one_line(exc)}") from exc
    # One direct connection first: a wrong URL fails at once with the server's
    # own reason instead of after the pool's timeout.
    probe = await connect(url, application_name)
    await probe.close()
    pool = ResilientPool(
        url,
        min_size=min(min_size, max_size),
        max_size=max_size,
        kwargs={**connect_kwargs(application_name), "row_factory": dict_row},
        open=False,
        name=application_name,
        # A connection the server ended (restart, pg_terminate_backend) is
        # found and replaced here, not handed to the caller as AdminShutdown.
        check=AsyncConnectionPool.check_connection,
    )
    try:
        await pool.open(wait=True, timeout=config.CONNECT_TIMEOUT_S + 1)
    except PoolTimeout as exc:
        await pool.close()
        raise DatabaseError(f"cannot connect to {redact(url)}: pool timed out") from exc
    return pool
