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

