"""Issue 50's "What was seen", each a test: input that answered 500, undeclared methods,
an unmigrated database, a move_queue past 59 bytes, a wrong-state cancel's message, 21 MB
job lists, a console page that loads a CDN font, and a busy port announced as served."""

from __future__ import annotations

import re
import socket
import subprocess

import httpx

from support.arrange import insert_job
from support.pgcluster import free_port
from support.rows import job_row

from .conftest import AWA, awa_serve
from .test_batch_operations import awa_cli

NUL = "a\x00b"
PAST_INT64 = 41018824319302942720  # the id the fuzzer sent


def test_text_postgresql_cannot_store_is_400_not_500(db, served):
    """NUL bytes in kind/tag/queue filters and in the bulk bodies answered 500."""
    insert_job(db, "failed", kind="k", queue="q")
    with served.client() as http:
        for path in ("/api/jobs", "/api/dlq"):
            for name in ("kind", "tag", "queue"):
                r = http.get(path, params={name: NUL})
                assert r.status_code == 400 and set(r.json()) == {"error"}, (path, r.text)
        for path in ("/api/dlq/bulk-retry", "/api/dlq/bulk-purge", "/api/dlq/bulk-move",
                     "/api/jobs/bulk-retry/preview", "/api/jobs/bulk-cancel/preview"):
            for name in ("kind", "queue"):
                r = http.post(path, json={name: NUL})
                assert r.status_code == 400 and set(r.json()) == {"error"}, (path, r.text)
        r = http.post("/api/callbacks/00000000-0000-0000-0000-000000000000/complete",
                      json={"payload": {"k": NUL}})
        assert r.status_code == 400, r.text
    assert job_row(db, 1)["state"] == "failed"


def test_ids_past_int64_are_404_in_a_path_and_400_in_a_body(served):
    with served.client() as http:
        for method, path in (("POST", "retry"), ("POST", "cancel"), ("GET", "")):
            r = http.request(method, f"/api/jobs/{PAST_INT64}/{path}".rstrip("/"))
            assert r.status_code == 404, r.text
            assert r.json() == {"error": f"job not found: {PAST_INT64}"}
        for path in ("/api/dlq/", "/api/dlq/"):
            assert http.get(f"{path}{PAST_INT64}").status_code == 404
        for path in ("/api/jobs/bulk-retry", "/api/jobs/bulk-cancel"):
            r = http.post(path, json={"ids": [1, PAST_INT64]})
            assert r.status_code == 400 and "ids" in r.json()["error"], r.text
        assert http.get("/api/jobs", params={"before_id": PAST_INT64}).status_code == 400


def test_timeseries_minutes_are_bounded_as_the_document_says(served):
    with served.client() as http:
        doc = http.get("/api/openapi.json").json()
        minutes = doc["paths"]["/api/stats/timeseries"]["get"]["parameters"][0]["schema"]
        assert minutes["minimum"] == 1 and minutes["maximum"] == 7 * 24 * 60
        for value in (10**19, 0, -5, minutes["maximum"] + 1):
            r = http.get("/api/stats/timeseries", params={"minutes": value})
            assert r.status_code == 400 and "minutes" in r.json()["error"], r.text
        assert http.get("/api/stats/timeseries",
                        params={"minutes": minutes["maximum"]}).status_code == 200


def test_an_undeclared_method_is_405_with_allow(served):
    with served.client() as http:
        for method, path, allow in (("PUT", "/api/capabilities", "GET"),
                                    ("DELETE", "/api/dlq/depth", "GET"),
                                    ("GET", "/api/jobs/bulk-retry", "POST"),
                                    ("TRACE", "/api/storage", "GET"),
                                    ("POST", "/api/dlq/5", "DELETE, GET"),
                                    ("PATCH", "/api/jobs/5/cancel", "POST")):
            r = http.request(method, path)
            assert r.status_code == 405, (method, path, r.status_code, r.text)
            assert r.headers["allow"] == allow, (method, path)
            assert set(r.json()) == {"error"}
        assert http.put("/api/no-such-route").status_code == 404


