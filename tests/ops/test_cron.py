"""A cron schedule that stops firing (issue 46's matrix scenario cron_stopped): `awa-ops
diagnose cron` names it and why, the exporter's awa_db_cron_overdue_seconds reads the same
lateness (AwaCronNotFiring's input), and a schedule that is on time or paused is quiet."""

from __future__ import annotations

import awa
from awa_ops.exporter import DatabaseCollector


async def _overdue(database_url: str) -> dict[str, float]:
    collector = DatabaseCollector(database_url)
    try:
        families = {m.name: m for m in await collector.scrape()}
    finally:
        await collector.close()
    return {s.labels["awa_cron_name"]: s.value
            for s in families["awa_db_cron_overdue_seconds"].samples}


async def _declare(database_url: str) -> None:
    client = awa.AsyncClient(database_url)
    try:
        client.periodic("digest", "* * * * *", dict, {}, kind="digest")
        client.periodic("nightly", "0 3 * * *", dict, {}, kind="nightly")
        await client.sync_cron_jobs()
    finally:
        await client.close()


async def test_a_schedule_past_its_fire_time_is_named_with_what_to_do(database_url, db, ops):
    await _declare(database_url)
    # every-minute schedule last fired 10 minutes ago, no runtime (so no leader) at all;
    # the nightly one fired at its last 03:00 and is on time
    db.execute("UPDATE awa.cron_jobs SET last_enqueued_at = now() - interval '10 minutes' "
               "WHERE name = 'digest'")
    db.execute("UPDATE awa.cron_jobs SET last_enqueued_at = date_trunc('day', now() "
               "- interval '3 hours') + interval '3 hours' WHERE name = 'nightly'")
    result = ops("cron")
    assert result.code == 1, result.stdout + result.stderr
    (finding,) = result.findings()
    assert finding["severity"] == "warning"
    assert "cron schedule digest" in finding["summary"] and "has not been enqueued" in finding[
        "summary"]
    assert "no live runtime leads" in finding["why"]
    assert "cron trigger digest" in finding["next_step"]
    overdue = await _overdue(database_url)
    assert overdue["digest"] > 9 * 60 - 5 and overdue["nightly"] == 0

    # paused by an operator: not late, whatever its last fire time
    db.execute("UPDATE awa.cron_jobs SET paused_at = now() WHERE name = 'digest'")
    assert ops("cron").code == 0
    assert "digest" not in await _overdue(database_url)


async def test_an_expression_the_runtime_cannot_evaluate_is_named_at_once(database_url, db, ops):
    await _declare(database_url)
    db.execute("UPDATE awa.cron_jobs SET last_enqueued_at = now() - interval '20 seconds', "
               "cron_expr = '0 */5 * * * * ?' WHERE name = 'digest'")
    db.execute("UPDATE awa.cron_jobs SET last_enqueued_at = now() WHERE name = 'nightly'")
    result = ops("cron")
    (finding,) = result.findings()
    assert result.code == 1 and finding["severity"] == "warning"
    assert "'0 */5 * * * * ?' cannot be evaluated" in finding["summary"]
    assert "restart a worker that declares the schedule" in finding["next_step"]
    # the exporter counts it from its last fire: it will not fire again
    assert 15 < (await _overdue(database_url))["digest"] < 600


async def test_schedules_on_time_are_ok(database_url, db, ops):
    await _declare(database_url)
    db.execute("UPDATE awa.cron_jobs SET last_enqueued_at = now()")
    result = ops("cron")
    assert result.code == 0 and "2 active cron schedules firing on time" in result.findings()[0][
        "summary"]
    assert set((await _overdue(database_url)).values()) == {0.0}
