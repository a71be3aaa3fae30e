"""DDL that never disturbs live work: each step of `awa migrate` takes its locks up front.

A migration step runs in a transaction of its own that first takes the migration's advisory
lock (other migrators wait their turn), then ``SET LOCAL lock_timeout`` and one ``LOCK
TABLE`` of every table and view of the schemas it changes, in name order, then its DDL.  So:

- it never waits for a lock while holding some that a worker waits for, except during that
  one ``LOCK`` statement, which gives up after ``config.MIGRATE_LOCK_TIMEOUT_MS`` -- well
  inside the server's ``deadlock_timeout``, so the migration, not the worker, is the one to
  roll back (a deadlock found in its favour is retried the same way);
- a worker's statement waits at most that long plus the step's own DDL;
- the step is retried after a growing pause; after ``config.MIGRATE_LOCK_ATTEMPTS`` tries
  ``MigrationBusy`` says in one line what holds the tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import psycopg

from awa import config
from awa.job import DatabaseError
from awa.statements import InTransaction, Query, Steps

T = TypeVar("T")

ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(%s)"
LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"
RELATIONS = """
SELECT format('%%I.%%I', n.nspname, c.relname) AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = ANY(%s::text[]) AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition
 ORDER BY n.nspname, c.relname"""
PAUSE = "SELECT pg_sleep(%s)"


class MigrationBusy(DatabaseError):
    """A migration step could not take its locks in every attempt allowed."""


def locked_step(steps: Callable[[], Steps[T]], schemas: Sequence[str], what: str) -> Steps[T]:
    """``steps()`` in a transaction of its own, after every table and view of ``schemas`` is
    locked (module docstring); retried until the locks are had.  ``what`` names the step in
    ``MigrationBusy``'s message."""
    first, most = config.MIGRATE_RETRY_PAUSE_MS
    pause = first
    for _ in range(config.MIGRATE_LOCK_ATTEMPTS):
        try:
            result: T = yield InTransaction(_locked(steps(), schemas))
            return result
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            yield Query(PAUSE, (pause / 1000.0,))
            pause = min(pause * 2, most)
    raise MigrationBusy(
        f"awa migrate: {what} could not lock awa's tables in {config.MIGRATE_LOCK_ATTEMPTS} "
        f"tries (each waiting {config.MIGRATE_LOCK_TIMEOUT_MS} ms): a long transaction holds "
        f"them (see pg_stat_activity); run it again once that ends")


def _locked(steps: Steps[T], schemas: Sequence[str]) -> Steps[T]:
    yield Query(ADVISORY_LOCK, (config.ADVISORY_LOCK_MIGRATE,))
    yield Query(LOCK_TIMEOUT, (f"{config.MIGRATE_LOCK_TIMEOUT_MS}ms",))
    names = [r["name"] for r in (yield Query(RELATIONS, (list(schemas),)))]
    if names:
        yield Query(f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE")
    return (yield from steps)
