"""Queue storage in a schema of its own: `awa migrate --queue-storage-schema NAME`.

The layout's tables, sequences and functions go to NAME; the control surface
(``awa.jobs``, ``awa.queue_meta``, ``awa.runtime_storage_backends``, ...) stays
in ``awa``, and ``awa.active_queue_storage_schema()`` names NAME, so the
runtime and the ops tools find the tables there.  The conformance suite and
the ring tests run on such a layout too (``queue_storage@awa_qs``); this file
checks the surface around it: the CLI, where each object lands, the refusals,
and a real worker with the troubleshooting guide's queries.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

import awa
from awa.storage.queue_storage import schema

from .test_queue_storage_layout import GUIDE_BACKENDS, GUIDE_LEASES, GUIDE_RECEIPTS

AWA = str(Path(sys.executable).parent / "awa")
AWA_OPS = str(Path(sys.executable).parent / "awa-ops")
OWN = "awa_qs"
LAYOUT_TABLES = ("ready_entries", "ready_tombstones", "done_entries", "deferred_jobs", "leases",
                 "lease_claims", "lease_claim_closures", "lease_claim_closure_batches",
                 "attempt_state", "queue_enqueue_heads", "queue_claim_heads",
                 "queue_ring_state", "ready_entries_0", "lease_claims_0", "leases_0")
CONTROL_TABLES = ("queue_meta", "runtime_storage_backends", "job_unique_claims", "dlq_entries",
                  "cron_jobs", "runtime_instances")
WHERE_TABLES = """
SELECT n.nspname AS schema, c.relname AS name FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname IN ('awa', %s) AND c.relkind IN ('r', 'p', 'v')"""
WHERE_FUNCTIONS = """
SELECT n.nspname AS schema, p.proname AS name FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname IN ('awa', %s) AND p.proname LIKE 'qs\\_%%'"""


def awa_cmd(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run([AWA, "--database-url", url, *args], capture_output=True, text=True,
                          timeout=120, env=env)


def one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], done.stderr


def where(url: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Tables and qs_ functions by schema (awa and OWN)."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        tables: dict[str, set[str]] = {"awa": set(), OWN: set()}
        functions: dict[str, set[str]] = {"awa": set(), OWN: set()}
        for r in conn.execute(WHERE_TABLES, (OWN,)).fetchall():
            tables[r["schema"]].add(r["name"])
        for r in conn.execute(WHERE_FUNCTIONS, (OWN,)).fetchall():
            functions[r["schema"]].add(r["name"])
    return tables, functions


def test_migrate_lays_queue_storage_out_in_the_schema_it_is_given(empty_database_url):
    url = empty_database_url
    one_line_error(awa_cmd(url, "migrate", "--queue-storage-schema", "Not A Name"),
                   "not a plain lower-case identifier")
    one_line_error(awa_cmd(url, "migrate", "--queue-storage-schema", "pg_jobs"),
                   "PostgreSQL's own")
    one_line_error(awa_cmd(url, "migrate", "--engine", "canonical",
                           "--queue-storage-schema", OWN), "--engine queue_storage")
    done = awa_cmd(url, "migrate", "--queue-storage-schema", OWN)
    assert done.returncode == 0, done.stderr
    assert f"storage engine queue_storage (schema {OWN})" in done.stdout

    tables, functions = where(url)
    assert set(LAYOUT_TABLES) <= tables[OWN]
    assert not set(LAYOUT_TABLES) & tables["awa"]  # nothing of the layout left in awa
    assert {"jobs", *CONTROL_TABLES} <= tables["awa"]  # the control surface stays
    assert {"qs_claim", "qs_finalize_plain", "qs_slot"} <= functions[OWN]
    assert functions["awa"] == {"qs_layout_version"}
    # What in_schema moves (read from the files) is what landed in OWN, partitions aside.
    assert {re.sub(r"_\d+$", "", t) for t in tables[OWN]} | functions[OWN] \
        <= schema.layout_objects()
    with psycopg.connect(url, row_factory=dict_row) as conn:
        assert [(r["backend"], r["schema_name"]) for r in conn.execute(GUIDE_BACKENDS)] == [
            ("queue_storage", OWN)]
        assert conn.execute("SELECT awa.active_queue_storage_schema() AS s").fetchone() == {
            "s": OWN}

    # Later migrations keep the layout where it is; moving it is refused, nothing changes.
    again = awa_cmd(url, "migrate")
    assert again.returncode == 0 and f"queue_storage (schema {OWN})" in again.stdout
    one_line_error(awa_cmd(url, "migrate", "--queue-storage-schema", "elsewhere"),
                   f"is in schema '{OWN}', not 'elsewhere'")
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regnamespace('elsewhere')").fetchone() == (None,)
    assert where(url) == (tables, functions)
    shown = json.loads(awa_cmd(url, "db", "--json").stdout)
    assert (shown["engine"], shown["engine_schema"]) == ("queue_storage", OWN)


def test_the_installers_statements_carry_one_objects_digest():
    """sql/installer.sql writes the digest of installed objects out in three statements: the
    same text in each, or an install would never be found current."""
    digest = re.compile(r"SELECT md5\(string_agg.*?\) objects\)", re.DOTALL)
    found = [digest.findall(statement) for statement in
             (schema.INSTALLED, schema.RECORD_INSTALL, schema.RECORD_CONTRACT)]
    assert [len(f) for f in found] == [1, 1, 1]
    assert found[0] == found[1] == found[2]


@dataclass
class Quick:
    n: int


@dataclass
class Slow:
    n: int


@pytest.mark.parametrize("engine_name", [f"queue_storage@{OWN}"])
@pytest.mark.timeout(60)
async def test_a_worker_runs_jobs_on_it_and_the_guides_queries_find_them(database_url):
    release = asyncio.Event()
    started = asyncio.Event()
    client = awa.AsyncClient(database_url)

    @client.task(Quick)
    async def quick(job: awa.Job[Quick]) -> None:
        return None

    @client.task(Slow)
    async def slow(job: awa.Job[Slow]) -> None:
        started.set()
        await release.wait()

    try:
        await client.start([("default", 4)], poll_interval_ms=20)
        quick_ids = [j.id for j in await client.insert_many([Quick(i) for i in range(20)])]
        slow_job = await client.insert(Slow(1))
        await asyncio.wait_for(started.wait(), 20)
        async with await psycopg.AsyncConnection.connect(
                database_url, autocommit=True, row_factory=dict_row) as conn:
            # The guide's queries, {schema} replaced as it says.
            receipts = await (await conn.execute(
                GUIDE_RECEIPTS.replace("awa.lease", f"{OWN}.lease"))).fetchall()
            leases = await (await conn.execute(
                GUIDE_LEASES.replace("awa.lease", f"{OWN}.lease"))).fetchall()
            assert slow_job.id in {r["job_id"] for r in receipts + leases}
            # The quick jobs' completions are flushed in batches: wait for them.
            for _ in range(200):
                running = await (await conn.execute(
                    "SELECT id FROM awa.jobs WHERE state = 'running'")).fetchall()
                if [r["id"] for r in running] == [slow_job.id]:
                    break
                await asyncio.sleep(0.05)
            assert [r["id"] for r in running] == [slow_job.id]
        # The ops tools read it too: every check runs, and the running attempt is seen.
        ops = await asyncio.to_thread(subprocess.run, [
            AWA_OPS, "diagnose", "all", "--json", "--database-url", database_url],
            capture_output=True, text=True, timeout=120)
        assert ops.returncode in (0, 1, 2), ops.stderr
        assert "could not run" not in ops.stdout and "Traceback" not in ops.stderr
        summaries = {c["check"]: " ".join(f["summary"] for f in c["findings"])
                     for c in json.loads(ops.stdout)["checks"]}
        assert f"queue storage (schema {OWN})" in summaries["schema"]
        assert "1 running attempt" in summaries["stuck-running"]
        release.set()
        for _ in range(200):
            jobs = [await client.get_job(i) for i in [*quick_ids, slow_job.id]]
            if all(j.state is awa.JobState.Completed for j in jobs):
                break
            await asyncio.sleep(0.05)
        assert all(j.state is awa.JobState.Completed for j in jobs)
    finally:
        release.set()
        await client.shutdown()
        await client.close()
