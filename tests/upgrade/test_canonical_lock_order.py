"""Canonical's batch writes lock their rows in the order of their id arrays, whatever plan
the UPDATE gets: the locking subquery is kept whole (``OFFSET 0``), so its lateral probe
runs in the arrays' order inside it.  Flattened into the UPDATE, the probe followed the join
that fed it, and one worker's completion and heartbeat (both sorted) deadlocked under load
(benchmarks/engine_switch.py, the server log naming both statements)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from awa.storage.canonical import CanonicalEngine, execution
from awa.storage.engine import AttemptWrite
from support.arrange import plain_batch

ONE = [AttemptWrite(1, 1)]
STATEMENTS = {
    "complete": (execution.COMPLETE_JOBS, ([1], [1])),
    "complete with progress": (execution.COMPLETE_JOBS_WITH_PROGRESS,
                               execution._progress_params(ONE)),
    "heartbeat": (execution.HEARTBEAT_JOBS, execution._progress_params(ONE)),
    "flush progress": (execution.FLUSH_PROGRESS, execution._progress_params(ONE)),
}


def _find(node: dict[str, Any], pred) -> list[dict[str, Any]]:
    found = [node] if pred(node) else []
    for child in node.get("Plans", []):
        found += _find(child, pred)
    return found


@pytest.mark.engine("canonical")
@pytest.mark.parametrize("name", sorted(STATEMENTS))
@pytest.mark.parametrize("plans", ["force_custom_plan", "force_generic_plan"])
def test_the_rows_are_locked_inside_the_batch_subquery(name, plans, db):
    statement, params = STATEMENTS[name]
    db.execute("SET plan_cache_mode = " + plans)
    # Enough running rows that scanning them could feed the join.
    CanonicalEngine().insert_batch_sync(db, plain_batch("k", "q", 2000), returning=False)
    db.execute("UPDATE awa.jobs SET state = 'running', run_lease = 1, heartbeat_at = now() "
               "WHERE queue = 'q'")
    db.execute("ANALYZE awa.jobs_hot")
    row = db.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    plan = (row["QUERY PLAN"] if isinstance(row["QUERY PLAN"], list)
            else json.loads(row["QUERY PLAN"]))[0]["Plan"]
    batches = _find(plan, lambda n: n.get("Node Type") == "Subquery Scan"
                    and n.get("Alias") == "u")
    assert len(batches) == 1, json.dumps(plan)[:2000]
    inside = batches[0]
    assert _find(inside, lambda n: n.get("Node Type") == "LockRows")
    assert _find(inside, lambda n: n.get("Node Type") == "Function Scan")
