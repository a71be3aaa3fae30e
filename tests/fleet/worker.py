"""An awa-pg 0.6.9 worker process for the fleet harness (runs in the awa-pg venv, not ours).

    python worker.py DATABASE_URL NAME [SLOTS] [RESCUE_MS] [ZERO_DEADLINE_SLOTS] [ROTATE_MS]

Serves queue ``work``: ``slow`` jobs sleep ``args.seconds`` (the Rust runtime
heartbeats them), ``boom`` jobs raise the same error on every attempt.  Short
intervals (heartbeat 0.5 s, staleness 3 s, election 1 s) so a harness sees a
death and a failover in seconds; stale-heartbeat rescue runs every RESCUE_MS
(default 120 s), so a dead worker's attempts stay visible until its runtime
is seen gone (2 of its 10 s snapshot intervals).  Prints ``running <id>``
per job it starts: the harness's ground truth of who runs what.  SIGTERM shuts down cleanly.
With ZERO_DEADLINE_SLOTS it also serves queue ``zd`` with ``deadline_duration_ms=0``, which
0.6.9 claims through its compact ledger (``lease_claim_batches``) and completes through
``receipt_completion_batches``: ``zslow`` jobs sleep like ``slow``, ``zfast`` ones return.
ROTATE_MS sets the queue ring's rotation interval (0.6.9's default 1 s): at the latest when
the ring comes round to a slot again (16 rotations), its terminal rows are folded into
``queue_terminal_rollups``, so a longer interval gives a harness time to read them first.
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


@dataclass
class ZFast:
    n: int = 0


async def main(url: str, name: str, slots: int, rescue_ms: int, zero_slots: int,
               rotate_ms: int) -> None:
    client = awa.AsyncClient(url, max_connections=10)

    @client.worker(Slow, kind="slow", queue="work")
    async def slow(job):  # noqa: ANN001 -- awa-pg hands a Job[Slow]
        print(f"running {job.id}", flush=True)  # the harness's ground truth: who runs what
        await asyncio.sleep(job.args.seconds)

    @client.worker(Boom, kind="boom", queue="work")
    async def boom(job):  # noqa: ANN001 -- awa-pg hands a Job[Boom]
        raise RuntimeError("poison: the payment gateway rejected the card")

    queues: list = [("work", slots)]
    if zero_slots:
        @client.worker(Slow, kind="zslow", queue="zd")
        async def zslow(job):  # noqa: ANN001 -- awa-pg hands a Job[Slow]
            print(f"running {job.id}", flush=True)
            await asyncio.sleep(job.args.seconds)

        @client.worker(ZFast, kind="zfast", queue="zd")
        async def zfast(job):  # noqa: ANN001 -- awa-pg hands a Job[ZFast]
            return None

        queues = [{"name": "work", "max_workers": slots},
                  {"name": "zd", "max_workers": zero_slots, "deadline_duration_ms": 0}]
    await client.start(queues, poll_interval_ms=100, heartbeat_interval_ms=500,
                       heartbeat_staleness_ms=3000, heartbeat_rescue_interval_ms=rescue_ms,
                       leader_election_interval_ms=1000,
                       queue_storage_queue_rotate_interval_ms=rotate_ms or 1_000)  # its default
    print(f"worker {name} started", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await client.shutdown(2000)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2,
                     int(sys.argv[4]) if len(sys.argv) > 4 else 120_000,
                     int(sys.argv[5]) if len(sys.argv) > 5 else 0,
                     int(sys.argv[6]) if len(sys.argv) > 6 else 0))
