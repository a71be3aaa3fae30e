"""A worker application for crash and multi-process tests, run as a subprocess.

    python tests/support/worker_app.py          (tests use support.processes.start_worker)

Configured by environment variables:

* ``AWA_WORKER_DATABASE_URL`` -- the database (required);
* ``AWA_WORKER_QUEUES``       -- ``name:max_workers,...`` (default ``default:8``);
* ``AWA_WORKER_SETTINGS``     -- JSON object of extra ``client.start()`` keyword
  arguments (short intervals, ``global_max_workers``, ``dlq_enabled_by_default``;
  queue dicts may be given as ``{"queues": [...]}`` here instead, and
  ``shutdown_timeout_ms`` for the graceful shutdown on SIGTERM);
* ``AWA_WORKER_PERIODIC``     -- JSON list of ``{"name", "cron_expr", "kind", "queue"}``:
  schedules this worker declares (``client.periodic``), stored when it starts;
* ``AWA_WORKER_LOG_DIR``      -- when set, every handler appends
  ``start|done <kind> <id> <attempt> <run_lease> <unix time>`` lines to ``<dir>/<pid>.log``.

Handler kinds (args are plain dicts; insert with ``kind=...``):

``fast``        returns at once
``sleep``       ``{"ms": n}``: awaits n milliseconds, then returns (chaos runs)
``slow``        ``{"seconds": s}``: sleeps in 50 ms steps with progress; returns Cancel
                when cancelled
``slow_sync``   ``{"seconds": s}``: a plain def that blocks in ``time.sleep``
``hang``        awaits forever, ignoring cancellation flags
``hang_sync``   ``{"seconds": s}``: blocks the thread, ignoring cancellation
``crash``       SIGKILLs its own process (a poison job)
``fail``        ``{"message": m}``: raises RuntimeError every attempt
``terminal``    raises awa.TerminalError
``flaky``       ``{"fail_times": n}``: raises until attempt > n, then completes
``retry_after`` ``{"seconds": s}``: returns RetryAfter(s)
``snooze``      ``{"seconds": s}``: snoozes once, completes on the next run
``await_callback`` ``{"timeout": s}``: registers a callback with that timeout and parks
                in waiting_external (nobody ever resolves it)
``cancel_aware`` runs until ``is_cancelled()``, then keeps going ``{"linger": s}``
                seconds and returns (its late completion must be ignored)

On start it prints ``READY pid=<pid> instance=<uuid>`` on stdout; SIGTERM or
SIGINT shut it down gracefully (exit status 0).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import awa  # noqa: E402

LOG_DIR = os.environ.get("AWA_WORKER_LOG_DIR")
_log_file = None


def log_line(word: str, job: awa.Job) -> None:
    global _log_file
    if not LOG_DIR:
        return
    if _log_file is None:
        # Held open for the worker process's lifetime, line-buffered: no `with` block.
        _log_file = open(  # noqa: SIM115 - see above
            os.path.join(LOG_DIR, f"{os.getpid()}.log"), "a", buffering=1)
    _log_file.write(f"{word} {job.kind} {job.id} {job.attempt} {job.run_lease} {time.time():.3f}\n")


# The ``logged`` kind's own record of what ran, written through a pool of the worker's
# own (not the runtime's): a handler that does a database write per job, as most do.
EXECUTION_LOG_TABLE = ("CREATE TABLE IF NOT EXISTS chaos_execution_log "
                       "(job_id bigint NOT NULL, run_lease bigint NOT NULL, pid int NOT NULL, "
                       "at timestamptz NOT NULL DEFAULT clock_timestamp())")
EXECUTION_LOG_INSERT = ("INSERT INTO chaos_execution_log (job_id, run_lease, pid) "
                        "VALUES (%s, %s, %s)")
_log_pool = None


def log_pool():
    global _log_pool
    if _log_pool is None:
        from psycopg_pool import AsyncConnectionPool

        _log_pool = AsyncConnectionPool(os.environ["AWA_WORKER_DATABASE_URL"], min_size=4,
                                        max_size=8, kwargs={"autocommit": True}, open=False)
    return _log_pool


def build_client(database_url: str) -> awa.AsyncClient:
    client = awa.AsyncClient(database_url)

    def handler(kind: str):
        return client.task(dict, kind=kind)

    @handler("fast")
    async def fast(job):
        log_line("start", job)
        log_line("done", job)

    @handler("logged")
    async def logged(job):
        log_line("start", job)
        async with log_pool().connection() as conn:
            await conn.execute(EXECUTION_LOG_INSERT, (job.id, job.run_lease, os.getpid()))
        log_line("done", job)

    @handler("sleep")
    async def sleep(job):
        log_line("start", job)
        await asyncio.sleep(float(job.args.get("ms", 10)) / 1000)
        log_line("done", job)

    @handler("slow")
    async def slow(job):
        log_line("start", job)
        seconds = float(job.args.get("seconds", 1.0))
        steps = max(int(seconds / 0.05), 1)
        for i in range(steps):
            if job.is_cancelled():
                log_line("cancelled", job)
                return awa.Cancel("stopped on request")
            await asyncio.sleep(seconds / steps)
            job.set_progress(100.0 * (i + 1) / steps, f"step {i + 1}/{steps}")
        log_line("done", job)

    @handler("slow_sync")
    def slow_sync(job):
        log_line("start", job)
        time.sleep(float(job.args.get("seconds", 1.0)))
        log_line("done", job)

    @handler("hang")
    async def hang(job):
        log_line("start", job)
        while True:
            await asyncio.sleep(3600)

    @handler("hang_sync")
    def hang_sync(job):
        log_line("start", job)
        time.sleep(float(job.args.get("seconds", 3600.0)))
        log_line("done", job)

    @handler("crash")
    async def crash(job):
        log_line("start", job)
        os.kill(os.getpid(), signal.SIGKILL)

    @handler("fail")
    async def fail(job):
        log_line("start", job)
        raise RuntimeError(job.args.get("message", "always fails"))

    @handler("terminal")
    async def terminal(job):
        log_line("start", job)
        raise awa.TerminalError(job.args.get("message", "cannot ever succeed"))

    @handler("flaky")
    async def flaky(job):
        log_line("start", job)
        if job.attempt <= int(job.args.get("fail_times", 1)):
            raise RuntimeError(f"flaky failure on attempt {job.attempt}")
        log_line("done", job)

    @handler("retry_after")
    async def retry_after(job):
        log_line("start", job)
        return awa.RetryAfter(float(job.args.get("seconds", 0.1)))

    @handler("snooze")
    async def snooze(job):
        log_line("start", job)
        if not job.metadata.get("snoozed"):
            job.update_metadata({"snoozed": True})
            return awa.Snooze(float(job.args.get("seconds", 0.1)))
        log_line("done", job)

    @handler("await_callback")
    async def await_callback(job):
        log_line("start", job)
        token = await job.register_callback(timeout_seconds=float(job.args.get("timeout", 60)))
        return awa.WaitForCallback(token)

    @handler("cancel_aware")
    async def cancel_aware(job):
        log_line("start", job)
        while not job.is_cancelled():
            await asyncio.sleep(0.01)
        log_line("cancelled", job)
        await asyncio.sleep(float(job.args.get("linger", 0.2)))
        log_line("done", job)

    return client


def parse_queues(text: str) -> list[tuple[str, int]]:
    out = []
    for part in text.split(","):
        name, _, n = part.strip().partition(":")
        out.append((name, int(n or 8)))
    return out


async def main() -> int:
    database_url = os.environ["AWA_WORKER_DATABASE_URL"]
    settings = json.loads(os.environ.get("AWA_WORKER_SETTINGS") or "{}")
    shutdown_ms = int(settings.pop("shutdown_timeout_ms", 5000))
    queues = settings.pop("queues", None) or parse_queues(
        os.environ.get("AWA_WORKER_QUEUES", "default:8"))
    client = build_client(database_url)
    for p in json.loads(os.environ.get("AWA_WORKER_PERIODIC") or "[]"):
        client.periodic(p["name"], p["cron_expr"], dict, {}, kind=p["kind"],
                        queue=p.get("queue", "default"))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if LOG_DIR:
        await log_pool().open()
        async with log_pool().connection() as conn:
            await conn.execute(EXECUTION_LOG_TABLE)
    # Every handler is on "default"; a test runs it on the queues it names (as `awa worker
    # --queue` does), so the handlers' own queue need not be among them.
    await client.start(queues, only_these_queues=True, **settings)
    print(f"READY pid={os.getpid()} instance={client.runtime.instance_id}", flush=True)
    await stop.wait()
    await client.shutdown(shutdown_ms)
    await client.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
