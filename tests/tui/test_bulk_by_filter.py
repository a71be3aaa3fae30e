"""The Jobs screen's filter-wide actions on both engines: C / R (cancel / retry every job
the filter matches: previewed, confirmed, then exactly the previewed ids) and durable batch
operations (b starts one over the filter, B shows them, x cancels one)."""

from __future__ import annotations

import uuid

import pytest

import awa
from awa.batch_operations import run_batch_operations
from support.rows import job_row
from tui.conftest import add_dlq, add_job, press, running_console, screen_text

ENGINES = [pytest.param("queue_storage", marks=pytest.mark.engine("queue_storage"),
                        id="queue_storage"),
           pytest.param("canonical", marks=pytest.mark.engine("canonical"), id="canonical")]


async def filter_with(app, pilot, text: str) -> None:
    await press(app, pilot, "slash")
    app.screen.query_one("#filter").value = text
    await press(app, pilot, "enter")


async def answer(app, pilot, text: str) -> None:
    """Type into the prompt the last key opened, and submit it."""
    app.screen.query_one("#answer").value = text
    await press(app, pilot, "enter")


@pytest.mark.parametrize("engine", ENGINES)
async def test_retry_by_filter_previews_then_retries_exactly_those(database_url, db, engine):
    failed = [add_job(db, state="failed", kind="sync", queue="billing", attempt=3)
              for _ in range(12)]
    other_queue = add_job(db, state="failed", kind="sync", queue="email", attempt=3)
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3")
        await press(app, pilot, "R")
        assert "set a filter first" in screen_text(app)
        await filter_with(app, pilot, "queue=billing")
        await press(app, pilot, "R")
        text = screen_text(app)
        assert "Retry 12 job(s) matching queue=billing?" in text
        assert str(max(failed)) in text
        # A job that starts to match after the preview is not swept in.
        late = add_job(db, state="failed", kind="sync", queue="billing", attempt=3)
        await press(app, pilot, "y")
        assert "retried 12 job(s)" in screen_text(app)
    assert all(job_row(db, j)["state"] == "available" for j in failed)
    assert job_row(db, late)["state"] == "failed"
    assert job_row(db, other_queue)["state"] == "failed"


@pytest.mark.parametrize("engine", ENGINES)
async def test_cancel_by_filter_declined_changes_nothing(database_url, db, engine):
    waiting = [add_job(db, state="available", kind="mail", queue="outbox") for _ in range(3)]
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3")
        await filter_with(app, pilot, "state=completed")
        await press(app, pilot, "C")
        assert "applies to scheduled, available" in screen_text(app)
        await filter_with(app, pilot, "queue=outbox")
        await press(app, pilot, "C")
        assert "Cancel 3 job(s) matching queue=outbox?" in screen_text(app)
        await press(app, pilot, "n")
        assert all(job_row(db, j)["state"] == "available" for j in waiting)
        await press(app, pilot, "C", "y")
        assert "cancelled 3 job(s)" in screen_text(app)
    assert all(job_row(db, j)["state"] == "cancelled" for j in waiting)


@pytest.mark.parametrize("engine", ENGINES)
async def test_batch_operation_from_the_console(database_url, db, engine):
    backlog = [add_job(db, state="available", kind="mail", queue="slow") for _ in range(30)]
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "3")
        await filter_with(app, pilot, "queue=slow")
        await press(app, pilot, "b")
        await answer(app, pilot, "priority 9")
        assert "not understood: 'priority 9'" in screen_text(app)
        await press(app, pilot, "b")
        await answer(app, pilot, "queue fast priority 1")
        assert "queue fast priority 1: 30 available/scheduled job(s) match" in screen_text(app)
        await press(app, pilot, "y")
        assert "submitted batch operation" in screen_text(app)
        op = db.execute("SELECT id, op_kind, spec, state, submitted_by "
                        "FROM awa.batch_operations").fetchone()
        assert (op["op_kind"], op["state"]) == ("move_queue", "pending")
        assert op["spec"] == {"op_kind": "move_queue", "queue": "fast", "priority": 1}
        assert op["submitted_by"].startswith("awa-tui ")
        await press(app, pilot, "B")
        assert f"{str(op['id'])[:8]} pending" in screen_text(app)
        await press(app, pilot, "escape")

        client = awa.AsyncClient(database_url)
        try:
            pool, engine_ = await client._get_pool(), await client._get_engine()
            while (await run_batch_operations(pool, engine_, runner=uuid.uuid4()))["steps"]:
                pass
        finally:
            await client.close()
        await press(app, pilot, "B")
        assert f"{str(op['id'])[:8]} completed" in screen_text(app)
        assert "30/30 (30 changed" in screen_text(app)
        await press(app, pilot, "escape")
        await press(app, pilot, "x")
        await answer(app, pilot, str(op["id"])[:8])
        await press(app, pilot, "y")
        assert "cannot be cancelled" in screen_text(app)
    assert all((job_row(db, j)["queue"], job_row(db, j)["priority"]) == ("fast", 1)
               for j in backlog)


@pytest.mark.parametrize("engine", ENGINES)
async def test_dlq_purge_and_retry_by_filter_act_on_exactly_the_previewed_entries(
        database_url, db, engine):
    poison = [add_dlq(db, 7000 + i, queue="imports", reason="terminal_error",
                      error=f"KeyError: 'sku-{i}'") for i in range(5)]
    exhausted = add_dlq(db, 7100, queue="imports", reason="max_attempts_exhausted")
    elsewhere = add_dlq(db, 7200, queue="email", reason="terminal_error")
    async with running_console(database_url) as (app, pilot):
        await press(app, pilot, "4")
        await press(app, pilot, "X")
        assert "set a filter first" in screen_text(app)
        await filter_with(app, pilot, "queue=imports reason=terminal_error")
        await press(app, pilot, "X")
        text = screen_text(app)
        assert "Purge 5 DLQ entries matching queue=imports reason=terminal_error?" in text
        late = add_dlq(db, 7300, queue="imports", reason="terminal_error")  # after the preview
        await press(app, pilot, "n")
        assert dlq_ids(db) == sorted([*poison, exhausted, elsewhere, late])
        await press(app, pilot, "X", "y")
        assert "purged from the DLQ 6 job(s)" in screen_text(app)  # the new preview has 6
        await filter_with(app, pilot, "queue=imports")
        await press(app, pilot, "R")
        assert "Retry 1 DLQ entry matching queue=imports?" in screen_text(app)
        await press(app, pilot, "y")
        assert "retried from the DLQ 1 job(s)" in screen_text(app)
    assert dlq_ids(db) == [elsewhere]
    assert job_row(db, exhausted)["state"] == "available"


def dlq_ids(db) -> list[int]:
    return [r["job_id"] for r in db.execute("SELECT job_id FROM awa.dlq_entries ORDER BY 1")]
