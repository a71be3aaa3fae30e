"""Lay out a database with awa-pg 0.6.9 and leave jobs in every state (runs in the awa-pg venv).

    python populate.py DATABASE_URL canonical|queue_storage
    python populate.py DATABASE_URL drain N     (after `awa adopt --abort`)

Migrates with 0.6.9 (``install_queue_storage`` for queue storage), declares a
cron schedule and descriptors, inserts, and runs a 0.6.9 worker on queue
``adopt_run`` until that queue holds a completed, a retryable (retry in an
hour), failed, waiting_external (callback timeout an hour away) and running
(handler asleep, progress set) job.  Queue ``adopt_hold`` has no worker:
available jobs, one scheduled an hour ahead, one cancelled, one holding a
unique claim; queue ``adopt_paused`` is paused.  On queue storage one failed
job is moved to the DLQ.  Prints one JSON line with the job ids by role, then
``ready``, and keeps the worker running (the harness SIGKILLs it: its running attempts are orphans).

``drain N``: a 0.6.9 worker on ``adopt_hold`` runs ``drain`` jobs until N of
them are completed, prints ``drained <ids>`` and shuts down cleanly (a
database given back by ``awa adopt --abort`` is 0.6.9's again).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import awa

RUN, HOLD, FAST = "adopt_run", "adopt_hold", "adopt_fast"


@dataclass
class Work:
    n: int = 0


async def main(url: str, engine: str) -> None:
    await awa.migrate(url)
    client = awa.AsyncClient(url)
    if engine == "queue_storage":
        await client.install_queue_storage()

    @client.task(Work, kind="ok", queue=RUN)
    async def ok(job):  # noqa: ANN001 -- awa-pg hands a Job[Work]
        return None

    @client.task(Work, kind="flaky", queue=RUN)
    async def flaky(job):  # noqa: ANN001
        return awa.RetryAfter(3600)

    @client.task(Work, kind="term", queue=RUN)
    async def term(job):  # noqa: ANN001
        raise awa.TerminalError("the card was declined for good")

    @client.task(Work, kind="wait", queue=RUN)
    async def wait(job):  # noqa: ANN001
        token = await job.register_callback(timeout_seconds=3600)
        return awa.WaitForCallback(token)

    @client.task(Work, kind="hang", queue=RUN)
    async def hang(job):  # noqa: ANN001
        print(f"running {job.id}", flush=True)
        job.set_progress(40, "halfway there")
        await job.flush_progress()
        await asyncio.sleep(3600)

    @client.task(Work, kind="hang_fast", queue=FAST)
    async def hang_fast(job):  # noqa: ANN001 -- claimed with deadline 0: a compact claim
        await asyncio.sleep(3600)

    client.periodic("adopt_nightly", "0 3 * * *", Work, Work(7), queue=HOLD,
                    tags=["nightly"])
    client.queue_descriptor(RUN, display_name="Adopted run queue", owner="payments")
    client.job_kind_descriptor("ok", description="always succeeds")

    ids: dict[str, list[int]] = {}

    async def put(role: str, kind: str, queue: str, n: int = 0, **opts: Any) -> int:
        job = await client.insert(Work(n), kind=kind, queue=queue,
                                  tags=[role], metadata={"role": role}, **opts)
        ids.setdefault(role, []).append(job.id)
        return int(job.id)

    for i in range(5):
        await put("available", "drain", HOLD, i, priority=1 + i % 4)
    await put("scheduled", "drain", HOLD, 9,
              run_at=datetime.now(UTC) + timedelta(hours=1))
    await client.cancel(await put("cancelled", "drain", HOLD, 10))
    await put("unique", "drain", HOLD, 11, unique_opts={"by_args": True})
    for role, kind, n in (("completed", "ok", 1), ("retryable", "flaky", 1),
                          ("failed", "term", 3), ("waiting", "wait", 1),
                          ("running", "hang", 2)):
        for i in range(n):
            await put(role, kind, RUN, i, max_attempts=5)
    await put("running", "hang_fast", FAST, 0, max_attempts=5)

    await client.start([{"name": RUN, "max_workers": 8},
                        {"name": FAST, "max_workers": 2, "deadline_duration_ms": 0}],
                       poll_interval_ms=100, heartbeat_interval_ms=500,
                       leader_election_interval_ms=1000)

    async def settled() -> bool:
        want = {"completed": awa.JobState.Completed, "retryable": awa.JobState.Retryable,
                "failed": awa.JobState.Failed, "waiting": awa.JobState.WaitingExternal,
                "running": awa.JobState.Running}
        for role, state in want.items():
            for job_id in ids[role]:
                job = await client.get_job(job_id)
                if job is None or job.state != state:
                    return False
        return True

    for _ in range(300):
        if await settled():
            break
        await asyncio.sleep(0.1)
    else:
        raise SystemExit("jobs did not settle")
    await client.pause_queue("adopt_paused", "ops")  # a queue_meta row
    if engine == "queue_storage":
        dead = ids["failed"][0]
        await client.move_failed_to_dlq(dead, "poison")
        ids["dlq"] = [dead]
        ids["failed"].remove(dead)
    print(json.dumps(ids), flush=True)
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await client.shutdown(2000)


async def drain(url: str, n: int) -> None:
    client = awa.AsyncClient(url)
    ran: list[int] = []

    @client.task(Work, kind="drain", queue=HOLD)
    async def run(job):  # noqa: ANN001
        ran.append(int(job.id))

    await client.start([(HOLD, 4)], poll_interval_ms=100, leader_election_interval_ms=1000)
    for _ in range(600):
        if len(ran) >= n:
            break
        await asyncio.sleep(0.1)
    await client.shutdown(2000)
    print("drained " + json.dumps(sorted(ran)), flush=True)


if __name__ == "__main__":
    if sys.argv[2] == "drain":
        asyncio.run(drain(sys.argv[1], int(sys.argv[3])))
    else:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
