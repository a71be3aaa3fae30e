"""Rescue branches against real rows: stale heartbeats, deadlines, callback waits, the wedge."""

from __future__ import annotations

import pytest

from awa import lifecycle
from awa.runtime.maintenance import rescue

from .conftest import WEDGE_QUERY, dlq, insert_job, job


class Flag:
    """Stands for a running handler's context in this process: records cancel()."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def cancel(self, reason: str) -> None:
        self.reasons.append(reason)


async def test_stale_heartbeat_retries_with_backoff_and_leaves_live_jobs(db, pool):
    stale = insert_job(db, heartbeat_age_s=120, attempt=1, run_lease=7)
    live = insert_job(db, heartbeat_age_s=5)
    out = await rescue.rescue(pool, rescue.HEARTBEAT_STALE, staleness_ms=90_000)
    assert (out.retried, out.failed, out.dead_lettered) == (1, 0, 0)
    row = job(db, stale)
    assert row["state"] == "retryable"
    assert row["errors"][-1]["error"] == "heartbeat stale: worker presumed dead"
    assert row["errors"][-1]["attempt"] == 1
    assert row["run_lease"] == 7 and row["attempt"] == 1
    wait = db.execute("SELECT extract(epoch FROM run_at - now()) AS s FROM awa.jobs "
                      "WHERE id = %s", (stale,)).fetchone()["s"]
    assert 0.5 < wait <= 2 * 1.25 + 0.1  # 2^1 s plus at most 25 % jitter
    assert job(db, live)["state"] == "running"


async def test_exhausted_attempts_fail_or_dead_letter_by_queue_policy(db, pool):
    plain = insert_job(db, queue="plain", heartbeat_age_s=200, attempt=3, max_attempts=3)
    lettered = insert_job(db, queue="letters", heartbeat_age_s=200, attempt=3, max_attempts=3,
                          run_lease=4)
    out = await rescue.rescue(pool, rescue.HEARTBEAT_STALE, staleness_ms=1_000,
                              dlq_enabled=lambda q: q == "letters")
    assert (out.failed, out.dead_lettered) == (1, 1)
    failed = job(db, plain)
    assert failed["state"] == "failed" and failed["finalized_at"] is not None
    assert failed["errors"][-1]["terminal"] is True
    assert job(db, lettered) is None
    entry = dlq(db, lettered)
    assert entry["dlq_reason"] == "heartbeat_stale"
    assert entry["original_run_lease"] == 4
    assert entry["errors"][-1]["error"] == lifecycle.HEARTBEAT_STALE_ERROR


async def test_deadline_rescue_flags_the_local_handler(db, pool):
    late = insert_job(db, deadline_in_s=-1, run_lease=2)
    on_time = insert_job(db, deadline_in_s=60)
    flag = Flag()
    out = await rescue.rescue(pool, rescue.DEADLINE_EXCEEDED, in_flight={(late, 2): flag})
    assert out.retried == 1
    assert job(db, late)["errors"][-1]["error"] == "hard deadline exceeded"
    assert flag.reasons == ["hard deadline exceeded"]
    assert job(db, on_time)["state"] == "running"


async def test_deadline_exhausted_goes_to_dlq_deadline_exceeded(db, pool):
    late = insert_job(db, deadline_in_s=-5, attempt=2, max_attempts=2)
    await rescue.rescue(pool, rescue.DEADLINE_EXCEEDED, dlq_enabled=lambda q: True)
    assert dlq(db, late)["dlq_reason"] == "deadline_exceeded"


async def test_callback_timeout_retries_then_fails(db, pool):
    waiting = insert_job(db, state="waiting_external", callback_timeout_in_s=-1)
    last = insert_job(db, state="waiting_external", callback_timeout_in_s=-1, attempt=5,
                      max_attempts=5)
    pending = insert_job(db, state="waiting_external", callback_timeout_in_s=600)
    out = await rescue.rescue(pool, rescue.CALLBACK_TIMEOUT)
    assert (out.retried, out.failed) == (1, 1)
    retried = job(db, waiting)
    assert retried["state"] == "retryable" and retried["callback_id"] is None
    assert retried["errors"][-1]["error"] == "callback timed out"
    assert job(db, last)["state"] == "failed"
    assert job(db, pending)["state"] == "waiting_external"


async def test_a_completed_attempt_is_not_rescued(db, pool):
    """The guard: a row whose attempt already finished (or moved on) is untouched."""
    done = insert_job(db, state="completed", heartbeat_age_s=500, finalized_age_s=1)
    out = await rescue.rescue(pool, rescue.HEARTBEAT_STALE, staleness_ms=1_000)
    assert out.total == 0
    assert job(db, done)["state"] == "completed"


async def test_batches_are_bounded_and_all_rows_are_rescued(db, pool):
    ids = [insert_job(db, heartbeat_age_s=100) for _ in range(25)]
    out = await rescue.rescue(pool, rescue.HEARTBEAT_STALE, staleness_ms=1_000, batch_size=10)
    assert out.retried == 25 and out.batches == 3
    # two statements per batch (lock candidates, apply) plus the empty probe
    assert out.statements == 2 * 3 + 0
    states = {job(db, i)["state"] for i in ids}
    assert states == {"retryable"}


@pytest.mark.engine("canonical")  # the guide's wedge query reads awa.jobs_hot
async def test_unique_wedge_cancels_superseded_attempt_and_rescues_the_rest(db, pool):
    """The troubleshooting guide's wedge: a mask without running lets a newer job take
    the key while the old attempt runs; rescue must not abort the batch every tick."""
    mask = "11001000"  # scheduled, available, retryable -- running excluded
    key = b"\x01" * 16
    old = insert_job(db, heartbeat_age_s=300, unique_key=key, unique_states=mask, run_lease=3)
    newer = insert_job(db, state="available", unique_key=key, unique_states=mask)
    others = [insert_job(db, heartbeat_age_s=300) for _ in range(3)]
    # The seed's wedge query sees the stuck job and its claim holder.
    wedge = db.execute(WEDGE_QUERY).fetchall()
    assert [(w["stuck_job"], w["claim_holder"]) for w in wedge] == [(old, newer)]

    out = await rescue.rescue(pool, rescue.HEARTBEAT_STALE, staleness_ms=1_000)
    assert out.duplicates == 1 and out.retried == 3
    stuck = job(db, old)
    assert stuck["state"] == "cancelled"
    assert stuck["errors"][-1]["error"] == "rescued as duplicate"
    assert stuck["errors"][-1]["cause"] == "heartbeat stale: worker presumed dead"
    assert job(db, newer)["state"] == "available"
    holder = db.execute("SELECT job_id FROM awa.job_unique_claims WHERE unique_key = %s",
                        (key,)).fetchone()
    assert holder["job_id"] == newer
    assert {job(db, i)["state"] for i in others} == {"retryable"}
    # The next tick has nothing left to trip over.
    again = await rescue.rescue(pool, rescue.HEARTBEAT_STALE, staleness_ms=1_000)
    assert again.total == 0


async def test_mask_including_cancelled_leaves_the_row_but_rescues_the_others(db, pool):
    """Nothing safe exists for this row (both exits take the key): it is logged and
    left alone, and the rest of the batch is still rescued, tick after tick."""
    mask = "11001010"  # scheduled, available, retryable, cancelled
    key = b"\x03" * 16
    stuck = insert_job(db, heartbeat_age_s=300, unique_key=key, unique_states=mask)
    insert_job(db, state="available", unique_key=key, unique_states=mask)
    other = insert_job(db, heartbeat_age_s=300)
    out = await rescue.rescue(pool, rescue.HEARTBEAT_STALE, staleness_ms=1_000)
    assert out.retried == 1 and out.duplicates == 0
    assert job(db, stuck)["state"] == "running"
    assert job(db, other)["state"] == "retryable"
