"""The shared core's written-out statements still say what the Python constants they were
built from say: a statement in a .sql file cannot follow a change of those constants, so
these check that it did (no database needed)."""

from __future__ import annotations

import re

from awa.job import JOB_COLUMNS
from awa.statements import named_statements
from awa.storage.common.tables import CANONICAL_DEPTH_COUNTS, depth_states_by_table
from awa.storage.engine import BATCH_OPERATION_COLUMNS


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]


def test_canonical_depth_counts_count_the_depth_states_in_their_tables() -> None:
    hot, deferred = (re.findall(r"'(\w+)'", states) for states in
                     re.findall(r"state IN \(([^)]*)\)", CANONICAL_DEPTH_COUNTS))
    split = depth_states_by_table()
    assert (hot, deferred) == (split["hot_states"], split["deferred_states"])


def test_batch_operation_statements_select_the_columns_their_rows_are_built_from() -> None:
    statements = named_statements("awa.storage.common", "sql/batch_operations.sql")
    [jobs] = re.findall(r"SELECT (.*?)\s+FROM awa\.jobs j", statements["preview_sample"], re.S)
    assert _names(jobs) == [f"j.{c}" for c in JOB_COLUMNS]
    for name in ("insert_op", "list_ops", "get_op", "cancel_op", "next_active", "finish"):
        [columns] = re.findall(r"(?:SELECT|RETURNING) ((?:\w+,\s*)+\w+)\s*(?:FROM|$)",
                               statements[name])
        assert _names(columns) == list(BATCH_OPERATION_COLUMNS), name
