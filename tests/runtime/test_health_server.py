"""A worker's /healthz and /readyz (health_addr / AWA_HEALTH_ADDR), over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass

import httpx
import psycopg
import pytest

import awa
from awa import config, storage
from support.pgcluster import PrivateCluster, free_port

AWA = os.path.join(os.path.dirname(sys.executable), "awa")

FAST = {"poll_interval_ms": 100, "heartbeat_interval_ms": 200, "snapshot_interval_ms": 200,
        "run_maintenance": False}
READY_FIELDS = {"ready", "postgres_connected", "schema_version", "expected_schema_version",
                "schema_compatible", "poll_loop_alive", "heartbeat_alive", "maintenance_alive",
                "shutting_down", "leader"}


@dataclass
class Noop:
    n: int = 0


def base_of(client: awa.AsyncClient) -> str:
    addr = client.health_listener_addr()
    assert addr is not None
    return f"http://{addr[0]}:{addr[1]}"


async def test_healthz_and_readyz_answer_on_the_configured_address(client):
    @client.task(Noop)
    async def noop(job):
        return None

    assert client.health_listener_addr() is None
    await client.start([("default", 2)], health_addr="127.0.0.1:0", **FAST)
    base = base_of(client)
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            r = await http.get("/healthz")
            assert r.status_code == 200 and r.json() == {"status": "ok"}
            r = await http.get("/readyz?verbose=1")
            assert r.status_code == 200, r.text
            report = r.json()
            assert set(report) == READY_FIELDS
            assert report["ready"] is True and report["postgres_connected"] is True
            assert report["schema_compatible"] is True
            assert report["schema_version"] == report["expected_schema_version"]
            r = await http.get("/metrics")
            assert r.status_code == 404 and r.json() == {"error": "not found"}
            r = await http.post("/readyz")
            assert r.status_code == 405 and r.json() == {"error": "method not allowed"}
            r = await http.get("/" + "x" * 5000)
            assert r.status_code == 431
    finally:
        await client.shutdown()
    assert client.health_listener_addr() is None
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/healthz", timeout=2)


async def test_awa_health_addr_from_the_environment(client, monkeypatch):
    @client.task(Noop)
    async def noop(job):
        return None

    monkeypatch.setenv(config.HEALTH_ADDR_ENV, "not-an-address")
    with pytest.raises(awa.ValidationError, match="invalid AWA_HEALTH_ADDR"):
        await client.start([("default", 1)], **FAST)
    monkeypatch.setenv(config.HEALTH_ADDR_ENV, "127.0.0.1:0")
    await client.start([("default", 1)], **FAST)
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.get(f"{base_of(client)}/readyz")
        assert r.status_code == 200 and r.json()["ready"] is True
    finally:
        await client.shutdown()


@pytest.mark.slow
async def test_readyz_turns_unready_within_one_heartbeat_interval_and_back(monkeypatch):
    heartbeat_s = 3.0
    with PrivateCluster() as cluster:
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            storage.migrate_sync(conn, os.environ.get("AWA_TEST_ENGINE")
                                 or config.DEFAULT_STORAGE_ENGINE, None)
        client = awa.AsyncClient(cluster.url())

        @client.task(Noop)
        async def noop(job):
            return None

        await client.start([("default", 2)], health_addr="127.0.0.1:0",
                           poll_interval_ms=100, heartbeat_interval_ms=int(heartbeat_s * 1000),
                           snapshot_interval_ms=500)
        try:
            async with httpx.AsyncClient(base_url=base_of(client), timeout=30) as http:
                assert (await http.get("/readyz")).status_code == 200
                await asyncio.to_thread(cluster.stop, "immediate")
                gone_at = time.monotonic()
                r = await http.get("/readyz")
                took = time.monotonic() - gone_at
                assert r.status_code == 503, r.text
                assert r.json()["ready"] is False and r.json()["postgres_connected"] is False
                assert took < heartbeat_s, f"unready only after {took:.1f}s"
                assert (await http.get("/healthz")).status_code == 200  # the process lives
                await asyncio.to_thread(cluster.start)
                deadline = time.monotonic() + 60
                while True:
                    r = await http.get("/readyz")
                    if r.status_code == 200:
                        break
                    assert time.monotonic() < deadline, f"never ready again: {r.text}"
                    await asyncio.sleep(0.2)
                assert r.json()["postgres_connected"] is True
        finally:
            await client.shutdown(2000)
            await client.close()


async def awa_health(url: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(AWA), "--database-url", url, "health", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode() + err.decode()


async def test_awa_health_exit_codes_from_the_database_alone(client, database_url, db,
                                                             empty_database_url):
    code, out = await awa_health(f"postgresql://postgres@127.0.0.1:{free_port()}/x", "--json",
                                 "--connect-timeout", "2")
    assert code == 2 and json.loads(out)["postgres_connected"] is False
    code, out = await awa_health(empty_database_url, "--json")
    assert code == 2 and json.loads(out)["schema_compatible"] is False

    await client.insert(Noop(1), queue="orphan")
    code, out = await awa_health(database_url, "--json")
    report = json.loads(out)
    assert code == 1 and report["status"] == "degraded", out
    assert report["live_runtimes"] == 0 and report["queues_without_runtime"] == ["orphan"]

    @client.task(Noop, queue="orphan")
    async def noop(job):
        return None

    await client.start([("orphan", 2)], poll_interval_ms=100, heartbeat_interval_ms=200,
                       snapshot_interval_ms=200, leader_election_interval_ms=200)
    try:
        deadline = time.monotonic() + 60
        while True:
            code, out = await awa_health(database_url)
            if code == 0:
                break
            assert time.monotonic() < deadline, out
            await asyncio.sleep(0.3)
        assert "status           ready" in out and "leader           yes" in out
    finally:
        await client.shutdown()
