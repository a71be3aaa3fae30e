"""The checks on a queue-storage database laid out by the Rust core's own CLI.

`pip install awa-cli==0.6.9` into a separate virtual environment (cached under
~/.cache so repeated runs are fast), `awa migrate`, materialise the
queue-storage schema and route to it through the storage transition
commands, then run the checks against that real layout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from ops.ops_helpers import run_ops, summaries
from support.rust_awa import rust_awa, rust_awa_binary

QS_SCHEMA = "awa_qs"


@pytest.fixture(scope="session")
def awa_cli() -> Path:
    """The Rust-core CLI, installed once per machine under a file lock (parallel workers)."""
    return rust_awa_binary()


def route_to_queue_storage(binary: Path, url: str) -> dict:
    """Migrate, lay out the queue-storage schema and finalize the switch; the final status."""
    rust_awa(binary, url, "migrate")
    rust_awa(binary, url, "storage", "prepare-queue-storage-schema", "--schema", QS_SCHEMA)
    rust_awa(binary, url, "storage", "prepare", "--engine", "queue_storage",
             "--details", json.dumps({"schema": QS_SCHEMA}))
    rust_awa(binary, url, "storage", "enter-mixed-transition", "--quiesced")
    return json.loads(rust_awa(binary, url, "storage", "finalize"))


def insert_stale_lease(url: str) -> None:
    """Job 4711 of queue email: a materialized lease whose worker stopped heartbeating 5 min ago."""
    with psycopg.connect(url, autocommit=True) as conn:
        # The Rust core's layout, which no engine of ours writes (rust_core is read-only).
        conn.execute(f"""INSERT INTO {QS_SCHEMA}.leases (lease_slot, lease_generation, ready_slot,
                         ready_generation, job_id, queue, priority, lane_seq, heartbeat_at,
                         deadline_at, attempted_at)
                         VALUES (0, 0, 0, 0, 4711, 'email', 2, 1, now() - interval '5 minutes',
                                 now() + interval '1 minute', now() - interval '6 minutes')""")

def test_checks_run_on_a_queue_storage_database(awa_cli, empty_database_url, tmp_path):
    url = empty_database_url
    status = route_to_queue_storage(awa_cli, url)
    assert status["active_engine"] == "queue_storage"
    insert_stale_lease(url)

    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    results = {}
    for check in ("schema", "runtime", "stuck-running", "mvcc-horizon", "dead-tuples"):
        r = run_ops("diagnose", check, "--database-url", url, "--json", env=env)
        assert r.code != 3 and r.data["error"] is None, r.stdout + r.stderr
        assert r.data["engine"] == f"queue storage (schema {QS_SCHEMA})"
        results[check] = r

    assert "awa Rust core" in summaries(results["schema"].data)
    assert results["schema"].code == 0
    assert results["runtime"].code == 2  # no worker has ever run here
    stuck = results["stuck-running"].data["findings"][0]
    assert stuck["evidence"][0]["job_id"] == 4711 and stuck["evidence"][0]["class"] == "orphaned"
    assert results["mvcc-horizon"].code == 0
    tables = {row["relname"] for row in results["dead-tuples"].data["findings"][0]["evidence"]}
    assert {"attempt_state", "deferred_jobs", "leases_0"} <= tables

    every = run_ops("diagnose", "all", "--database-url", url, "--json", env=env)
    assert all(c["error"] is None for c in every.data["checks"]), every.stdout

    # The exporter reads the same layout: the stale lease shows up per queue.
    import asyncio

    from awa_ops.exporter import DatabaseCollector

    async def scrape():
        collector = DatabaseCollector(url)
        try:
            return {s.name: s for f in await collector.scrape() for s in f.samples
                    if not s.labels or s.labels.get("awa_job_queue") in (None, "email")}
        finally:
            await collector.close()

    samples = asyncio.run(scrape())
    assert samples["awa_db_exporter_scrape_success"].value == 1.0
    assert samples["awa_db_running_heartbeat_stale"].value == 1.0
    assert samples["awa_db_running_oldest_heartbeat_age_seconds"].value > 250


def test_queues_known_from_their_history_on_the_rust_core_layout(awa_cli, empty_database_url):
    """0.6.9's terminal rows and compact completion batches name their queues (issue 33):
    the read-only engine finds them (a probe per slot and queue), and the exporter lists
    them with depth 0; a batch finalized outside the window does not count."""
    import asyncio

    from awa.storage.rust_core import RustCoreEngine
    from awa_ops.exporter import DatabaseCollector

    url = empty_database_url
    route_to_queue_storage(awa_cli, url)
    with psycopg.connect(url, autocommit=True) as conn:
        # The Rust core's layout, which no engine of ours writes (rust_core is read-only).
        conn.execute(f"""INSERT INTO {QS_SCHEMA}.done_entries (ready_slot, ready_generation,
                         job_id, kind, queue, priority, lane_seq)
                         VALUES (3, 0, 4712, 'fast', 'drained', 2, 1)""")
        for queue, age in (("long_ago", "2 hours"), ("compact", "1 second")):
            conn.execute(f"""INSERT INTO {QS_SCHEMA}.receipt_completion_batches (ready_slot,
                             ready_generation, claim_slot, queue, priority, completed_count,
                             job_ids, run_leases, lane_seqs, attempts, attempted_ats,
                             finalized_at)
                             VALUES (5, 0, 0, %s, 2, 1, ARRAY[4713], ARRAY[1::bigint],
                                     ARRAY[1::bigint], ARRAY[1::smallint], ARRAY[now()],
                                     now() - %s::interval)""", (queue, age))

    async def read() -> tuple[list[str], list[str], dict]:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            engine = RustCoreEngine(QS_SCHEMA)
            found = await engine.recently_completed_queues(conn, within_s=3600, limit=10)
            first = await engine.recently_completed_queues(conn, within_s=3600, limit=1)
        collector = DatabaseCollector(url)
        try:
            families = {f.name: f for f in await collector.scrape()}
        finally:
            await collector.close()
        return found, first, {(s.labels["awa_job_queue"], s.labels["awa_job_state"]): s.value
                              for s in families["awa_db_queue_depth"].samples}

    found, first, depth = asyncio.run(read())
    assert found == ["compact", "drained"] and first == ["compact"]
    assert depth[("drained", "available")] == 0 and depth[("compact", "available")] == 0
    assert ("long_ago", "available") not in depth
