"""Every route of the reference (../shared/reference/awa-ui-rest-api.md) against a real
``awa serve`` process, on both storage engines: status codes, the documented fields, and
that each action really changed the database."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from support.arrange import insert_job
from support.rows import job_row

from .conftest import Served

ENGINES = [pytest.param("queue_storage", marks=pytest.mark.engine("queue_storage"),
                        id="queue_storage"),
           pytest.param("canonical", marks=pytest.mark.engine("canonical"), id="canonical")]

JOB_ROW = {"id", "kind", "queue", "args", "state", "priority", "attempt", "run_lease",
           "max_attempts", "run_at", "heartbeat_at", "deadline_at", "attempted_at",
           "finalized_at", "created_at", "errors", "metadata", "tags", "unique_key",
           "unique_states", "callback_id", "callback_timeout_at", "callback_filter",
           "callback_on_complete", "callback_on_fail", "callback_transform", "progress"}
JOB_RESPONSE = JOB_ROW | {"original_priority", "queue_descriptor", "kind_descriptor"}
DESCRIPTOR = {"display_name", "description", "owner", "docs_url", "tags", "extra"}
DLQ_ROW = JOB_ROW | {"dlq_reason", "dlq_at", "original_run_lease"}
QUEUE_OVERVIEW = {"queue", *DESCRIPTOR, "descriptor_last_seen_at", "descriptor_stale",
                  "descriptor_mismatch", "total_queued", "scheduled", "available", "retryable",
                  "running", "failed", "waiting_external", "completed_last_hour",
                  "lag_seconds", "paused"}
KIND_OVERVIEW = {"kind", *DESCRIPTOR, "descriptor_last_seen_at", "descriptor_stale",
                 "descriptor_mismatch", "job_count", "queue_count", "completed_last_hour"}
CRON = {"name", "cron_expr", "timezone", "kind", "queue", "args", "priority", "max_attempts",
        "tags", "metadata", "missed_fire_policy", "last_enqueued_at", "created_at",
        "updated_at", "paused_at", "paused_by", "next_fire_at"}
RUNTIME_OVERVIEW = {"total_instances", "live_instances", "stale_instances",
                    "healthy_instances", "leader_instances", "instances"}
RUNTIME_INSTANCE = {"instance_id", "hostname", "pid", "version", "storage_capability",
                    "transition_role", "started_at", "last_seen_at", "snapshot_interval_ms",
                    "stale", "healthy", "postgres_connected", "poll_loop_alive",
                    "heartbeat_alive", "maintenance_alive", "shutting_down", "leader",
                    "global_max_workers", "queues"}
QUEUE_RUNTIME_CONFIG = {"mode", "max_workers", "min_workers", "weight", "global_max_workers",
                        "poll_interval_ms", "deadline_duration_secs",
                        "priority_aging_interval_secs", "claimers", "claim_batch_size",
                        "dlq_enabled", "rate_limit"}
QUEUE_RUNTIME_SUMMARY = {"queue", "instance_count", "live_instances", "stale_instances",
                         "healthy_instances", "total_in_flight", "overflow_held_total",
                         "config_mismatch", "config"}
STORAGE = {"current_engine", "active_engine", "prepared_engine", "state", "transition_epoch",
           "details", "entered_at", "updated_at", "finalized_at", "canonical_live_backlog",
           "prepared_queue_storage_schema", "prepared_schema_ready",
           "live_runtime_capability_counts", "can_enter_mixed_transition",
           "enter_mixed_transition_blockers", "can_finalize", "finalize_blockers"}
STATES = {"scheduled", "available", "running", "completed", "retryable", "failed", "cancelled",
          "waiting_external"}


def arrange(db) -> dict[str, Any]:
    """Jobs in every state, a runtime, descriptors, a cron schedule."""
    now = datetime.now(UTC)
    ids: dict[str, Any] = {}
    ids["available"] = [insert_job(db, "available", kind="send_email", queue="mail",
                                   tags=["vip"] if i % 2 else [], args={"n": i})
                        for i in range(6)]
    ids["scheduled"] = insert_job(db, "scheduled", kind="send_email", queue="mail",
                                  run_at=now + timedelta(hours=1))
    ids["running"] = insert_job(db, "running", kind="resize", queue="images",
                                heartbeat_at=now, attempt=1, run_lease=1)
    ids["failed"] = [insert_job(db, "failed", kind="resize", queue="images", attempt=3,
                                errors=[json.dumps({"error": "boom 1", "attempt": 3})])
                     for _ in range(3)]
    ids["cancelled"] = insert_job(db, "cancelled", kind="resize", queue="images")
    ids["completed"] = insert_job(db, "completed", kind="resize", queue="images")
    callbacks = [uuid.uuid4() for _ in range(3)]
    ids["callbacks"] = callbacks
    ids["waiting"] = [insert_job(db, "waiting_external", kind="webhook", queue="hooks",
                                 attempt=1, run_lease=1, callback_id=cb,
                                 callback_timeout_at=now + timedelta(hours=1))
                      for cb in callbacks]
    db.execute("""INSERT INTO awa.queue_descriptors (queue, display_name, description, owner,
                       docs_url, tags, extra, descriptor_hash)
                  VALUES ('mail', 'Mail', 'Outgoing mail', 'team-mail', 'https://docs/mail',
                          ARRAY['email'], '{"tier": 1}', 'h1')""")
    db.execute("""INSERT INTO awa.job_kind_descriptors (kind, display_name, descriptor_hash)
                  VALUES ('send_email', 'Send email', 'k1')""")
    db.execute("""INSERT INTO awa.cron_jobs (name, cron_expr, kind, queue, args)
                  VALUES ('nightly', '0 3 * * *', 'report', 'reports', '{"full": true}')""")
    db.execute("""INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version,
                       snapshot_interval_ms, leader, maintenance_alive, global_max_workers,
                       queues, descriptor_hashes)
                  VALUES (%s, 'worker-1', 4242, '0.1.0', 10000, true, true, 32,
                          %s::jsonb, %s::jsonb)""",
               (str(uuid.uuid4()),
                json.dumps([{"queue": "mail", "max_workers": 8, "min_workers": None,
                             "weight": None, "in_flight": 3, "capacity": 8,
                             "rate_limit": {"max_rate": 5.0, "burst": 10},
                             "deadline_duration_ms": 300000, "dlq_enabled": True}]),
                json.dumps({"queues": {"mail": "h1"}, "kinds": {"send_email": "k1"}})))
    return ids


def state_of(db, job_id: int) -> str | None:
    row = job_row(db, job_id)
    return None if row is None else str(row["state"])


def fields(obj: dict, expected: set[str]) -> None:
    missing = expected - set(obj)
    assert not missing, f"missing {sorted(missing)} in {sorted(obj)}"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_read_route_answers_with_the_documented_fields(engine, db, served: Served):
    ids = arrange(db)
    with served.client() as http:
        caps = http.get("/api/capabilities").json()
        assert caps["read_only"] is False and caps["poll_interval_ms"] >= 5000
        assert caps["engine"] == engine

        jobs = http.get("/api/jobs").json()
        assert len(jobs) == 16
        for j in jobs:
            fields(j, JOB_RESPONSE)
        assert [j["id"] for j in jobs] == sorted((j["id"] for j in jobs), reverse=True)
        mail = next(j for j in jobs if j["queue"] == "mail")
        assert mail["queue_descriptor"]["display_name"] == "Mail"
        assert mail["queue_descriptor"]["extra"] == {"tier": 1}
        assert mail["kind_descriptor"]["display_name"] == "Send email"
        assert mail["original_priority"] == mail["priority"]

        avail = ids["available"]
        assert {j["id"] for j in http.get("/api/jobs", params={"state": "available"}).json()} \
            == set(avail)
        assert {j["id"] for j in http.get("/api/jobs", params={"tag": "vip"}).json()} \
            == set(avail[1::2])
        assert {j["id"] for j in http.get("/api/jobs", params={"kind": "resize",
                                                              "queue": "images"}).json()} \
            == {ids["running"], ids["cancelled"], ids["completed"], *ids["failed"]}
        page = http.get("/api/jobs", params={"queue": "mail", "before_id": avail[3],
                                             "limit": 2}).json()
        assert [j["id"] for j in page] == [avail[2], avail[1]]

        one = http.get(f"/api/jobs/{avail[0]}").json()
        fields(one, JOB_RESPONSE)
        assert one["args"] == {"n": 0} and "dlq" not in one
        assert http.get("/api/jobs/987654").json() == {"error": "job not found: 987654"}

        queues = http.get("/api/queues").json()
        assert [q["queue"] for q in queues] == ["hooks", "images", "mail"]
        for q in queues:
            fields(q, QUEUE_OVERVIEW)
        mailq = http.get("/api/queues/mail").json()
        assert mailq["available"] == 6 and mailq["scheduled"] == 1
        assert mailq["total_queued"] == 7 and mailq["owner"] == "team-mail"
        assert mailq["descriptor_mismatch"] is False
        images = next(q for q in queues if q["queue"] == "images")
        assert images["running"] == 1 and images["failed"] == 3
        r = http.get("/api/queues/nope")
        assert r.status_code == 404 and r.json() == {"error": "queue 'nope' not found"}

        kinds = http.get("/api/kinds").json()
        for k in kinds:
            fields(k, KIND_OVERVIEW)
        by_kind = {k["kind"]: k for k in kinds}
        assert by_kind["send_email"]["job_count"] == 7
        assert by_kind["send_email"]["display_name"] == "Send email"

        cron = http.get("/api/cron").json()
        assert [c["name"] for c in cron] == ["nightly"]
        fields(cron[0], CRON)
        assert cron[0]["next_fire_at"] is not None

        stats = http.get("/api/stats").json()
        assert set(stats) == STATES
        assert stats["available"] == 6 and stats["failed"] == 3
        assert stats["waiting_external"] == 3 and stats["completed"] == 1
        series = http.get("/api/stats/timeseries", params={"minutes": 5}).json()
        assert sum(p["count"] for p in series) == 16
        for p in series:
            assert set(p) == {"bucket", "state", "count", "capped"} and p["state"] in STATES
            assert p["capped"] is False
        assert http.get("/api/stats/kinds").json() == ["resize", "send_email", "webhook"]
        assert http.get("/api/stats/queues").json() == ["hooks", "images", "mail"]

        rt = http.get("/api/runtime").json()
        fields(rt, RUNTIME_OVERVIEW)
        assert rt["live_instances"] == 1 and rt["leader_instances"] == 1
        inst = rt["instances"][0]
        fields(inst, RUNTIME_INSTANCE)
        assert inst["storage_capability"] == engine and inst["global_max_workers"] == 32
        fields(inst["queues"][0]["config"], QUEUE_RUNTIME_CONFIG)
        qrt = http.get("/api/queues/runtime").json()
        assert [q["queue"] for q in qrt] == ["mail"]
        fields(qrt[0], QUEUE_RUNTIME_SUMMARY)
        assert qrt[0]["total_in_flight"] == 3 and qrt[0]["config"]["max_workers"] == 8
        assert qrt[0]["config"]["rate_limit"] == {"max_rate": 5.0, "burst": 10}

        storage = http.get("/api/storage").json()
        fields(storage, STORAGE)
        assert storage["active_engine"] == engine and "history" not in storage
        assert http.get("/api/storage", params={"history": "true"}).json()["history"] == []

        assert http.get("/api/dlq").json() == []
        assert http.get("/api/dlq/depth").json() == {"total": 0, "by_queue": []}
        assert http.get(f"/api/dlq/{avail[0]}").json() is None

        doc = http.get("/api/openapi.json").json()
        for path in ("/api/jobs", "/api/jobs/{job_id}/retry", "/api/queues/runtime",
                     "/api/dlq/bulk-move", "/api/callbacks/{callback_id}/heartbeat",
                     "/api/diagnose", "/api/dlq/causes"):
            assert path in doc["paths"], path
        checks = http.get("/api/diagnose").json()
        assert checks and {"check", "status", "findings"} <= set(checks[0])


@pytest.mark.parametrize("engine", ENGINES)
def test_every_write_route_changes_the_database(engine, db, served: Served):
    ids = arrange(db)
    avail = ids["available"]
    failed = ids["failed"]
    with served.client() as http:
        r = http.post(f"/api/jobs/{avail[0]}/cancel")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
        fields(r.json(), JOB_RESPONSE)
        assert state_of(db, avail[0]) == "cancelled"
        r = http.post(f"/api/jobs/{avail[0]}/cancel")
        assert r.status_code == 404 and r.json() == {
            "error": f"job {avail[0]} is cancelled; only unfinished jobs can be cancelled"}
        r = http.post(f"/api/jobs/{avail[0]}/retry")
        assert r.status_code == 200 and r.json()["state"] == "available"
        assert r.json()["attempt"] == 0
        assert http.post(f"/api/jobs/{avail[1]}/retry").status_code == 404  # not eligible

        r = http.post("/api/jobs/bulk-cancel", json={"ids": [avail[2], avail[3], 999999]})
        assert sorted(j["id"] for j in r.json()) == [avail[2], avail[3]]
        r = http.post("/api/jobs/bulk-retry", json={"ids": [avail[2], avail[4], failed[0]]})
        assert sorted(j["id"] for j in r.json()) == sorted([avail[2], failed[0]])
        assert state_of(db, failed[0]) == "available"

        assert http.post("/api/queues/mail/pause", json={"paused_by": "tester"}).json() \
            == {"ok": True}
        assert http.get("/api/queues/mail").json()["paused"] is True
        assert http.post("/api/queues/empty-q/pause", json={}).json() == {"ok": True}
        assert "empty-q" in [q["queue"] for q in http.get("/api/queues").json()]
        assert http.post("/api/queues/mail/resume").json() == {"ok": True}
        assert http.get("/api/queues/mail").json()["paused"] is False
        drained = http.post("/api/queues/mail/drain").json()
        assert drained == {"drained": 6}  # 5 available (0, 1, 2, 4, 5) and the scheduled one
        assert http.get("/api/queues/mail").json()["total_queued"] == 0

        job = http.post("/api/cron/nightly/trigger").json()
        fields(job, JOB_ROW)
        assert job["kind"] == "report" and job["state"] == "available"
        r = http.post("/api/cron/missing/trigger")
        assert r.status_code == 400
        assert r.json() == {"error": "validation error: cron job not found: missing"}
        assert http.post("/api/cron/nightly/pause", json={"paused_by": "ops"}).json() \
            == {"ok": True}
        assert http.get("/api/cron").json()[0]["paused_by"] == "ops"
        assert http.post("/api/cron/nightly/resume").json() == {"ok": True}
        assert http.get("/api/cron").json()[0]["paused_at"] is None
        r = http.post("/api/cron/missing/pause")
        assert r.status_code == 404 and r.json() == {"error": "cron schedule 'missing' not found"}

        # The DLQ: move the two failed jobs in, read, retry one, purge the other.
        r = http.post("/api/dlq/bulk-move", json={})
        assert r.status_code == 400 and "bulk_move_failed_to_dlq requires" in r.json()["error"]
        assert http.post("/api/dlq/bulk-move", json={"queue": "images"}).json() == {"count": 2}
        rows = http.get("/api/dlq").json()
        assert sorted(d["id"] for d in rows) == sorted(failed[1:])
        for d in rows:
            fields(d, DLQ_ROW)
            assert d["dlq_reason"] == "ui_bulk_move"
        assert http.get("/api/dlq/depth").json() == {"total": 2, "by_queue": [
            {"queue": "images", "count": 2}]}
        detail = http.get(f"/api/jobs/{failed[1]}").json()
        assert detail["dlq"]["reason"] == "ui_bulk_move"
        fields(http.get(f"/api/dlq/{failed[1]}").json(), DLQ_ROW)
        causes = http.get("/api/dlq/causes").json()
        assert causes[0]["count"] == 2
        back = http.post(f"/api/dlq/{failed[1]}/retry", json={"queue": "images-retry"}).json()
        fields(back, JOB_ROW)
        assert back["queue"] == "images-retry" and back["state"] == "available"
        assert http.post(f"/api/dlq/{failed[1]}/retry").json() is None
        assert http.delete(f"/api/dlq/{failed[2]}").json() == {"count": 1}
        assert http.delete(f"/api/dlq/{failed[2]}").json() == {"count": 0}
        for route in ("bulk-retry", "bulk-purge"):
            r = http.post(f"/api/dlq/{route}", json={})
            assert r.status_code == 400 and "requires at least one of" in r.json()["error"]
            assert http.post(f"/api/dlq/{route}", json={"queue": "images"}).json() \
                == {"count": 0}

        # Callbacks.
        cb = ids["callbacks"]
        waiting = ids["waiting"]
        r = http.post(f"/api/callbacks/{cb[0]}/heartbeat", json={"timeout_seconds": 60})
        assert r.json() == {"id": waiting[0], "state": "WaitingExternal"}
        r = http.post(f"/api/callbacks/{cb[0]}/complete", json={"payload": {"ok": 1}})
        assert r.json() == {"id": waiting[0], "state": "Completed"}
        assert state_of(db, waiting[0]) == "completed"
        r = http.post(f"/api/callbacks/{cb[1]}/fail", json={"error": "remote said no"})
        assert r.json() == {"id": waiting[1], "state": "Failed"}
        assert state_of(db, waiting[1]) == "failed"
        r = http.post(f"/api/callbacks/{cb[0]}/complete", json={})
        assert r.status_code == 404 and r.json() == {"error": f"callback not found: {cb[0]}"}
        r = http.post("/api/callbacks/not-a-uuid/complete", json={})
        assert r.status_code == 400
        r = http.post(f"/api/callbacks/{cb[2]}/heartbeat", json={"timeout_seconds": -1})
        assert r.status_code == 400 and "timeout_seconds" in r.json()["error"]


def test_bad_input_answers_4xx_with_an_error_body(db, served: Served):
    with served.client() as http:
        for path, params in (("/api/jobs", {"state": "bogus"}), ("/api/jobs/abc", {}),
                             ("/api/jobs", {"before_id": "x"})):
            r = http.get(path, params=params)
            assert r.status_code == 400 and set(r.json()) == {"error"}, (path, r.text)
        r = http.post("/api/jobs/bulk-retry", json={"ids": "nope"})
        assert r.status_code == 422 and set(r.json()) == {"error"}
        r = http.get("/api/no-such-route")
        assert r.status_code == 404 and set(r.json()) == {"error"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_filter_wide_retry_previews_n_then_retries_exactly_those_n(engine, db,
                                                                     served: Served):
    failed = [insert_job(db, "failed", kind="sync", queue="billing", attempt=5)
              for _ in range(30)]
    cancelled = insert_job(db, "cancelled", kind="sync", queue="billing")
    elsewhere = insert_job(db, "failed", kind="sync", queue="other")
    with served.client() as http:
        preview = http.post("/api/jobs/bulk-retry/preview",
                            json={"queue": "billing", "state": "failed"}).json()
        assert preview["total"] == 30 and preview["truncated"] is False
        assert sorted(preview["ids"]) == sorted(failed)
        # A failure that arrives after the preview is not swept in by the confirmation.
        late = insert_job(db, "failed", kind="sync", queue="billing")
        retried = http.post("/api/jobs/bulk-retry", json={"ids": preview["ids"]}).json()
        assert sorted(j["id"] for j in retried) == sorted(failed)
        assert all(j["state"] == "available" and j["attempt"] == 0 for j in retried)
        assert state_of(db, late) == "failed" and state_of(db, elsewhere) == "failed"
        assert state_of(db, cancelled) == "cancelled"
        everything = http.post("/api/jobs/bulk-retry/preview", json={"queue": "billing"}).json()
        assert sorted(everything["ids"]) == sorted([late, cancelled])
        r = http.post("/api/jobs/bulk-retry/preview", json={})
        assert r.status_code == 400 and "needs at least one" in r.json()["error"]
        r = http.post("/api/jobs/bulk-retry/preview", json={"state": "running"})
        assert r.status_code == 400
        cancel = http.post("/api/jobs/bulk-cancel/preview",
                           json={"queue": "billing"}).json()
        assert sorted(cancel["ids"]) == sorted(failed)  # the 30 retried are available now
