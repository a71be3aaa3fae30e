"""Safe by default: loopback unless told, bearer auth, read-only forced or detected
(``transaction_read_only``, as on a hot standby: a real streaming replica here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from awa import config, storage
from support.arrange import insert_job
from support.pgcluster import PrivateCluster, free_port
from support.rows import job_row

from .conftest import AWA, awa_serve

READ_ONLY = {"error": "awa serve is connected to a read-only database; admin actions are "
                      "disabled"}
# Every write-gated route of the reference (batch-ops aside), with a body each accepts.
WRITES = [("POST", "/api/jobs/{id}/retry", None), ("POST", "/api/jobs/{id}/cancel", None),
          ("POST", "/api/jobs/bulk-retry", {"ids": [1]}),
          ("POST", "/api/jobs/bulk-cancel", {"ids": [1]}),
          ("POST", "/api/queues/q/pause", {}), ("POST", "/api/queues/q/resume", None),
          ("POST", "/api/queues/q/drain", None), ("POST", "/api/cron/c/trigger", None),
          ("POST", "/api/cron/c/pause", None), ("POST", "/api/cron/c/resume", None),
          ("POST", "/api/dlq/{id}/retry", None), ("DELETE", "/api/dlq/{id}", None),
          ("POST", "/api/dlq/bulk-retry", {"all": True}),
          ("POST", "/api/dlq/bulk-purge", {"all": True}),
          ("POST", "/api/dlq/bulk-move", {"all": True}),
          ("POST", f"/api/callbacks/{uuid.uuid4()}/complete", {}),
          ("POST", f"/api/callbacks/{uuid.uuid4()}/fail", {"error": "x"}),
          ("POST", f"/api/callbacks/{uuid.uuid4()}/heartbeat", {}),
          ("POST", "/api/batch-ops/preview", {"op_kind": "set_priority",
                                              "filter": {"queue": "q"},
                                              "spec": {"priority": 1}}),
          ("POST", "/api/batch-ops", {"op_kind": "set_priority", "filter": {"queue": "q"},
                                      "spec": {"priority": 1}}),
          ("PATCH", f"/api/batch-ops/{uuid.uuid4()}", {"state": "cancelling"})]


def refused_writes(http: httpx.Client, job_id: int) -> None:
    for method, path, body in WRITES:
        r = http.request(method, path.format(id=job_id), json=body)
        assert r.status_code == 503, (method, path, r.status_code, r.text)
        assert r.json() == READ_ONLY, path


def test_a_non_loopback_bind_without_a_token_refuses_to_start_in_one_line(database_url):
    for host in ("0.0.0.0", "192.0.2.10"):
        done = subprocess.run([str(AWA), "--database-url", database_url, "serve", "--host",
                               host, "--port", str(free_port())],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert f"refusing to serve on {host}" in lines[0]
        assert "--token-file" in lines[0] and "--read-only" in lines[0]


def test_with_a_token_every_request_needs_it(db, database_url, tmp_path):
    job = insert_job(db, "available", kind="k", queue="q")
    token = "s3cret-" + uuid.uuid4().hex
    path = tmp_path / "token"
    path.write_text(token + "\n")
    with awa_serve(database_url, "--token-file", str(path), host="0.0.0.0",
                   console=True) as served:
        with served.client() as anonymous:
            for route in ("/api/jobs", "/api/capabilities", "/api/openapi.json"):
                r = anonymous.get(route)
                assert r.status_code == 401 and set(r.json()) == {"error"}, route
            assert anonymous.post(f"/api/jobs/{job}/cancel").status_code == 401
            assert anonymous.get("/").status_code == 401  # the console too
        assert job_row(db, job)["state"] == "available"
        with served.client("wrong-token-000000") as wrong:
            assert wrong.get("/api/jobs").status_code == 401
        with served.client(token) as http:
            assert http.get("/api/capabilities").json()["auth"] is True
            assert [j["id"] for j in http.get("/api/jobs").json()] == [job]
            assert http.post(f"/api/jobs/{job}/cancel").json()["state"] == "cancelled"
        # A browser gives the token once; the cookie then carries it.
        with httpx.Client(base_url=served.base, timeout=30) as browser:
            page = browser.get("/", params={"token": token})
            assert page.status_code == 200 and "awa-tui" in page.text
            assert browser.get("/").status_code == 200


def test_a_token_file_that_is_too_short_is_refused_in_one_line(database_url, tmp_path):
    path = tmp_path / "token"
    path.write_text("short")
    done = subprocess.run([str(AWA), "--database-url", database_url, "serve", "--token-file",
                           str(path), "--port", str(free_port())],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert "at least 16" in done.stderr


def test_read_only_forced_refuses_every_write_with_503(db, database_url):
    job = insert_job(db, "available", kind="k", queue="q")
    with awa_serve(database_url, "--read-only", host="0.0.0.0") as served, \
            served.client() as http:
        assert http.get("/api/capabilities").json()["read_only"] is True
        refused_writes(http, job)
        assert [j["id"] for j in http.get("/api/jobs").json()] == [job]
    assert job_row(db, job)["state"] == "available"


def test_read_only_is_detected_from_transaction_read_only(db, database_url):
    job = insert_job(db, "available", kind="k", queue="q")
    name = db.execute("SELECT current_database() AS d").fetchone()["d"]
    db.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    with awa_serve(database_url) as served, served.client() as http:
        assert http.get("/api/capabilities").json()["read_only"] is True
        refused_writes(http, job)
        assert http.get(f"/api/jobs/{job}").json()["state"] == "available"


@pytest.mark.slow
def test_against_a_hot_standby_capabilities_say_read_only_and_writes_are_refused():
    with PrivateCluster("-c", "wal_level=replica") as primary:
        with psycopg.connect(primary.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE app")
        with psycopg.connect(primary.url("app"), autocommit=True, row_factory=dict_row) as app:
            storage.migrate_sync(app, os.environ.get("AWA_TEST_ENGINE")
                                 or config.DEFAULT_STORAGE_ENGINE, None)
            job = insert_job(app, "available", kind="k", queue="q")
        replica = _Replica(primary)
        try:
            with awa_serve(replica.url("app")) as served, served.client() as http:
                caps = http.get("/api/capabilities").json()
                assert caps["read_only"] is True
                assert http.get(f"/api/jobs/{job}").json()["state"] == "available"
                refused_writes(http, job)
        finally:
            replica.close()


class _Replica:
    """A streaming replica of ``primary`` (pg_basebackup -R), started in hot standby."""

    def __init__(self, primary: PrivateCluster) -> None:
        self.bin = primary.bin
        self.base = Path(tempfile.mkdtemp(prefix="awa-pg-replica-"))
        self.data = self.base / "data"
        self.port = free_port()
        self.as_postgres = primary._as_postgres
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U",
                  "postgres", "-D", str(self.data), "-R", "-X", "stream", "-c", "fast")
        # A standby needs the primary's settings at least (max_connections among them).
        options = " ".join([f"-p {self.port}", "-c listen_addresses=127.0.0.1",
                            f"-k {self.base}", "-c hot_standby=on", *primary.settings])
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.base / "log"), "-o",
                  options, "start")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_postgres, str(self.bin / tool), *args], check=True,
                       capture_output=True, timeout=120)

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def close(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.base, ignore_errors=True)



# --- no web page can drive it (issue 50) ----------------------------------------------------

EVIL = "https://evil.example"


def _dlq_depth(database_url: str) -> int:
    import awa
    with awa.Client(database_url) as client:
        return int(client.dlq_depth())


def _arrange_targets(db, database_url: str) -> int:
    """An available job, and two failed ones moved to the DLQ."""
    import awa
    job = insert_job(db, "available", kind="k", queue="q")
    for _ in range(2):
        insert_job(db, "failed", kind="poison", queue="q")
    with awa.Client(database_url) as client:
        client.bulk_move_failed_to_dlq(kind="poison")
    return job


def _unchanged(db, database_url: str, job: int) -> None:
    row = job_row(db, job)
    assert row is not None and row["state"] == "available"
    assert _dlq_depth(database_url) == 2
    assert db.execute("SELECT count(*) AS n FROM awa.queue_meta WHERE paused").fetchone()[
        "n"] == 0


def test_without_cors_origin_no_page_is_answered_cors(served):
    with served.client() as http:
        preflight = http.options("/api/dlq/bulk-purge", headers={
            "Origin": EVIL, "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in preflight.headers
        r = http.get("/api/jobs", headers={"Origin": EVIL})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_cors_answers_only_the_origins_named(database_url):
    ops = "https://ops.example.com"
    with awa_serve(database_url, "--cors-origin", ops) as served, served.client() as http:
        ok = http.options("/api/jobs/1/cancel", headers={
            "Origin": ops, "Access-Control-Request-Method": "POST"})
        assert ok.headers.get("access-control-allow-origin") == ops
        assert http.get("/api/jobs", headers={"Origin": ops}).headers[
            "access-control-allow-origin"] == ops
        other = http.options("/api/jobs/1/cancel", headers={
            "Origin": EVIL, "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in other.headers
        assert http.post("/api/jobs/1/cancel", headers={"Origin": EVIL}).status_code == 403


def test_a_rebinding_host_is_refused_and_nothing_changes(db, database_url):
    job = _arrange_targets(db, database_url)
    with awa_serve(database_url, "--public-url", "https://awa.internal:8443") as served, \
            served.client() as http:
        port = served.base.rsplit(":", 1)[1]
        for host in (f"evil.example:{port}", "rebind.attacker.test", f"127.0.0.1.nip.io:{port}"):
            headers = {"Host": host}
            for method, path, body in (("POST", "/api/dlq/bulk-purge", {"all": True}),
                                       ("POST", f"/api/jobs/{job}/cancel", None),
                                       ("POST", "/api/queues/q/pause", {}),
                                       ("GET", "/api/jobs", None)):
                r = http.request(method, path, json=body, headers=headers)
                assert r.status_code == 403 and "Host" in r.json()["error"], (host, path)
        _unchanged(db, database_url, job)
        # The names the server answers to: its address, localhost, the public URL's host.
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "awa.internal:8443"):
            assert http.get("/api/capabilities", headers={"Host": host}).status_code == 200


def test_a_cross_site_request_is_refused_and_nothing_changes(db, database_url):
    job = _arrange_targets(db, database_url)
    with awa_serve(database_url, console=True) as served, served.client() as http:
        for origin in (EVIL, "null", "http://localhost:1"):
            headers = {"Origin": origin}
            r = http.post("/api/dlq/bulk-purge", json={"all": True}, headers=headers)
            assert r.status_code == 403 and "cross-site" in r.json()["error"], origin
            # A form post needs no preflight: the Origin check is what refuses it.
            r = http.post(f"/api/jobs/{job}/cancel", content="x=1", headers={
                **headers, "Content-Type": "application/x-www-form-urlencoded"})
            assert r.status_code == 403, origin
            assert http.delete("/api/dlq/1", headers=headers).status_code == 403
        _unchanged(db, database_url, job)
        # A cross-site websocket would drive a console: refused before the handshake.
        host = served.base.split("//", 1)[1]
        assert _websocket_status(host, EVIL) == 403
        # This server's own pages may.
        r = http.post(f"/api/jobs/{job}/cancel", headers={"Origin": served.base})
        assert r.status_code == 200 and job_row(db, job)["state"] == "cancelled"


def _websocket_status(host: str, origin: str) -> int:
    import socket
    name, port = host.split(":")
    with socket.create_connection((name, int(port)), timeout=10) as sock:
        sock.sendall((f"GET /ws?width=80&height=24 HTTP/1.1\r\nHost: {host}\r\n"
                      "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      f"Sec-WebSocket-Version: 13\r\nOrigin: {origin}\r\n\r\n").encode())
        return int(sock.recv(4096).split(b" ", 2)[1])


def test_a_request_body_past_the_cap_is_413_and_changes_nothing(db, database_url, served):
    job = _arrange_targets(db, database_url)
    big = {"ids": [job] * (config.SERVE_MAX_BODY_BYTES // 2)}
    with served.client() as http:
        r = http.post("/api/jobs/bulk-cancel", json=big)
        assert r.status_code == 413 and set(r.json()) == {"error"}

        def chunks():  # no Content-Length: counted as it streams
            yield b'{"ids": ['
            for _ in range(config.SERVE_MAX_BODY_BYTES // 2):
                yield f"{job}, ".encode()
            yield f"{job}]}}".encode()
        r = http.post("/api/jobs/bulk-cancel", content=chunks(),
                      headers={"Content-Type": "application/json"})
        assert r.status_code == 413
    _unchanged(db, database_url, job)
