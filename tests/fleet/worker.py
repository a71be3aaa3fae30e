"""An awa-pg 0.6.9 worker process for the fleet harness (runs in the awa-pg venv, not ours).

    python worker.py DATABASE_URL NAME [SLOTS] [RESCUE_MS]

Serves queue ``work``: ``slow`` jobs sleep ``args.seconds`` (the Rust runtime
heartbeats them), ``boom`` jobs raise the same error on every attempt.  Short
intervals (heartbeat 0.5 s, staleness 3 s, election 1 s) so a harness sees a
death and a failover in seconds; stale-heartbeat rescue runs every RESCUE_MS
(default 120 s), so a dead worker's attempts stay visible until its runtime
is seen gone (2 of its 10 s snapshot intervals).  Prints ``running <id>``
per job it starts: the harness's ground truth of who runs what.  SIGTERM shuts down cleanly.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass

import awa


@dataclass
class Slow:
    seconds: float = 60.0


@dataclass
class Boom:
    n: int = 0


async def main(url: str, name: str, slots: int, rescue_ms: int) -> None:
    client = awa.AsyncClient(url, max_connections=10)

    @client.worker(Slow, kind="slow", queue="work")
    async def slow(job):  # noqa: ANN001 -- awa-pg hands a Job[Slow]
        print(f"running {job.id}", flush=True)  # the harness's ground truth: who runs what
        await asyncio.sleep(job.args.seconds)

    @client.worker(Boom, kind="boom", queue="work")
    async def boom(job):  # noqa: ANN001 -- awa-pg hands a Job[Boom]
        raise RuntimeError("poison: the payment gateway rejected the card")

    await client.start([("work", slots)], poll_interval_ms=100, heartbeat_interval_ms=500,
                       heartbeat_staleness_ms=3000, heartbeat_rescue_interval_ms=rescue_ms,
                       leader_election_interval_ms=1000)
    print(f"worker {name} started", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await client.shutdown(2000)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2,
                     int(sys.argv[4]) if len(sys.argv) > 4 else 120_000))
