"""Leader election on real connections: exactly one leader, failover, step-down."""

from __future__ import annotations

import psycopg

from awa import config
from awa.runtime.leader import LeaderElector


async def test_exactly_one_leader_and_handover_on_release(database_url, db):
    electors = [LeaderElector(database_url) for _ in range(3)]
    try:
        results = [await e.try_acquire() for e in electors]
        assert results.count(True) == 1
        leader = electors[results.index(True)]
        # The lock connection is visible to operators as awa-leader.
        holders = db.execute("""
            SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)
             WHERE l.locktype = 'advisory' AND l.granted
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND ((l.classid::bigint << 32) | l.objid::bigint) = %s""",
                             (config.ADVISORY_LOCK_LEADER,)).fetchall()
        assert [h["application_name"] for h in holders] == ["awa-leader"]
        # Asking again keeps it, without stacking lock counts.
        assert await leader.try_acquire() is True
        await leader.release()
        others = [e for e in electors if e is not leader]
        assert [await e.try_acquire() for e in others].count(True) == 1
    finally:
        for e in electors:
            await e.release()


async def test_leader_steps_down_when_its_connection_is_lost(database_url, db):
    first, second = LeaderElector(database_url), LeaderElector(database_url)
    try:
        assert await first.try_acquire()
        assert not await second.try_acquire()
        db.execute("SELECT pg_terminate_backend(%s)", (first.backend_pid,))
        assert await first.still_leader() is False
        assert first.is_leader is False
        assert await second.try_acquire()
    finally:
        await first.release()
        await second.release()


async def test_unreachable_database_is_not_leader(database_url):
    bad = psycopg.conninfo.make_conninfo(database_url, port=1)
    e = LeaderElector(bad)
    assert await e.try_acquire() is False


async def test_a_frozen_leader_is_fenced_off_by_the_server(database_url, db):
    """A leader that stops pinging (SIGSTOP, GC pause) loses its session, and so the lock."""
    import asyncio

    from awa.runtime.leader import fence_ms

    frozen = LeaderElector(database_url, ping_interval_ms=100)
    other = LeaderElector(database_url, ping_interval_ms=100)
    assert frozen.fence_ms == fence_ms(100) == config.LEADER_FENCE_MIN_MS
    try:
        assert await frozen.try_acquire()
        assert await frozen.confirmed()  # fresh: no round trip needed
        setting = db.execute("SELECT setting FROM pg_settings WHERE name = 'idle_session_timeout'"
                             ).fetchone()  # this session's own value is untouched
        assert setting["setting"] == "0"
        assert not await other.try_acquire()
        await asyncio.sleep(frozen.fence_ms / 1000 + 0.8)  # no ping: as if the process stopped
        assert await other.try_acquire()  # the server ended the frozen session
        # Woken, the former leader finds out before it would act.
        assert await frozen.confirmed() is False and frozen.is_leader is False
    finally:
        await frozen.release()
        await other.release()


def test_the_fence_is_three_pings_within_bounds():
    from awa.runtime.leader import fence_ms

    assert fence_ms(1_000) == 3_000
    assert fence_ms(50) == config.LEADER_FENCE_MIN_MS
    assert fence_ms(60_000) == config.LEADER_FENCE_MAX_MS == 30_000
