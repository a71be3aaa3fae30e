"""Conformance: the cron-admin group (``CronAdminOps``) of every engine."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import awa
from awa.storage.engine import CronSchedule


def schedule(name: str, **overrides: Any) -> CronSchedule:
    base = CronSchedule(name=name, cron_expr="0 3 * * *", timezone="UTC", kind="report",
                        queue="cron_conf", args={"scope": name}, priority=2, max_attempts=4,
                        tags=["nightly"], metadata={"team": "data"},
                        missed_fire_policy="coalesce")
    return replace(base, **overrides)


async def test_upsert_counts_only_changed_schedules(engine, aconn):
    assert await engine.upsert_cron_jobs(aconn, []) == 0
    assert await engine.upsert_cron_jobs(aconn, [schedule("b"), schedule("a")]) == 2
    assert await engine.upsert_cron_jobs(aconn, [schedule("b"), schedule("a")]) == 0
    changed = schedule("a", cron_expr="*/5 * * * *", missed_fire_policy="catch_up")
    assert await engine.upsert_cron_jobs(aconn, [schedule("b"), changed]) == 1

    listed = await engine.list_cron_jobs(aconn)
    assert [c.name for c in listed] == ["a", "b"]
    a = listed[0]
    assert (a.cron_expr, a.timezone, a.kind, a.queue, a.args, a.priority, a.max_attempts,
            a.tags, a.metadata, a.missed_fire_policy) == (
        "*/5 * * * *", "UTC", "report", "cron_conf", {"scope": "a"}, 2, 4, ["nightly"],
        {"team": "data"}, "catch_up")
    assert a.last_enqueued_at is None and a.paused_at is None and a.paused_by is None
    assert a.created_at is not None and a.updated_at >= a.created_at
    assert await engine.get_cron_job(aconn, "b") == listed[1]
    assert await engine.get_cron_job(aconn, "missing") is None


async def test_pause_resume_round_trip_survives_a_redeploy(engine, aconn):
    await engine.upsert_cron_jobs(aconn, [schedule("nightly")])
    assert await engine.pause_cron_job(aconn, "nightly", "oncall") is True
    paused = await engine.get_cron_job(aconn, "nightly")
    assert paused is not None and paused.paused_at is not None and paused.paused_by == "oncall"

    # Pausing again keeps when it was first paused; a redeploy keeps the pause.
    assert await engine.pause_cron_job(aconn, "nightly", "someone-else") is True
    again = await engine.get_cron_job(aconn, "nightly")
    assert again is not None and again.paused_at == paused.paused_at
    await engine.upsert_cron_jobs(aconn, [schedule("nightly", priority=1)])
    redeployed = await engine.get_cron_job(aconn, "nightly")
    assert redeployed is not None and redeployed.priority == 1
    assert redeployed.paused_at == paused.paused_at

    assert await engine.resume_cron_job(aconn, "nightly") is True
    resumed = await engine.get_cron_job(aconn, "nightly")
    assert resumed is not None and resumed.paused_at is None and resumed.paused_by is None

    assert await engine.pause_cron_job(aconn, "missing", None) is False
    assert await engine.resume_cron_job(aconn, "missing") is False


async def test_trigger_enqueues_one_available_run(engine, aconn):
    await engine.upsert_cron_jobs(aconn, [schedule("nightly")])
    job = await engine.trigger_cron_job(aconn, "nightly")
    assert job is not None
    assert (job.kind, job.queue, job.args, job.priority, job.max_attempts, job.tags) == (
        "report", "cron_conf", {"scope": "nightly"}, 2, 4, ["nightly"])
    assert job.state is awa.JobState.Available
    assert job.metadata["cron_name"] == "nightly" and job.metadata["team"] == "data"
    assert "cron_triggered_at" in job.metadata
    cur = await aconn.execute("SELECT state::text AS state FROM awa.jobs WHERE kind = 'report'")
    assert [r["state"] for r in await cur.fetchall()] == ["available"]
    # The schedule itself is untouched.
    stored = await engine.get_cron_job(aconn, "nightly")
    assert stored is not None and stored.last_enqueued_at is None
    assert await engine.trigger_cron_job(aconn, "missing") is None


async def test_delete_removes_the_schedule_once(engine, aconn):
    await engine.upsert_cron_jobs(aconn, [schedule("a"), schedule("b")])
    assert await engine.delete_cron_job(aconn, "a") is True
    assert await engine.delete_cron_job(aconn, "a") is False
    assert [c.name for c in await engine.list_cron_jobs(aconn)] == ["b"]
    assert await engine.get_cron_job(aconn, "a") is None
