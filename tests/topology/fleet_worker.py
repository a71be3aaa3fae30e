"""One worker process of the PgBouncer fleet harness (tests/topology/fleet.py).

    python fleet_worker.py   (configured by the environment, see below)

* ``FLEET_DATABASE_URL``        -- where to connect (the pooler's URL);
* ``FLEET_DIRECT_DATABASE_URL`` -- optional: PostgreSQL itself, for LISTEN and the leader lock;
* ``FLEET_LOG_DIR``             -- the execution log: ``<dir>/<pid>.log``;
* ``FLEET_SLOTS``               -- workers of queue ``work`` (default 64);
* ``FLEET_CONNECTIONS``         -- the client's pool size (default 10);
* ``FLEET_CRON``                -- "1": declare the ``tick`` schedule (every minute).

Every handler appends to the execution log -- the harness's ground truth, not the
database: ``start <id> <run_lease> <t>`` / ``done <id> <run_lease> <t>`` around a
``work`` job (``args.ms`` milliseconds of await), ``cron <id> <slot> <t>`` for a
``tick``, and ``leader on|off <t>`` as this runtime gains or loses maintenance
leadership.  Prints ``READY <pid>`` once claiming; SIGTERM shuts down gracefully.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import awa  # noqa: E402 - the checkout's awa, found through ROOT above

# Short intervals: a death, a rescue and a failover within seconds.
SETTINGS: dict[str, Any] = {
    "poll_interval_ms": 50,
    "heartbeat_interval_ms": 500,
    "heartbeat_staleness_ms": 5_000,
    "heartbeat_rescue_interval_ms": 500,
    "deadline_rescue_interval_ms": 1_000,
    # 1 s: the leader pings its lock each second and is fenced off after 3 s without one
    # (config.LEADER_FENCE_PINGS); at 500 ms the fence was 1.5 s, and a loaded 2-core
    # machine starved a leader that long, handing leadership over mid-run.
    "leader_election_interval_ms": 1_000,
    "snapshot_interval_ms": 1_000,
    "promote_interval_ms": 200,
    "cron_eval_interval_ms": 500,
}

_log = open(os.path.join(os.environ["FLEET_LOG_DIR"], f"{os.getpid()}.log"), "a",  # noqa: SIM115 - open for the process's life
            buffering=1)


def record(*words: object) -> None:
    _log.write(" ".join(str(w) for w in (*words, time.time())) + "\n")


class _Leadership(logging.Handler):
    """Turns the maintenance service's leadership lines into execution-log lines."""

    def emit(self, record_: logging.LogRecord) -> None:
        text = record_.getMessage()
        if "is now the maintenance leader" in text:
            record("leader", "on")
        elif "is no longer the maintenance leader" in text:
            record("leader", "off")


async def main() -> None:
    maintenance_log = logging.getLogger("awa.maintenance")
    maintenance_log.setLevel(logging.INFO)
    maintenance_log.addHandler(_Leadership())
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    client = awa.AsyncClient(os.environ["FLEET_DATABASE_URL"],
                             max_connections=int(os.environ.get("FLEET_CONNECTIONS", "10")),
                             direct_database_url=os.environ.get("FLEET_DIRECT_DATABASE_URL"))

    @client.task(dict, kind="work", queue="work")
    async def work(job: awa.Job[Any]) -> None:
        record("start", job.id, job.run_lease)
        await asyncio.sleep(int(job.args.get("ms", 0)) / 1000)
        record("done", job.id, job.run_lease)

    @client.task(dict, kind="tick", queue="work")
    async def tick(job: awa.Job[Any]) -> None:
        record("cron", job.id, str(job.metadata.get("cron_slot")).replace(" ", "T"))

    if os.environ.get("FLEET_CRON") == "1":
        client.periodic("tick", "* * * * *", dict, {}, kind="tick", queue="work")
    await client.start([("work", int(os.environ.get("FLEET_SLOTS", "64")))], **SETTINGS)
    print(f"READY {os.getpid()}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await client.shutdown(5_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
