"""What metrics cost: the throughput benchmark with metrics off and on (issue 8).

    .venv/bin/python benchmarks/metrics_cost.py                      # W=256, N=20000, 3 rounds
    .venv/bin/python benchmarks/metrics_cost.py --workers 256 --jobs 20000 --rounds 3

Reuses benchmarks/throughput.py (its worker, enqueue and measurement) and
only changes how the worker process is started:

* off -- no OpenTelemetry SDK installed: every ``awa.instruments.METRICS`` update lands on
  OTel's no-op proxy (what an application without an exporter pays);
* on  -- the worker serves ``/metrics`` (``serve_prometheus``, as
  ``awa worker --metrics-addr`` does) and this process scrapes it every
  second during the run, like a Prometheus server would.

Rounds alternate off/on so drift on the shared machine hits both alike; the
report is the median per mode and the cost = 1 - on/off of processed jobs/s
(issue 18 targets at W = 256: cost <= 5 %, worker CPU per job on <= 1.1 x off;
before the pre-aggregated instruments it was 19.8 % and 33 -> 54 us per job).
With claims recorded per batch and awa.job.in_flight counted at collection,
three runs on the shared 2-core machine (load average 1.9-4.3) gave worker CPU
per job 1.04 x, 1.01 x, 1.07 x and a throughput cost of 9.7 %, -8.6 %, 14.0 %:
the off/on ranges overlap in every run, so the throughput number is noise there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading

import _support
import httpx
import throughput  # benchmarks/throughput.py, the runtime engineer's

import awa
from awa import telemetry
from awa.telemetry import parse_listen_address

METRICS_ADDR_ENV = "AWA_BENCH_METRICS_ADDR"


def worker_process(url: str, workers: int, claim_batch: int) -> None:
    """throughput.worker_main, with the Prometheus endpoint up when metrics are on."""
    addr = os.environ.get(METRICS_ADDR_ENV)
    if addr:
        telemetry.serve_prometheus(addr)
    asyncio.run(throughput.worker_main(url, workers, claim_batch, None))


def start_worker_with(addr: str | None):
    """A replacement for throughput.start_worker that runs worker_process above."""

    def start_worker(url: str, workers: int, claim_batch: int, profile: str | None):
        env = {**os.environ}
        env.pop(METRICS_ADDR_ENV, None)
        if addr:
            env[METRICS_ADDR_ENV] = addr
        return throughput.spawn_worker([sys.executable, __file__, "--worker-process", url,
                                        str(workers), str(claim_batch)], env=env)

    return start_worker


class Scraper(threading.Thread):
    """Scrapes /metrics once a second, as Prometheus would, and keeps the last body."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.scrapes, self.last = url, threading.Event(), 0, ""

    def run(self) -> None:
        # One client for the whole run, as a Prometheus server keeps its scrape loop: a
        # fresh httpx.get() builds a TLS context each time (~20 ms of this process's CPU,
        # 2 % of a core at 1 Hz, taken from the worker on a 2-core machine).
        with httpx.Client(timeout=5) as client:
            while not self.stop.wait(1.0):
                try:
                    self.last = client.get(self.url).text
                    self.scrapes += 1
                except httpx.HTTPError:
                    pass


def measure(mode: str, n: int, workers: int, claim_batch: int, port: int) -> dict:
    """One throughput run (its own fresh database, the default engine) with metrics ``mode``."""
    addr = f"127.0.0.1:{port}" if mode == "on" else None
    throughput.start_worker = start_worker_with(addr)
    scraper = None
    if addr:
        host, port = parse_listen_address(addr)
        scraper = Scraper(f"http://{host}:{port}/metrics")
        scraper.start()
    try:
        result = throughput.run_throughput(None, n, workers, claim_batch, None)
    finally:
        if scraper:
            scraper.stop.set()
            scraper.join()
    if scraper:
        completed = [line for line in scraper.last.splitlines()
                     if line.startswith("awa_job_completed_total")]
        assert scraper.scrapes > 0 and completed, "metrics were on but nothing was scraped"
        result["scrapes"] = scraper.scrapes
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker-process":
        worker_process(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claim-batch", type=int, default=awa.config.CLAIM_BATCH_SIZE)
    args = parser.parse_args()
    port = _support.free_port()
    results: dict[str, list[dict]] = {"off": [], "on": []}
    print(f"N={args.jobs} no-op jobs, W={args.workers}, {args.rounds} rounds alternating "
          f"off/on; machine: {os.cpu_count()} cores (shared while measuring); "
          f"load average {_load()}")
    print(f"{'round':>5} {'metrics':>7} {'processed/s':>12} {'CPU ms/job':>11} "
          f"{'pickup p50':>11}")
    for i in range(args.rounds):
        for mode in ("off", "on"):
            r = measure(mode, args.jobs, args.workers, args.claim_batch, port)
            results[mode].append(r)
            print(f"{i + 1:>5} {mode:>7} {r['processed_per_s']:>12.0f} "
                  f"{r['cpu_ms_per_job']:>11.3f} {r['pickup_p50_ms']:>9.1f}ms", flush=True)
    off = statistics.median(r["processed_per_s"] for r in results["off"])
    on = statistics.median(r["processed_per_s"] for r in results["on"])
    cpu_off = statistics.median(r["cpu_ms_per_job"] for r in results["off"])
    cpu_on = statistics.median(r["cpu_ms_per_job"] for r in results["on"])

    def spread(mode: str) -> str:
        values = [r["processed_per_s"] for r in results[mode]]
        return f"{min(values):.0f}-{max(values):.0f}"

    print(f"\nmedian processed/s: off {off:.0f} ({spread('off')}), on {on:.0f} ({spread('on')})"
          f"\nthroughput cost of metrics: {100 * (1 - on / off):.1f} % (target <= 5 %; a "
          f"negative cost is run-to-run noise)"
          f"\nworker CPU per job: off {1000 * cpu_off:.0f} us, on {1000 * cpu_on:.0f} us "
          f"({cpu_on / cpu_off:.2f} x, target <= 1.1 x; "
          f"{1000 * (cpu_on - cpu_off):+.0f} us per job for recording and scrapes)"
          f"\nload average at the end: {_load()}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
