"""How `diagnose all` spends its wall time (issue 46, item 6): the enqueue check's WAL samples
are taken on a connection of their own while the other checks run, and still reach it."""

from __future__ import annotations

import asyncio
import time

from awa import config
from awa_ops.diagnose import enqueue, run_all
from awa_ops.session import OpsSession

OTHER_OPS_BACKENDS = """
SELECT count(*) AS n FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()"""


async def other_ops_backends(session: OpsSession, settle_to: int | None = None) -> int:
    """The other awa-ops backends of this database; with ``settle_to``, waits (10 s at most)
    for that count: a closed connection's backend leaves pg_stat_activity a moment later."""
    deadline = time.monotonic() + 10
    while True:
        row = await session.fetch_one(OTHER_OPS_BACKENDS, (config.APP_NAME_OPS,))
        assert row is not None
        if settle_to is None or row["n"] == settle_to or time.monotonic() > deadline:
            return int(row["n"])
        await asyncio.sleep(0.05)


async def test_wal_samples_run_beside_the_other_checks_and_reach_the_enqueue_check(database_url):
    async with await OpsSession.open(database_url) as session:
        stop = await enqueue.start_sampling(session)
        assert stop is not None
        # The sampler is a second awa-ops backend of this database while it samples.
        row = await session.fetch_one(OTHER_OPS_BACKENDS, (config.APP_NAME_OPS,))
        assert row is not None and row["n"] == 1
        hits, waiting = await enqueue.collect_wal_waits(session)
        assert (hits, waiting) == (0, [])  # an idle database: nobody queued on WAL
        assert enqueue.WAL_SAMPLER not in session.cache  # collected once
        await stop()
        assert await other_ops_backends(session, settle_to=0) == 0

        # run_all starts and stops the sampler itself; the check reports its samples.
        [result] = await run_all(session, names=["enqueue"])
        assert result.error is None
        assert any(f"in {config.OPS_WAL_SAMPLES} samples" in f.summary for f in result.findings)
        assert await other_ops_backends(session, settle_to=0) == 0


async def test_a_check_run_alone_samples_on_its_own_session(database_url):
    async with await OpsSession.open(database_url) as session:
        assert await enqueue.collect_wal_waits(session) == (0, [])
