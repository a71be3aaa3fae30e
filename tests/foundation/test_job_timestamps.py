"""Job timestamps read as ``Timestamp`` strings (awa-pg 0.6.9's type) however they were
set, while the runtime builds a job without making one (issue 32: building them for every
claimed job cost ~17 us of CPU per job)."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from awa.job import TIMESTAMP_FIELDS, Job, JobState, Timestamp, job_datetime

PLUS_TWO = timezone(timedelta(hours=2))


def a_job(**timestamps: Any) -> Job[dict[str, int]]:
    return Job(id=1, kind="k", queue="q", args={"n": 1}, state=JobState.Running, **timestamps)


def test_a_datetime_set_on_a_job_reads_as_a_utc_timestamp_string():
    at = datetime(2026, 1, 1, 14, 0, tzinfo=PLUS_TWO)
    job = a_job(created_at=at, run_at=at)
    assert isinstance(job.created_at, Timestamp) and isinstance(job.created_at, str)
    assert job.created_at == "2026-01-01T12:00:00+00:00"
    assert job.created_at == at and job.created_at.tzinfo == UTC
    assert job.created_at is job.created_at  # made once, kept
    assert (job.run_at - job.created_at) == timedelta(0)


def test_the_runtime_reads_the_plain_datetime_without_a_timestamp_made():
    at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    job = a_job(attempted_at=at)
    assert job.__dict__["attempted_at"] is at  # nothing built yet
    assert job_datetime(job, "attempted_at") is at
    assert job_datetime(job, "created_at") is None
    str(job.attempted_at)  # a read makes the Timestamp ...
    plain = job_datetime(job, "attempted_at")  # ... and the runtime still gets a datetime
    assert type(plain) is datetime and plain == at


def test_every_way_of_setting_a_timestamp_reads_the_same():
    at = datetime(2026, 3, 1, 8, 30, tzinfo=UTC)
    job = a_job()
    assert all(getattr(job, name) is None for name in TIMESTAMP_FIELDS)
    job.finalized_at = at  # the runtime's assignment
    copied = dataclasses.replace(job, heartbeat_at=at)
    for value in (job.finalized_at, copied.finalized_at, copied.heartbeat_at,
                  pickle.loads(pickle.dumps(job)).finalized_at):
        assert isinstance(value, Timestamp) and value == at
    assert dataclasses.fields(Job)[0].name == "id"
    assert {f.name for f in dataclasses.fields(Job)} >= set(TIMESTAMP_FIELDS)
    assert next(f for f in dataclasses.fields(Job) if f.name == "run_at").default is None
