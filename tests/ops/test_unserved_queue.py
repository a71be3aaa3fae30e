"""A queue whose only worker died while jobs wait (issue 46): every signal names it.

``awa health``, ``awa-ops diagnose runtime``, the exporter's ``awa_db_queue_unserved``, the
console's Overview and -- while another queue is still served -- none of them calls the
fleet healthy; the suggested commands name the queue, never a placeholder."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time

from awa_ops.console import ConsoleReader
from awa_ops.exporter import DatabaseCollector
from awa_ops.session import OpsSession
from ops.ops_helpers import FAST_FLAGS
from support.processes import start_worker


def _exporter_unserved(url: str) -> dict[str, float]:
    async def scrape():
        collector = DatabaseCollector(url)
        try:
            return await collector.scrape()
        finally:
            await collector.close()
    return {s.labels["awa_job_queue"]: s.value for family in asyncio.run(scrape())
            if family.name == "awa_db_queue_unserved" for s in family.samples}


def _overview_unserved(url: str) -> list[str]:
    async def read():
        session = await OpsSession.open(url, read_only=True)
        try:
            return (await ConsoleReader(session).overview()).unserved()
        finally:
            await session.close()
    return asyncio.run(read())


def _health(url: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "awa", "health", "--json", "--database-url", url],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def test_a_queue_whose_only_worker_died_is_named_by_every_signal(database_url, ops):
    import awa

    kept = start_worker(database_url, "default:2")
    only = start_worker(database_url, "long:2")
    try:
        # served: nothing to report yet
        assert _health(database_url)["queues_without_runtime"] == []
        only.kill()
        with awa.Client(database_url) as client:
            client.insert_many([{}] * 4, kind="fast", queue="long")
        deadline = time.monotonic() + 20
        while _health(database_url)["queues_without_runtime"] != ["long"]:
            assert time.monotonic() < deadline, "awa health never named the queue"
            time.sleep(0.2)

        runtime = ops("runtime", *FAST_FLAGS)
        assert runtime.code == 2, runtime.stdout
        found = [f for f in runtime.findings() if f["summary"].startswith("queue long:")]
        assert len(found) == 1, runtime.stdout
        assert "4 jobs waiting" in found[0]["summary"]
        assert "no live runtime serves it" in found[0]["summary"]
        assert "'long:N'" in found[0]["next_step"]
        # the default queue is served: it is not named
        assert not any("queue default" in f["summary"] for f in runtime.findings())

        descriptors = ops("descriptors", *FAST_FLAGS)
        for f in descriptors.findings():
            assert "retired-queue" not in (f["next_step"] or "")

        assert _exporter_unserved(database_url) == {"long": 1.0, "default": 0.0}
        assert _overview_unserved(database_url) == ["long"]

        # a worker for the queue comes back: every signal clears
        back = start_worker(database_url, "long:2")
        try:
            deadline = time.monotonic() + 20
            while _health(database_url)["queues_without_runtime"]:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert _exporter_unserved(database_url).get("long") == 0.0
            assert _overview_unserved(database_url) == []
            assert not any(f["summary"].startswith("queue long:")
                           for f in ops("runtime", *FAST_FLAGS).findings())
        finally:
            back.terminate() if hasattr(back, "terminate") else back.kill()
    finally:
        kept.kill()
        only.kill()


def test_next_steps_carry_the_url_as_given_and_run_as_printed(database_url, db, tmp_path):
    """A password in the URL stays in the printed command (a masked one cannot run): the
    test server trusts every login, so a made-up password still connects.  Each command a
    stale-descriptor finding prints runs, as printed, in a shell, and does what it says."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(database_url)
    with_password = (f"postgresql://{parts.get('user') or 'postgres'}:s3cret@"
                     f"{parts.get('host') or '127.0.0.1'}:{parts.get('port') or 5432}/"
                     f"{parts['dbname']}")
    db.execute("INSERT INTO awa.queue_descriptors (queue, descriptor_hash, last_seen_at) "
               "VALUES ('gone''s queue', 'h1', now() - interval '2 hours')")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    bin_dir = os.path.dirname(sys.executable)  # awa-ops and awa live beside this python
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    out = subprocess.run([sys.executable, "-m", "awa_ops.cli", "diagnose", "descriptors",
                          "--database-url", with_password, "--json"],
                         capture_output=True, text=True, env=env, timeout=60)
    step = json.loads(out.stdout)["findings"][0]["next_step"]
    assert "***" not in step and "retired-queue" not in step
    commands = [part.split(": ", 1)[1] if ": " in part.split(" ", 1)[0] + " " else part
                for part in step.split("; ")]
    commands = [c.split(": ", 1)[1] if c.startswith("if ") else c for c in commands]
    assert any(c.startswith("awa-ops diagnose runtime") for c in commands), step
    assert any(c.startswith("psql ") for c in commands), step
    for command in commands:
        assert with_password in shlex.split(command), command
        ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env,
                             timeout=60, cwd=tmp_path)
        assert ran.returncode in (0, 1, 2), (command, ran.stderr)
        assert "Traceback" not in ran.stderr
    # the DELETE it printed forgot exactly that descriptor
    assert db.execute("SELECT count(*) AS n FROM awa.queue_descriptors "
                      "WHERE queue = 'gone''s queue'").fetchone()["n"] == 0
