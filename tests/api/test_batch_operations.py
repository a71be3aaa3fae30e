"""Batch operations through /api/batch-ops (a real awa serve) and `awa batch` (the CLI), on
both engines."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

import awa
from awa.batch_operations import run_batch_operations
from support.arrange import insert_job
from support.rows import job_row

from .conftest import AWA, Served
from .test_routes import ENGINES


def column(db, job_id: int, name: str) -> object:
    row = job_row(db, job_id)
    assert row is not None
    return row[name]

BATCH_OPERATION = {"id", "op_kind", "filter", "spec", "state", "submitted_by", "submitted_at",
                   "started_at", "finalized_at", "cursor", "total_matched", "processed",
                   "skipped", "errored", "last_error", "runner_instance", "retention_until",
                   "updated_at"}


async def run_until_idle(database_url: str) -> None:
    client = awa.AsyncClient(database_url)
    try:
        pool, engine = await client._get_pool(), await client._get_engine()
        for _ in range(1_000):
            if (await run_batch_operations(pool, engine, runner=uuid.uuid4()))["steps"] == 0:
                return
        raise AssertionError("the runner never went idle")
    finally:
        await client.close()


@pytest.mark.parametrize("engine", ENGINES)
async def test_batch_ops_routes_preview_submit_follow_cancel(db, database_url, engine,
                                                             served: Served):
    jobs = [insert_job(db, "available", kind="k", queue="backlog", priority=3)
            for _ in range(25)]
    insert_job(db, "running", kind="k", queue="backlog")
    envelope = {"op_kind": "set_priority", "filter": {"queue": "backlog"},
                "spec": {"priority": 1}}
    with served.client() as http:
        preview = http.post("/api/batch-ops/preview", json=envelope).json()
        assert preview["total_matched"] == 25
        assert [j["id"] for j in preview["sample"]] == sorted(jobs)[:10]
        r = http.post("/api/batch-ops", json={**envelope, "filter": {}})
        assert r.status_code == 400 and r.json()["error"].startswith("validation error: ")
        r = http.post("/api/batch-ops", json={**envelope, "op_kind": "delete_all"})
        assert r.status_code == 422
        r = http.post("/api/batch-ops", json={**envelope, "spec": {"priority": 7}})
        assert r.status_code == 400 and "priority" in r.json()["error"]
        op = http.post("/api/batch-ops", json={**envelope, "submitted_by": "api-test"}).json()
        assert set(op) >= BATCH_OPERATION and op["state"] == "pending"
        assert op["submitted_by"] == "api-test"
        assert [o["id"] for o in http.get("/api/batch-ops").json()] == [op["id"]]
        assert http.get("/api/batch-ops", params={"state": "completed"}).json() == []

        await run_until_idle(database_url)
        done = http.get(f"/api/batch-ops/{op['id']}").json()
        assert done["state"] == "completed" and done["processed"] == 25
        assert all(column(db, j, "priority") == 1 for j in jobs)

        r = http.patch(f"/api/batch-ops/{op['id']}", json={"state": "cancelling"})
        assert r.status_code == 400
        assert r.json() == {"error": f"validation error: batch operation cannot be "
                                     f"cancelled: {op['id']}"}
        r = http.patch(f"/api/batch-ops/{op['id']}", json={"state": "running"})
        assert r.status_code == 400 and "only state=cancelling" in r.json()["error"]
        missing = uuid.uuid4()
        r = http.get(f"/api/batch-ops/{missing}")
        assert r.status_code == 400
        assert r.json() == {"error": f"validation error: batch operation not found: {missing}"}
        assert http.get("/api/batch-ops/not-a-uuid").status_code == 400

        second = http.post("/api/batch-ops", json={
            "op_kind": "move_queue", "filter": {"queue": "backlog"},
            "spec": {"queue": "elsewhere"}}).json()
        r = http.patch(f"/api/batch-ops/{second['id']}", json={"state": "cancelling"})
        assert r.status_code == 200 and r.json()["state"] == "cancelling"
        await run_until_idle(database_url)
        assert http.get(f"/api/batch-ops/{second['id']}").json()["state"] == "cancelled"
        assert all(column(db, j, "queue") == "backlog" for j in jobs)


def awa_cli(database_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AWA), "--database-url", database_url, *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("engine", ENGINES)
async def test_awa_batch_preview_start_status_cancel(db, database_url, engine):
    jobs = [insert_job(db, "available", kind="mail", queue="slow") for _ in range(12)]
    out = awa_cli(database_url, "batch", "preview", "--queue", "slow", "--move-queue", "fast")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("move to queue fast: 12 job(s) match now")
    out = awa_cli(database_url, "batch", "start", "--queue", "slow", "--move-queue", "fast",
                  stdin="n\n")
    assert out.returncode != 0 and "not submitted" in out.stderr
    out = awa_cli(database_url, "batch", "list")
    assert out.returncode != 0  # no such command: one line, no traceback
    assert len(out.stderr.strip().splitlines()) <= 3 and "Traceback" not in out.stderr
    out = awa_cli(database_url, "batch", "start", "--set-priority", "1")
    assert out.returncode != 0 and "without a filter" in out.stderr
    out = awa_cli(database_url, "batch", "start", "--queue", "slow", "--move-queue", "fast",
                  "--yes", "--json")
    assert out.returncode == 0, out.stderr
    op = json.loads(out.stdout)
    status = awa_cli(database_url, "batch", "status", op["id"])
    assert f"batch operation {op['id']}: pending" in status.stdout
    await run_until_idle(database_url)
    status = awa_cli(database_url, "batch", "status", op["id"])
    assert "completed" in status.stdout and "12 changed" in status.stdout
    assert all(column(db, j, "queue") == "fast" for j in jobs)
    out = awa_cli(database_url, "batch", "cancel", op["id"])
    assert out.returncode != 0 and "cannot be cancelled" in out.stderr
