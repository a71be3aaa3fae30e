"""DELETE and UPDATE through the awa.jobs view (migration 0002), as awa-pg 0.6.9 suites use them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import awa


def _future() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


def _where(db, job_id: int) -> str | None:
    row = db.execute("SELECT (SELECT 'hot' FROM awa.jobs_hot WHERE id = %(i)s) AS hot, "
                     "(SELECT 'deferred' FROM awa.scheduled_jobs WHERE id = %(i)s) AS deferred",
                     {"i": job_id}).fetchone()
    return row["hot"] or row["deferred"]


async def test_delete_from_the_view_removes_rows_of_both_tables(client, db):
    await client.insert({"n": 1}, kind="k")
    await client.insert({"n": 2}, kind="k", run_at=_future())
    keep = await client.insert({"n": 3}, kind="other")
    cur = db.execute("DELETE FROM awa.jobs WHERE kind = 'k'")
    assert cur.rowcount == 2
    assert [r["id"] for r in db.execute("SELECT id FROM awa.jobs")] == [keep.id]
    assert db.execute("DELETE FROM awa.jobs RETURNING kind").fetchall() == [{"kind": "other"}]
    assert db.execute("SELECT count(*) AS n FROM awa.jobs").fetchone()["n"] == 0


async def test_delete_frees_the_unique_key(client, db):
    await client.insert({"n": 1}, kind="u", unique_opts={"by_args": True})
    db.execute("DELETE FROM awa.jobs")
    again = await client.insert({"n": 1}, kind="u", unique_opts={"by_args": True})
    assert again.state == awa.JobState.Available


async def test_update_in_place_and_across_tables(client, db):
    job = await client.insert({"n": 1}, kind="k")
    assert db.execute("UPDATE awa.jobs SET priority = 1, metadata = metadata || '{\"a\": 1}' "
                      "WHERE id = %s", (job.id,)).rowcount == 1
    got = await client.get_job(job.id)
    assert got.priority == 1 and got.metadata == {"a": 1} and _where(db, job.id) == "hot"

    db.execute("UPDATE awa.jobs SET state = 'scheduled', run_at = now() + interval '1 hour' "
               "WHERE id = %s", (job.id,))
    assert (await client.get_job(job.id)).state == awa.JobState.Scheduled
    assert _where(db, job.id) == "deferred"

    db.execute("UPDATE awa.jobs SET state = 'available', run_at = now() WHERE id = %s",
               (job.id,))
    assert (await client.get_job(job.id)).state == awa.JobState.Available
    assert _where(db, job.id) == "hot"

    db.execute("UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() WHERE id = %s",
               (job.id,))
    assert (await client.get_job(job.id)).state == awa.JobState.Cancelled


async def test_update_of_no_row_and_returning(client, db):
    job = await client.insert({"n": 1}, kind="k", run_at=_future())
    assert db.execute("UPDATE awa.jobs SET priority = 3 WHERE id = -1").rowcount == 0
    rows = db.execute("UPDATE awa.jobs SET tags = '{x}' WHERE id = %s RETURNING id, tags",
                      (job.id,)).fetchall()
    assert rows == [{"id": job.id, "tags": ["x"]}] and _where(db, job.id) == "deferred"
