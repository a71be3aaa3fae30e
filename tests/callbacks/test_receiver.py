"""The HTTP callback receiver, served by uvicorn on a real socket."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import awa
from awa import callback_contract, callbacks
from awa.callback_server import CallbackApp
from awa.callback_server import serve_in_thread as serve
from awa.cli import main as awa_cli
from support.rows import job_row

SECRET = secrets.token_bytes(32)
AWA = str(Path(sys.executable).with_name("awa"))


@pytest.fixture
def receiver(database_url):
    app = CallbackApp(database_url=database_url, secret=SECRET, max_body_bytes=1024)
    with serve(app) as base:
        yield base + callback_contract.DEFAULT_PATH_PREFIX


@pytest.fixture
def waiting(db, pool, running_job):
    async def make() -> tuple[int, str]:
        job_id, lease = running_job()
        token = await callbacks.register_callback(pool, job_id, lease, 60)
        db.execute("UPDATE awa.jobs SET state = 'waiting_external' WHERE id = %s", (job_id,))
        return job_id, token.id
    return make


def signed(callback_id: str, secret: bytes = SECRET) -> dict[str, str]:
    return {callback_contract.SIGNATURE_HEADER: callback_contract.sign(secret, callback_id)}


async def test_signed_actions_resolve_the_job(db, receiver, waiting):
    job_id, cid = await waiting()
    async with httpx.AsyncClient() as http:
        beat = await http.post(f"{receiver}/{cid}/heartbeat", json={"timeout_seconds": 600},
                               headers=signed(cid))
        assert beat.status_code == 200
        assert beat.json() == {"id": cid, "job_id": job_id, "state": "waiting_external"}
        done = await http.post(f"{receiver}/{cid}/complete", json={"payload": {"ok": True}},
                               headers=signed(cid))
    assert done.status_code == 200 and done.json()["state"] == "completed"
    assert job_row(db, job_id)["metadata"][callbacks.RESULT_KEY] == {"ok": True}

    job_id, cid = await waiting()
    async with httpx.AsyncClient() as http:
        failed = await http.post(f"{receiver}/{cid}/fail", json={"error": "card declined"},
                                 headers=signed(cid))
    assert failed.json()["state"] == "failed"
    assert job_row(db, job_id)["errors"][0]["error"] == "card declined"

    job_id, cid = await waiting()
    async with httpx.AsyncClient() as http:
        resumed = await http.post(f"{receiver}/{cid}/resume", headers=signed(cid))  # empty body
    assert resumed.json()["state"] == "running"


async def test_resolve_lets_the_jobs_cel_rules_decide(db, pool, running_job, receiver):
    job_id, lease = running_job()
    token = await callbacks.register_callback(pool, job_id, lease, 60,
                                              filter='payload.event == "charge.updated"',
                                              on_complete='payload.status == "paid"')
    cid = token.id
    async with httpx.AsyncClient() as http:
        other = await http.post(f"{receiver}/{cid}/resolve", headers=signed(cid),
                                json={"payload": {"event": "ping"}})
        assert other.status_code == 200
        assert other.json()["outcome"] == "ignored" and other.json()["state"] == "running"
        bad = await http.post(f"{receiver}/{cid}/resolve", headers=signed(cid),
                              json={"payload": {}, "default_action": "explode"})
        assert bad.status_code == 400 and "default_action must be one of" in bad.json()["error"]
        paid = await http.post(f"{receiver}/{cid}/resolve", headers=signed(cid),
                               json={"payload": {"event": "charge.updated", "status": "paid"}})
    assert paid.json() == {"id": cid, "job_id": job_id, "state": "completed",
                           "outcome": "completed",
                           "reason": 'on_complete matched: payload.status == "paid"'}
    assert job_row(db, job_id)["state"] == "completed"


async def test_bad_or_missing_signature_is_refused_and_changes_nothing(db, receiver, waiting):
    job_id, cid = await waiting()
    before = job_row(db, job_id)
    other_id = str(uuid.uuid4())
    attempts = [
        {},                                              # unsigned
        signed(cid, secrets.token_bytes(32)),            # another secret
        signed(other_id),                                # another callback's signature
        {callback_contract.SIGNATURE_HEADER: "zz"},      # garbage
    ]
    async with httpx.AsyncClient() as http:
        for headers in attempts:
            r = await http.post(f"{receiver}/{cid}/complete", json={"payload": {}},
                                headers=headers)
            assert r.status_code == 401, headers
            assert callback_contract.SIGNATURE_HEADER in r.json()["error"]
    assert job_row(db, job_id) == before


async def test_replayed_callback_is_409_and_changes_nothing(db, receiver, waiting):
    job_id, cid = await waiting()
    async with httpx.AsyncClient() as http:
        first = await http.post(f"{receiver}/{cid}/complete", json={"payload": {"n": 1}},
                                headers=signed(cid))
        assert first.status_code == 200
        after_first = job_row(db, job_id)
        for action, body in [("complete", {"payload": {"n": 2}}), ("fail", {"error": "x"}),
                             ("resume", {}), ("heartbeat", {})]:
            replay = await http.post(f"{receiver}/{cid}/{action}", json=body,
                                     headers=signed(cid))
            assert replay.status_code == 409
            assert "already resolved" in replay.json()["error"]
    assert job_row(db, job_id) == after_first


async def test_oversized_body_is_413_and_changes_nothing(db, receiver, waiting):
    job_id, cid = await waiting()
    before = job_row(db, job_id)
    big = {"payload": {"blob": "x" * 2000}}

    async def chunks():  # no Content-Length: the limit holds while streaming too
        for _ in range(4):
            yield b" " * 600

    async with httpx.AsyncClient() as http:
        declared = await http.post(f"{receiver}/{cid}/complete", json=big, headers=signed(cid))
        streamed = await http.post(f"{receiver}/{cid}/complete", content=chunks(),
                                   headers=signed(cid))
    assert declared.status_code == 413 and "larger than 1024 bytes" in declared.json()["error"]
    assert streamed.status_code == 413
    assert job_row(db, job_id) == before


async def test_unknown_ids_routes_and_methods(db, receiver, waiting):
    job_id, cid = await waiting()
    before = job_row(db, job_id)
    unknown = str(uuid.uuid4())
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{receiver}/{unknown}/complete", json={}, headers=signed(unknown))
        assert r.status_code == 404 and "not found or already resolved" in r.json()["error"]
        r = await http.post(f"{receiver}/not-a-uuid/complete", json={})
        assert r.status_code == 400 and "malformed callback id" in r.json()["error"]
        r = await http.post(f"{receiver}/{cid}/explode", json={}, headers=signed(cid))
        assert r.status_code == 404
        r = await http.get(f"{receiver}/{cid}/complete", headers=signed(cid))
        assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert job_row(db, job_id) == before


@pytest.mark.parametrize("action, body, message", [
    ("complete", b"{not json", "not valid JSON"),
    ("complete", b"[1, 2]", "must be a JSON object"),
    ("complete", b'{"payload": [1]}', "payload must be a JSON object or null"),
    ("complete", b'{"payload": {}, "extra": 1}', "unexpected field 'extra'"),
    ("fail", b"{}", "non-empty string field 'error'"),
    ("fail", b'{"error": 42}', "non-empty string field 'error'"),
    ("heartbeat", b'{"timeout_seconds": -5}', "positive number"),
    ("heartbeat", b'{"timeout_seconds": true}', "positive number"),
])
async def test_invalid_bodies_are_400_and_change_nothing(db, receiver, waiting, action, body,
                                                         message):
    job_id, cid = await waiting()
    before = job_row(db, job_id)
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{receiver}/{cid}/{action}", content=body, headers=signed(cid))
    assert r.status_code == 400 and message in r.json()["error"]
    assert job_row(db, job_id) == before


async def test_allow_unsigned_still_refuses_a_wrong_signature(db, database_url, waiting):
    with pytest.raises(awa.ValidationError, match="needs a secret"):
        CallbackApp(database_url=database_url)
    app = CallbackApp(database_url=database_url, secret=SECRET, allow_unsigned=True)
    with serve(app) as base:
        url = base + callback_contract.DEFAULT_PATH_PREFIX
        job_id, cid = await waiting()
        async with httpx.AsyncClient() as http:
            wrong = await http.post(f"{url}/{cid}/complete",
                                    headers=signed(cid, secrets.token_bytes(32)))
            assert wrong.status_code == 401
            unsigned = await http.post(f"{url}/{cid}/complete")
            assert unsigned.status_code == 200
    assert job_row(db, job_id)["state"] == "completed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_command_runs_as_a_process(db, database_url, waiting, tmp_path):
    job_id, cid = await waiting()
    port = _free_port()
    env = {**os.environ, "CB_SECRET": SECRET.hex()}
    cmd = [AWA, "callbacks", "serve", "--listen", f"127.0.0.1:{port}",
           "--secret-env", "CB_SECRET", "--database-url", database_url]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/api/callbacks/{cid}/complete"
        deadline = time.monotonic() + 20
        async with httpx.AsyncClient() as http:
            while True:
                try:
                    r = await http.post(url, json={"payload": {"via": "cli"}},
                                        headers=signed(cid))
                    break
                except httpx.ConnectError:
                    assert proc.poll() is None and time.monotonic() < deadline, \
                        proc.stderr.read().decode() if proc.poll() is not None else "timeout"
                    time.sleep(0.1)
        assert r.status_code == 200 and r.json()["state"] == "completed"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert f"listening on http://127.0.0.1:{port}/api/callbacks (signatures required)" \
        in err.decode()

    # Misconfiguration: one line, exit 1, before binding anything.
    bad = subprocess.run([AWA, "callbacks", "serve", "--database-url", database_url],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "error: the callback receiver needs a secret (--secret-file or --secret-env); "
        "pass --allow-unsigned only for development"]
    secret_file = tmp_path / "short.key"
    secret_file.write_text("abcd\n")
    bad = subprocess.run([AWA, "callbacks", "serve", "--secret-file", str(secret_file),
                          "--database-url", database_url], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 1 and "must be 32 raw bytes or 64 hex characters" in bad.stderr


def test_resolution_commands(db, database_url, running_job):
    job_id, lease = running_job()
    token = asyncio.run(_register(database_url, job_id, lease))
    runner = CliRunner()
    result = runner.invoke(awa_cli, ["--database-url", database_url, "callbacks", "heartbeat",
                                     token, "--timeout-seconds", "120", "--json"])
    assert result.exit_code == 0, result.output
    assert '"state": "running"' in result.output
    result = runner.invoke(awa_cli, ["callbacks", "complete", token, "--payload", '{"a": 1}',
                                     "--database-url", database_url])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"callback {token}: job {job_id} is completed"
    result = runner.invoke(awa_cli, ["callbacks", "fail", token, "--error", "late",
                                     "--database-url", database_url])
    assert result.exit_code == 1
    assert result.output.strip() == (f"error: callback {token} not found or already resolved: "
                                     f"job {job_id} is completed")
    result = runner.invoke(awa_cli, ["callbacks", "complete", token, "--payload", "[1]",
                                     "--database-url", database_url])
    assert result.exit_code == 2 and "must be a JSON object" in result.output
    assert job_row(db, job_id)["metadata"][callbacks.RESULT_KEY] == {"a": 1}

    job_id, lease = running_job()
    token = asyncio.run(_register(database_url, job_id, lease, filter="payload.go"))
    result = runner.invoke(awa_cli, ["callbacks", "resolve", token, "--payload", '{"go": false}',
                                     "--default-action", "complete",
                                     "--database-url", database_url])
    assert result.exit_code == 0
    assert result.output.strip() == (f"callback {token}: job {job_id} is running (ignored: "
                                     f"filter did not match the payload)")
    result = runner.invoke(awa_cli, ["callbacks", "retry", token, "--json",
                                     "--database-url", database_url])
    assert result.exit_code == 0 and '"state": "available"' in result.output


async def _register(database_url: str, job_id: int, lease: int, **cel: Any) -> str:
    async with awa.AsyncClient(database_url) as c:
        return (await callbacks.register_callback(await c._get_pool(), job_id, lease, 60,
                                                  **cel)).id


async def test_unmigrated_database_is_503_and_serve_refuses_to_start(empty_database_url):
    with serve(CallbackApp(database_url=empty_database_url, secret=SECRET)) as base:
        cid = str(uuid.uuid4())
        async with httpx.AsyncClient() as http:
            r = await http.post(f"{base}/api/callbacks/{cid}/complete", headers=signed(cid))
    assert r.status_code == 503 and "awa migrate" in r.json()["error"]

    bad = subprocess.run([AWA, "callbacks", "serve", "--allow-unsigned", "--listen",
                          f"127.0.0.1:{_free_port()}", "--database-url", empty_database_url],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1
    [line] = bad.stderr.strip().splitlines()
    assert line.startswith("error: ") and "awa migrate" in line
