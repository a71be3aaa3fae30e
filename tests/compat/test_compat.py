"""The differential suite: every scenario of scenarios.py under awa-pg 0.6.9 and under ours.

Each side runs all scenarios in one subprocess (runner.py) on its own fresh
database, migrated by that side; then the rows each scenario left in its own
queue of ``awa.jobs`` are read back.  A scenario passes when the summaries and
the rows agree.  A difference named in docs/compat.md (a deliberate one, with
its reason) is reported as xfail; any other difference fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from awa import config, storage
from compat import scenarios
from support.awa_pg import awa_pg_python
from support.rust_awa import as_url
from support.server_connections import ConnectionBudget

HERE = Path(__file__).parent
RUNNER = HERE / "runner.py"
COMPAT_DOC = HERE.parent.parent / "docs" / "compat.md"

# One worker runs them all: compat_results runs every scenario on both sides once per process.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compat")]

ROWS = """
SELECT queue, kind, state::text AS state, priority, attempt, max_attempts, args, metadata, tags,
       progress, run_at > now() AS future, finalized_at IS NOT NULL AS finalized,
       jsonb_array_length(to_jsonb(COALESCE(errors, '{}'))) AS errors
  FROM awa.jobs ORDER BY id"""
# Our side is laid out for the engine under test (the runner's own migrate() keeps it).
ENGINE = os.environ.get("AWA_TEST_ENGINE") or config.DEFAULT_STORAGE_ENGINE


def _admin(admin_url: str, sql: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql)


def _run_side(python: str, url: str) -> tuple[dict[str, Any], dict[str, list[Any]], str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL")}
    proc = subprocess.run([python, str(RUNNER), url], capture_output=True, text=True,
                          timeout=600, cwd=str(HERE), env=env)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AssertionError(f"{python} runner failed:\n{proc.stderr[-4000:]}")
    rows: dict[str, list[Any]] = {}
    with psycopg.connect(url, row_factory=dict_row) as conn:
        for row in conn.execute(ROWS):
            rows.setdefault(row.pop("queue"), []).append(row)
    return json.loads(proc.stdout), rows, proc.stderr


@pytest.fixture(scope="session")
def compat_results(admin_url: str, connection_budget: ConnectionBudget) -> Any:
    reference = str(awa_pg_python())
    names = [f"awa_compat_{os.getpid()}_ref", f"awa_compat_{os.getpid()}_ours"]
    for n in names:
        _admin(admin_url, f"DROP DATABASE IF EXISTS {n} WITH (FORCE)")
        _admin(admin_url, f"CREATE DATABASE {n}")
    urls = [as_url(make_conninfo(admin_url, dbname=n)) for n in names]  # awa-pg takes URLs
    with psycopg.connect(urls[1], autocommit=True) as conn:
        storage.migrate_sync(conn, ENGINE)
    try:
        # Both sides' runners at once: 26 connections at the most (measured, with
        # run_deadline_and_aging_zero's own databases), 30 reserved.
        with connection_budget.reserve(30), ThreadPoolExecutor(2) as pool:
            ref = pool.submit(_run_side, reference, urls[0])
            ours = pool.submit(_run_side, sys.executable, urls[1])
            results = ref.result(), ours.result()
        yield results
    finally:
        # The scenarios' own databases too (unmigrated_database's, the queue-storage one of
        # run_deadline_and_aging_zero): the reference client can still hold a connection.
        for n in names + [f"{n}{suffix}" for n in names for suffix in ("_empty", "_qs")]:
            _admin(admin_url, f"DROP DATABASE IF EXISTS {n} WITH (FORCE)")


def same(want: Any, got: Any) -> bool:
    """Equal, except that a raised exception matches when ours is an instance of the
    reference's class (``raised:`` strings carry each side's class and bases)."""
    if isinstance(want, str) and want.startswith("raised:") and isinstance(got, str) \
            and got.startswith("raised:"):
        return want[7:].split(",")[0] in got[7:].split(",")
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(same(want[k], got[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(same(a, b) for a, b in zip(want, got))
    return bool(want == got)


def _documented() -> set[str]:
    text = COMPAT_DOC.read_text() if COMPAT_DOC.exists() else ""
    return set(re.findall(r"`([A-Za-z][A-Za-z0-9_]*)`", text))


@pytest.mark.parametrize("name", list(scenarios.REGISTRY))
def test_scenario(name: str, compat_results: Any) -> None:
    (ref, ref_rows, _), (ours, our_rows, _) = compat_results
    queue = "c_" + name[:40]
    want = {"result": ref.get(name, "MISSING"), "rows": json.loads(json.dumps(
        ref_rows.get(queue, []), default=str))}
    got = {"result": ours.get(name, "MISSING"), "rows": json.loads(json.dumps(
        our_rows.get(queue, []), default=str))}
    if same(want, got):
        return
    if name in _documented():
        pytest.xfail(f"deliberate difference, see docs/compat.md: {name}")
    assert got == want
