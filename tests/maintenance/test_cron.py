"""Cron: registration errors, sync, exactly-once evaluation, policies, admin."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from awa import ValidationError, config
from awa import db as awa_db
from awa.cron import slots_between
from awa.runtime.maintenance import cron


@dataclass
class Report:
    team: str


def register(client, name="nightly", expr="* * * * *", **kw):
    client.periodic(name, expr, Report, Report(team="ops"), queue="reports", **kw)


@pytest.mark.parametrize("kwargs, message", [
    ({"expr": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
    ({"expr": "every day"}, "invalid cron expression"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"priority": 5}, "priority must be between 1 and 4"),
    ({"max_attempts": 0}, "max_attempts must be between 1 and 1000"),
    ({"missed_fire_policy": "sometimes"}, "missed_fire_policy must be 'coalesce' or 'catch_up'"),
])
def test_bad_registration_is_rejected_at_once_with_one_line(client, kwargs, message):
    with pytest.raises(ValidationError) as err:
        register(client, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert client._periodic_jobs == []


def test_duplicate_name_and_wrong_args_type(client):
    register(client)
    with pytest.raises(ValidationError, match="already registered"):
        register(client)
    with pytest.raises(ValidationError, match="args must be a Report"):
        client.periodic("other", "* * * * *", Report, {"team": "x"})
    assert [p.kind for p in client._periodic_jobs] == ["report"]


async def test_start_stores_every_schedule_before_it_returns(client, db):
    register(client, name="nightly")
    register(client, name="hourly", expr="0 * * * *")

    @client.task(Report, queue="reports")
    async def handle(job):
        return None
    await client.start([("reports", 1)])
    try:
        names = [r["name"] for r in db.execute("SELECT name FROM awa.cron_jobs ORDER BY name")]
        assert names == ["hourly", "nightly"]
    finally:
        await client.shutdown(500)


async def test_sync_upserts_and_keeps_progress_and_pause(client, db):
    register(client, timezone="Europe/Berlin", tags=["t"], metadata={"m": 1})
    assert await client.sync_cron_jobs() == 1
    db.execute("UPDATE awa.cron_jobs SET last_enqueued_at = now(), paused_at = now()")
    # Unchanged declarations write nothing; progress and pause survive a redeploy.
    assert await client.sync_cron_jobs() == 0
    [row] = await client.list_cron_jobs()
    assert row["timezone"] == "Europe/Berlin" and row["kind"] == "report"
    assert row["args"] == {"team": "ops"} and row["tags"] == ["t"]
    assert row["last_enqueued_at"] is not None and row["paused"] is True


def backdate(db, name: str, minutes: int) -> None:
    db.execute("UPDATE awa.cron_jobs SET created_at = now() - make_interval(mins => %s) "
               "WHERE name = %s", (minutes, name))


def cron_jobs(db, name: str) -> list[dict]:
    return db.execute("SELECT *, state::text AS state FROM awa.jobs "
                      "WHERE metadata->>'cron_name' = %s ORDER BY run_at", (name,)).fetchall()


async def test_coalesce_fires_latest_slot_once_even_with_concurrent_evaluators(
        client, db, database_url):
    register(client)
    await client.sync_cron_jobs()
    backdate(db, "nightly", 5)
    pools = [await awa_db.open_pool(database_url, config.APP_NAME_WORKER, max_size=2)
             for _ in range(3)]
    try:
        results = await asyncio.gather(*(cron.evaluate(p) for p in pools))
        again = await cron.evaluate(pools[0])
    finally:
        for p in pools:
            await p.close()
    assert sum(r.fired.get("nightly", 0) for r in results) == 1
    assert again.fired == {}
    [fired] = cron_jobs(db, "nightly")
    assert fired["kind"] == "report" and fired["queue"] == "reports"
    assert fired["state"] == "available" and fired["args"] == {"team": "ops"}
    row = db.execute("SELECT last_enqueued_at FROM awa.cron_jobs").fetchone()
    assert row["last_enqueued_at"] == fired["run_at"]


async def test_catch_up_fires_every_missed_slot(client, db, pool):
    register(client, missed_fire_policy="catch_up")
    await client.sync_cron_jobs()
    backdate(db, "nightly", 4)
    row = db.execute("SELECT created_at, now() AS now FROM awa.cron_jobs").fetchone()
    expected = slots_between("* * * * *", "UTC", row["created_at"], row["now"], 100)
    out = await cron.evaluate(pool)
    assert out.fired["nightly"] == len(expected) >= 3
    assert [j["run_at"] for j in cron_jobs(db, "nightly")] == expected


async def test_paused_schedule_does_not_fire_until_resumed(client, db, pool):
    register(client)
    await client.sync_cron_jobs()
    backdate(db, "nightly", 3)
    await client.pause_cron_job("nightly", paused_by="oncall")
    assert (await cron.evaluate(pool)).fired == {}
    await client.resume_cron_job("nightly")
    assert (await cron.evaluate(pool)).fired == {"nightly": 1}


async def test_trigger_delete_and_unknown_names(client, db):
    register(client)
    await client.sync_cron_jobs()
    job = await client.trigger_cron_job("nightly")
    assert job.kind == "report" and job.metadata["cron_name"] == "nightly"
    assert db.execute("SELECT last_enqueued_at FROM awa.cron_jobs").fetchone()[
        "last_enqueued_at"] is None
    for call in (client.trigger_cron_job, client.pause_cron_job, client.resume_cron_job):
        with pytest.raises(ValidationError, match="no cron job named 'nope'"):
            await call("nope")
    assert await client.delete_cron_job("nightly") is True
    assert await client.delete_cron_job("nightly") is False


def test_args_type_may_be_left_out(client):
    client.periodic("short_form", "*/5 * * * *", Report(team="ops"), queue="reports")
    [spec] = client._periodic_jobs
    assert spec.kind == "report" and spec.args == {"team": "ops"}
    with pytest.raises(ValidationError, match="dict args need an explicit kind="):
        client.periodic("dict_form", "*/5 * * * *", {"team": "ops"})
    client.periodic("dict_kind", "*/5 * * * *", {"team": "ops"}, kind="report")
    assert [p.name for p in client._periodic_jobs] == ["short_form", "dict_kind"]