def test_an_unmigrated_database_is_refused_at_start_in_one_line(empty_database_url):
    done = subprocess.run([str(AWA), "--database-url", empty_database_url, "serve",
                           "--no-console", "--port", str(free_port())],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "awa migrate" in lines[0], done.stderr
    assert "serving" not in done.stderr and "engine" not in done.stderr


def test_a_busy_port_is_one_line_before_any_serving_line(database_url):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        done = subprocess.run([str(AWA), "--database-url", database_url, "serve",
                               "--no-console", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: port {port} on 127.0.0.1 is in use; choose another with "
                     "--port (or stop what holds it)"], done.stderr


def test_a_move_queue_target_past_59_bytes_is_refused_everywhere(db, database_url, served):
    job = insert_job(db, "available", kind="k", queue="tmpq")
    long_name = "q" * 100
    envelope = {"op_kind": "move_queue", "filter": {"queue": "tmpq"},
                "spec": {"queue": long_name}}
    with served.client() as http:
        for path in ("/api/batch-ops/preview", "/api/batch-ops"):
            r = http.post(path, json=envelope)
            assert r.status_code == 400 and "59" in r.json()["error"], r.text
        assert http.get("/api/batch-ops").json() == []
        r = http.post("/api/dlq/bulk-move", json={"queue": long_name})
        assert r.status_code == 400 and "59" in r.json()["error"]
        r = http.get("/api/jobs", params={"queue": long_name})
        assert r.status_code == 400 and "59" in r.json()["error"]
    assert job_row(db, job)["queue"] == "tmpq"
    out = awa_cli(database_url, "batch", "start", "--queue", "tmpq", "--move-queue", long_name,
                  stdin="y\n")
    assert out.returncode != 0 and "59" in out.stderr and "submit" not in out.stdout
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert job_row(db, job)["queue"] == "tmpq"


def test_a_wrong_state_cancel_keeps_404_with_the_cli_s_message(db, database_url, served):
    done = insert_job(db, "completed", kind="k", queue="q")
    cli = awa_cli(database_url, "job", "cancel", str(done))
    assert cli.returncode != 0
    message = f"job {done} is completed; only unfinished jobs can be cancelled"
    assert message in cli.stderr
    with served.client() as http:
        r = http.post(f"/api/jobs/{done}/cancel")
        assert r.status_code == 404 and r.json() == {"error": message}
        assert http.get(f"/api/jobs/{done}").json()["state"] == "completed"
        r = http.post(f"/api/jobs/{done}/retry")
        assert r.status_code == 404 and r.json() == {
            "error": f"job {done} is completed; only failed, cancelled or waiting_external "
                     "jobs can be retried"}
        doc = http.get("/api/openapi.json").json()["paths"]["/api/jobs/{job_id}/cancel"]
        assert "is completed; only unfinished jobs can be cancelled" in \
            doc["post"]["description"]


def test_large_args_are_capped_in_lists_with_the_route_that_returns_them(db, served):
    big = insert_job(db, "available", kind="k", queue="q", args={"blob": "x" * 200_000})
    small = insert_job(db, "available", kind="k", queue="q", args={"n": 1})
    with served.client() as http:
        r = http.get("/api/jobs")
        assert len(r.content) < 20_000
        rows = {j["id"]: j for j in r.json()}
        assert rows[small]["args"] == {"n": 1}
        marker = rows[big]["args"]["_awa_args_capped"]
        assert marker["cap"] == 64 * 1024 and marker["bytes"] > 200_000
        assert marker["whole"] == f"/api/jobs/{big}"
        assert http.get(marker["whole"]).json()["args"] == {"blob": "x" * 200_000}


def test_the_console_page_loads_nothing_from_outside_the_server(database_url):
    with awa_serve(database_url, console=True) as served, \
            httpx.Client(base_url=served.base, timeout=30) as browser:
        page = browser.get("/").text
        urls = re.findall(r"""(?:href|src)\s*=\s*["']([^"']+)["']|url\(["']?([^"')]+)""", page)
        found = [a or b for a, b in urls]
        assert found, page[:500]
        for url in found:
            assert url.startswith(served.base + "/") or url.startswith("/"), url
        assert "googleapis" not in page
        font = next(u for u in found if u.endswith(".ttf"))
        assert browser.get(font).status_code == 200
