"""The canonical engine's statements are whole in ``awa/storage/canonical/sql/``; where one
writes out a shared definition of the engine-neutral core (the claim's columns, the enqueue
sources and unique-key rule, the job lists' columns, the queue statistics' rows, the
retention delete, the job columns), it must still say what the core says.  Each check folds
whitespace and looks for the core's text inside the named statement."""

from __future__ import annotations

import re

import pytest

from awa.job import JOB_COLUMNS
from awa.statements import named_statements
from awa.storage.common import admin, adopt, claims, enqueue, maintenance, reads, tables
from awa.storage.common.batch_operations import ORIGINAL_PRIORITY_KEY, ORIGINAL_QUEUE_KEY

FILES = ("admin", "adopt", "batch_operations", "callbacks", "cron_admin", "enqueue",
         "execution", "maintenance", "reads")


def fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def statement(file: str, name: str) -> str:
    return fold(named_statements("awa.storage.canonical", f"sql/{file}.sql")[name])


_GENERAL = enqueue.KEPT_ROWS
WRITTEN_OUT = [
    ("execution", "claim_jobs", f"RETURNING {claims.claim_select('j')}"),
    *[("enqueue", name, enqueue.UNNEST_SOURCE)
      for name in ("plain_insert_returning", "plain_insert_count")],
    *[("enqueue", name, _GENERAL.format(source=enqueue.UNNEST_SOURCE))
      for name in ("general_insert_returning", "general_insert_count")],
    ("enqueue", "staged_plain_returning", enqueue.STAGING_SOURCE),
    *[("enqueue", name, _GENERAL.format(source=enqueue.STAGING_SOURCE))
      for name in ("staged_general_returning", "staged_general_count")],
    ("admin", "queue_stats", tables.CANONICAL_DEPTH_COUNTS),
    ("admin", "queue_stats", admin.QUEUE_STATS_ROWS),
    *[("reads", name, part) for name in ("jobs_hot_newest", "scheduled_jobs_newest",
                                         "jobs_hot_list", "scheduled_jobs_list")
      for part in (reads.JOB_LIST_COLUMNS, reads.ARGS_MATCH)],
    ("reads", "recently_completed", reads.HOT_RECENTLY_COMPLETED),
    *[("adopt", name, part) for name in ("adopt_hot", "adopt_deferred")
      for part in (f"({adopt.COLUMNS})", f"SELECT {adopt.SELECT} FROM {{stage}}.jobs")],
    ("maintenance", "delete_finalized_default", maintenance.delete_batch(
        "awa.jobs_hot", "id", maintenance.FINALIZED_AGED + maintenance.NOT_OVERRIDDEN)),
    ("maintenance", "delete_finalized_queue", maintenance.delete_batch(
        "awa.jobs_hot", "id", maintenance.FINALIZED_AGED + maintenance.IN_QUEUE)),
    *[("batch_operations", name, f"'{ORIGINAL_PRIORITY_KEY}'")
      for name in ("set_priority_available", "set_priority_scheduled", "move_queue_available",
                   "move_queue_scheduled")],
    *[("batch_operations", name, f"'{ORIGINAL_QUEUE_KEY}'")
      for name in ("move_queue_available", "move_queue_scheduled")],
]


@pytest.mark.parametrize(("file", "name", "core"), WRITTEN_OUT,
                         ids=[f"{f}.{n}" for f, n, _ in WRITTEN_OUT])
def test_a_written_out_definition_says_what_the_core_says(file, name, core):
    assert fold(core) in statement(file, name)


_INSERT = re.compile(
    r"INSERT INTO awa\.(jobs_hot|scheduled_jobs|dlq_entries) \(((?:job_)?id, [^)]*)\)")


def test_every_full_row_insert_names_the_job_columns():
    """A move between the tables writes every job column (a list with ``run_lease``; enqueue
    writes a few): the lists are ``JOB_COLUMNS``."""
    seen = 0
    for file in FILES:
        for name, text in named_statements("awa.storage.canonical", f"sql/{file}.sql").items():
            for table, columns in _INSERT.findall(fold(text)):
                listed = [c.strip() for c in columns.split(",")]
                if "run_lease" not in listed:
                    continue
                if table == "dlq_entries":
                    assert listed[0] == "job_id", name
                    assert listed[-3:] == ["dlq_reason", "dlq_at", "original_run_lease"], name
                    listed = ["id", *listed[1:-3]]
                assert listed == list(JOB_COLUMNS), (file, name)
                seen += 1
    assert seen >= 15
