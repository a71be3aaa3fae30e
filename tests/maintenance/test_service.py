"""MaintenanceService inside real runtimes started in this process."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

import awa
from awa import config

from .conftest import eventually

SHORT = {"poll_interval_ms": 50, "heartbeat_interval_ms": 100,
         "leader_election_interval_ms": 100, "snapshot_interval_ms": 100,
         "promote_interval_ms": 50}


@dataclass
class Ping:
    n: int = 0


def make_client(database_url: str) -> awa.AsyncClient:
    client = awa.AsyncClient(database_url)

    @client.task(Ping, queue="svc")
    async def ping(job):
        return None

    client.periodic("hourly_ping", "0 * * * *", Ping, Ping(1), queue="svc")
    client.queue_descriptor("svc", display_name="Service", owner="platform")
    client.job_kind_descriptor("ping", description="Pings")
    return client


@pytest.mark.connections(17)
async def test_runtime_start_stores_declarations_and_one_runtime_leads(database_url, db):
    first, second = make_client(database_url), make_client(database_url)
    try:
        await first.start([("svc", 2)], **SHORT)
        await second.start([("svc", 2)], **SHORT)

        def stored():
            cron = db.execute("SELECT * FROM awa.cron_jobs").fetchall()
            qd = db.execute("SELECT * FROM awa.queue_descriptors").fetchall()
            kd = db.execute("SELECT * FROM awa.job_kind_descriptors").fetchall()
            return cron and qd and kd and (cron, qd, kd)

        cron, qd, kd = await eventually(stored, message="declarations stored")
        assert cron[0]["name"] == "hourly_ping" and cron[0]["kind"] == "ping"
        assert qd[0]["owner"] == "platform" and kd[0]["description"] == "Pings"

        for _ in range(100):
            health = [await first.health_check(), await second.health_check()]
            if any(h.leader for h in health):
                break
            await asyncio.sleep(0.05)
        assert sorted(h.leader for h in health) == [False, True]
        hashed = """SELECT * FROM awa.runtime_instances
                     WHERE descriptor_hashes <> '{}' AND maintenance_alive"""
        rows = await eventually(
            lambda: (lambda r: len(r) == 2 and sum(x["leader"] for x in r) == 1 and r)(
                db.execute(hashed).fetchall()),
            message="both runtime rows with hashes")
        assert sorted(r["leader"] for r in rows) == [False, True]
        assert rows[0]["descriptor_hashes"] == {
            "queues": {"svc": qd[0]["descriptor_hash"]},
            "kinds": {"ping": kd[0]["descriptor_hash"]}}
    finally:
        await first.shutdown(1000)
        await second.shutdown(1000)
        await first.close()
        await second.close()
    # Both shut down: the leader lock is released, nobody holds it.
    holders = db.execute("""SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                            AND database = (SELECT oid FROM pg_database
                                            WHERE datname = current_database())
                            AND ((classid::bigint << 32) | objid::bigint) = %s""",
                         (config.ADVISORY_LOCK_LEADER,)).fetchall()
    assert holders == []


@pytest.mark.connections(16)
async def test_leader_whose_lock_connection_dies_steps_down_and_leadership_moves(
        database_url, db):
    first, second = make_client(database_url), make_client(database_url)
    try:
        await first.start([("svc", 1)], **SHORT)
        await second.start([("svc", 1)], **SHORT)
        services = [first.runtime.maintenance, second.runtime.maintenance]
        await eventually(lambda: sum(s.elector.is_leader for s in services) == 1,
                         message="one leader")
        leader = next(s for s in services if s.elector.is_leader)
        # The network drops the leader's lock connection (the process lives on).
        db.execute("SELECT pg_terminate_backend(%s)", (leader.elector.backend_pid,))
        await eventually(lambda: sum(s.elections for s in services) == 2,
                         message="a second election")
        await eventually(lambda: sum(s.health.leader for s in services) == 1,
                         message="exactly one leader again")
        assert sum(s.elector.is_leader for s in services) == 1
    finally:
        for c in (first, second):
            await c.shutdown(1000)
            await c.close()
