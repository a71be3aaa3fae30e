"""A worker or a producer of one release, for rolling-upgrade runs (tests/upgrade/rolling.py).

    python tests/upgrade/fleet_app.py worker URL LOG_DIR TAG SLOTS
    python tests/upgrade/fleet_app.py producer URL FIRST COUNT RATE

Run by any release's python: it uses only the API every release has (``AsyncClient``,
``task``, ``start``, ``shutdown``, ``enqueue_many_copy``), and its directory holds no ``awa``,
so ``import awa`` is that release's.  The worker's handler (kind ``roll``, args ``{"n": n}``)
appends ``<job id> <n> <attempt> <run_lease> <outcome> <tag> <pid> <unix time>`` to
``LOG_DIR/exec-<tag>-<pid>.log`` (the execution log) at the start of every run.  By ``n``
it takes every way an attempt ends: one in 20 raises on its first attempt, one retries
(``RetryAfter``), one snoozes once, and one in 100 runs 300 ms reporting progress (its
attempt materializes); the rest return at once.  Every job ends completed, each by one ``ok`` run.
awa's log records of WARNING and above go to stderr, which the run keeps per process and
counts.  The worker prints ``READY`` once started; SIGTERM drains it (exit status 0).  The
producer COPYs jobs ``FIRST..FIRST+COUNT-1`` at about RATE jobs a second, in batches of 10 (a
worker never waits long for the next), then prints ``ENQUEUED <count>``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

import awa


async def worker(url: str, log_dir: str, tag: str, slots: int) -> int:
    # A small pool (4 + its listeners and leader session): the test server is shared.
    client = awa.AsyncClient(url, 4)
    log = open(os.path.join(log_dir, f"exec-{tag}-{os.getpid()}.log"), "a",  # noqa: SIM115
               buffering=1)  # held for the process's life, a line per write

    # its own queue, named: a release that checks the handlers' queues against the ones it
    # starts (0.6.9's rule, since 0.2.0) finds them equal, and every release accepts it
    @client.task(dict, kind="roll", queue="roll")
    async def roll(job):  # untyped: it runs on any release's awa
        n = int(job.args["n"])
        outcome = "ok"
        if n % 20 == 0 and job.attempt == 1:
            outcome = "raise"
        elif n % 20 == 5 and job.attempt == 1:
            outcome = "retry"
        elif n % 20 == 10 and not job.metadata.get("snoozed"):
            outcome = "snooze"
        log.write(f"{job.id} {n} {job.attempt} {job.run_lease} {outcome} {tag} "
                  f"{os.getpid()} {time.time():.4f}\n")
        if n % 100 == 15:  # a longer job reporting progress: its attempt materializes
            for step in range(6):
                job.set_progress(step * 20.0, "working")
                await asyncio.sleep(0.05)
        else:
            await asyncio.sleep(0.002)
        if outcome == "raise":
            raise RuntimeError("planned failure on the first attempt")
        if outcome == "retry":
            return awa.RetryAfter(0.05)
        if outcome == "snooze":
            job.update_metadata({"snoozed": True})
            return awa.Snooze(0.05)
        return None

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await client.start([("roll", slots)], poll_interval_ms=100, heartbeat_interval_ms=200,
                       snapshot_interval_ms=500, leader_election_interval_ms=300,
                       heartbeat_rescue_interval_ms=500, deadline_rescue_interval_ms=500,
                       callback_rescue_interval_ms=500, promote_interval_ms=100)
    print("READY", flush=True)
    await stop.wait()
    await client.shutdown(10_000)
    await client.close()
    return 0


async def producer(url: str, first: int, count: int, rate: float) -> int:
    client = awa.AsyncClient(url, 2)
    done, batch = 0, 10
    started = time.monotonic()
    while done < count:
        size = min(batch, count - done)
        await client.enqueue_many_copy([{"n": first + done + i} for i in range(size)],
                                       kind="roll", queue="roll")
        done += size
        ahead = started + done / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
    await client.close()
    print(f"ENQUEUED {done}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if argv[:1] == ["worker"]:
        return asyncio.run(worker(argv[1], argv[2], argv[3], int(argv[4])))
    if argv[:1] == ["producer"]:
        return asyncio.run(producer(argv[1], int(argv[2]), int(argv[3]), float(argv[4])))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
