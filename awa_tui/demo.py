"""The demo: a small shop's background work, running for real, to look at.

    python3 dev.py demo [--duration SECONDS] [--workers N] [--no-tui]

Starts the embedded PostgreSQL when no ``DATABASE_URL`` is set, migrates,
then runs producers and a fleet of worker processes whose jobs behave like
production ones: fast emails, slow reports with progress, flaky payments
(retries), poison uploads (fail every attempt, end in the DLQ), addresses
that fail terminally, crawls that hang past their deadline (rescued), and
now and then a worker process is SIGKILLed and replaced (its jobs are
rescued once their heartbeats go stale).  The terminal shows the TUI when
``awa_tui`` is installed and stdout is a terminal (else live queue stats),
until ``q`` / Ctrl-C or ``--duration`` seconds.

Every worker serves ``/metrics`` and so does a database-side exporter
(``awa-ops exporter``); the demo writes a ready ``prometheus.yml`` for them.
On exit it says whether the embedded PostgreSQL is still running and how to
stop it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import awa
from awa import config, db

if TYPE_CHECKING:  # rich is imported where the screen is drawn
    from rich.console import Group

# Intervals short enough that rescues happen while you watch.
WORKER_SETTINGS: dict[str, Any] = {
    "poll_interval_ms": 200,
    "heartbeat_interval_ms": 1_000,
    "heartbeat_staleness_ms": 6_000,
    "heartbeat_rescue_interval_ms": 2_000,
    "deadline_rescue_interval_ms": 2_000,
    "callback_rescue_interval_ms": 5_000,
    "promote_interval_ms": 250,
    "leader_election_interval_ms": 2_000,
    "snapshot_interval_ms": 2_000,
    "deadline_drop_grace_ms": 1_000,
}
QUEUES: list[dict[str, Any]] = [
    {"name": "email", "max_workers": 16},
    {"name": "reports", "max_workers": 4},
    {"name": "payments", "max_workers": 8},
    {"name": "imports", "max_workers": 4, "dlq_enabled": True},
    {"name": "crawler", "max_workers": 2, "deadline_duration_ms": 4_000},
]
CHAOS_EVERY_S = (20.0, 40.0)  # a worker is SIGKILLed this often
RESTART_AFTER_S = 3.0
METRICS_HOST = "127.0.0.1"
METRICS_ADDR_ENV = "AWA_DEMO_METRICS_ADDR"  # where a worker process serves /metrics


# --- the application's jobs -----------------------------------------------------
@dataclass
class SendEmail:
    to: str
    subject: str


@dataclass
class BuildReport:
    report: str
    pages: int = 10


@dataclass
class ChargeCard:
    order_id: int
    cents: int


@dataclass
class ParseUpload:
    filename: str


@dataclass
class ValidateAddress:
    street: str
    country: str


@dataclass
class CrawlSite:
    url: str


def build_client(database_url: str | None = None) -> awa.AsyncClient:
    client = awa.AsyncClient(database_url)

    @client.task(SendEmail, queue="email")
    async def send_email(job: awa.Job[SendEmail]) -> None:
        await asyncio.sleep(random.uniform(0.005, 0.05))

    @client.task(BuildReport, queue="reports")
    async def build_report(job: awa.Job[BuildReport]) -> Any:
        for page in range(job.args.pages):
            if job.is_cancelled():  # shutdown or an operator: come back later
                return awa.RetryAfter(5)
            await asyncio.sleep(random.uniform(0.2, 0.6))
            job.set_progress(100 * (page + 1) / job.args.pages,
                             f"page {page + 1} of {job.args.pages}")
        return None

    @client.task(ChargeCard, queue="payments")
    async def charge_card(job: awa.Job[ChargeCard]) -> None:
        await asyncio.sleep(random.uniform(0.05, 0.2))
        if job.attempt <= 2 and random.random() < 0.5:
            raise ConnectionError("payment gateway timed out")

    @client.task(ParseUpload, queue="imports")
    def parse_upload(job: awa.Job[ParseUpload]) -> None:  # a plain def: thread pool
        time.sleep(0.05)
        raise ValueError(f"{job.args.filename}: unexpected byte 0xff at offset 1337")

    @client.task(ValidateAddress, queue="imports")
    async def validate_address(job: awa.Job[ValidateAddress]) -> None:
        await asyncio.sleep(0.02)
        if job.args.country not in ("DE", "FR", "GB", "US"):
            raise awa.TerminalError(f"unsupported country {job.args.country!r}")

    @client.task(CrawlSite, queue="crawler")
    async def crawl_site(job: awa.Job[CrawlSite]) -> None:
        if random.random() < 0.5:
            await asyncio.sleep(3600)  # hangs past the queue's 4 s deadline
        await asyncio.sleep(random.uniform(0.5, 1.5))

    return client


# --- a worker process of the fleet ------------------------------------------------
async def _stop_when_orphaned(stop: asyncio.Event) -> None:
    """A demo worker lives only as long as the demo that started it: when the demo is
    killed outright (no SIGTERM for its fleet), the worker is re-parented and stops too."""
    parent = os.getppid()
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(1.0)


async def worker_main() -> None:
    client = build_client()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    endpoint = None
    if os.environ.get(METRICS_ADDR_ENV):
        from awa.telemetry import serve_prometheus
        endpoint = serve_prometheus(os.environ[METRICS_ADDR_ENV])
    await client.start(QUEUES, **WORKER_SETTINGS)
    watcher = asyncio.create_task(_stop_when_orphaned(stop))
    await stop.wait()
    watcher.cancel()
    await client.shutdown(3_000)
    await client.close()
    if endpoint is not None:
        endpoint.close()


# --- producers ----------------------------------------------------------------------
async def produce(client: awa.AsyncClient, stop: threading.Event, counters: dict[str, int]) -> None:
    countries = ["DE", "FR", "GB", "US", "US", "XX"]
    n = 0
    while not stop.is_set():
        n += 1
        emails = [SendEmail(f"user{n}-{i}@example.com", "Your order shipped")
                  for i in range(random.randint(5, 25))]
        await client.insert_many(emails, queue="email")
        counters["inserted"] += len(emails)
        if n % 5 == 0:
            await client.insert(BuildReport(f"sales-{n}", pages=random.randint(5, 12)),
                                queue="reports")
            counters["inserted"] += 1
        if n % 2 == 0:
            await client.insert(ChargeCard(n, random.randint(100, 99_999)), queue="payments",
                                max_attempts=5)
            counters["inserted"] += 1
        if n % 15 == 0:
            await client.insert(ParseUpload(f"upload-{n}.csv"), queue="imports", max_attempts=3)
            counters["inserted"] += 1
        if n % 3 == 0:
            await client.insert(ValidateAddress("1 Main St", random.choice(countries)),
                                queue="imports")
            counters["inserted"] += 1
        if n % 10 == 0:
            await client.insert(CrawlSite(f"https://example.com/{n}"), queue="crawler",
                                max_attempts=2)
            counters["inserted"] += 1
        await asyncio.sleep(0.5)


# --- the fleet ---------------------------------------------------------------------
def free_ports(n: int, host: str = METRICS_HOST) -> list[int]:
    """``n`` ports nothing listens on now (the machine may be shared: no fixed ports)."""
    sockets = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class Fleet:
    database_url: str
    size: int
    log_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    kills: int = 0
    events: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)  # one /metrics port per worker slot
    port_of: dict[int, int] = field(default_factory=dict)  # pid -> its port

    def spawn(self) -> subprocess.Popen[bytes]:
        taken = {self.port_of.get(p.pid) for p in self.procs}
        port = next((p for p in self.ports if p not in taken), None)
        env = {**os.environ, "DATABASE_URL": self.database_url}
        if port is not None:  # a replacement takes over the killed worker's port
            env[METRICS_ADDR_ENV] = f"{METRICS_HOST}:{port}"
        # The child keeps its own copy of the log descriptor; ours closes once it has started.
        with open(self.log_dir / f"worker-{len(self.procs) + self.kills}.log", "a") as log:
            proc = subprocess.Popen([sys.executable, "-m", "awa_tui.demo", "--worker-process"],
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
        if port is not None:
            self.port_of[proc.pid] = port
        return proc

    def start(self) -> None:
        self.procs = []
        for _ in range(self.size):
            self.procs.append(self.spawn())

    def note(self, text: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {text}")
        del self.events[:-5]

    def chaos(self) -> None:
        """SIGKILL a random worker; a replacement starts a little later."""
        victim = random.choice(self.procs)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.kills += 1
        self.note(f"SIGKILLed worker pid {victim.pid}; its running jobs will be rescued")
        self.procs.remove(victim)
        self.port_of.pop(victim.pid, None)

    def refill(self) -> None:
        while len(self.procs) < self.size:
            proc = self.spawn()
            self.procs.append(proc)
            self.note(f"started replacement worker pid {proc.pid}")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_exporter(database_url: str, port: int, log_dir: Path) -> subprocess.Popen[bytes]:
    """The database-side exporter (`awa-ops exporter`): metrics that outlive every worker."""
    with open(log_dir / "exporter.log", "a") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "awa_ops.cli", "exporter", "--database-url", database_url,
             "--listen", f"{METRICS_HOST}:{port}",
             "--heartbeat-staleness", str(WORKER_SETTINGS["heartbeat_staleness_ms"] / 1000)],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=_terminate_with_parent)


def _terminate_with_parent() -> None:
    """In the exporter child (started by the demo's main thread): SIGTERM when the demo
    dies, however it dies, so a killed demo leaves no exporter behind (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


def write_prometheus_config(path: Path, worker_ports: list[int], exporter_port: int) -> Path:
    """A prometheus.yml scraping the demo's workers and its exporter, ready to run."""
    workers = ", ".join(f"'{METRICS_HOST}:{p}'" for p in worker_ports)
    path.write_text(
        "# Written by the awa demo: prometheus --config.file=" + str(path) + "\n"
        "global:\n"
        "  scrape_interval: 5s\n"
        "  evaluation_interval: 5s\n"
        "scrape_configs:\n"
        "  - job_name: awa-workers\n"
        f"    static_configs:\n      - targets: [{workers}]\n"
        "  - job_name: awa-exporter\n"
        f"    static_configs:\n      - targets: ['{METRICS_HOST}:{exporter_port}']\n")
    return path


def embedded_server_status() -> str:
    """Whether the embedded PostgreSQL outlives the demo, and the exact way to stop it."""
    data_dir = db.embedded_data_dir()
    pid_file = data_dir / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return f"the embedded PostgreSQL ({data_dir}) is not running."
    return (f"the embedded PostgreSQL is still running (pid {pid}, data in {data_dir}), so the "
            f"next demo starts fast. Stop it with: kill -INT {pid}   (a fast, clean shutdown; "
            f"`awa` has no command for it)")


def background(client_url: str, fleet: Fleet, stop: threading.Event,
               counters: dict[str, int]) -> None:
    """Producers and chaos, on their own loop (the main thread draws the screen)."""
    async def run() -> None:
        client = build_client(client_url)
        producer = asyncio.create_task(produce(client, stop, counters))
        next_kill = time.monotonic() + random.uniform(8.0, 15.0)  # the first one comes early
        restart_at: float | None = None
        try:
            while not stop.is_set():
                await asyncio.sleep(0.2)
                now = time.monotonic()
                if now >= next_kill and fleet.size > 1:
                    fleet.chaos()
                    restart_at = now + RESTART_AFTER_S
                    next_kill = now + random.uniform(*CHAOS_EVERY_S)
                if restart_at is not None and now >= restart_at:
                    fleet.refill()
                    restart_at = None
                if producer.done():
                    producer.result()
        finally:
            producer.cancel()
            try:
                await producer
            except (asyncio.CancelledError, Exception):  # its error was shown already
                pass
            await client.close()

    asyncio.run(run())


# --- the screen ---------------------------------------------------------------------
def stats_table(client: awa.Client, fleet: Fleet, counters: dict[str, int],
                started: float) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="awa demo -- queue stats (Ctrl-C to stop)")
    for col in ("queue", "avail", "run", "sched", "retry", "wait", "failed", "done/1h",
                "lag s", "paused"):
        table.add_column(col, justify="right" if col != "queue" else "left")
    for s in client.queue_stats():
        table.add_row(s.queue, str(s.available), str(s.running), str(s.scheduled),
                      str(s.retryable), str(s.waiting_external), str(s.failed),
                      str(s.completed_last_hour),
                      "" if s.lag_seconds is None else f"{s.lag_seconds:.1f}",
                      "yes" if s.paused else "")
    dlq = client.dlq_depth()
    alive = sum(1 for p in fleet.procs if p.poll() is None)
    info = Text(f"up {time.monotonic() - started:.0f}s · workers {alive}/{fleet.size} · "
                f"kills {fleet.kills} · inserted {counters['inserted']} · DLQ {dlq} · "
                f"logs {fleet.log_dir}")
    return Group(table, info, *(Text(e, style="yellow") for e in fleet.events))


def print_piped(table: Callable[[], Any], started: float, duration: float | None) -> None:
    """Stats for a pipe or a log file: a live display redraws in place, which a pipe cannot
    show (it would print nothing until the end), so a whole table is printed every
    ``DEMO_PIPED_EVERY_S``, and once more at the end."""
    from rich.console import Console

    console = Console(width=120)
    printed = 0.0
    try:
        while duration is None or time.monotonic() - started < duration:
            if time.monotonic() - printed >= config.DEMO_PIPED_EVERY_S:
                console.print(table())
                sys.stdout.flush()
                printed = time.monotonic()
            time.sleep(min(1.0, config.DEMO_PIPED_EVERY_S))
    finally:
        console.print(table())
        sys.stdout.flush()


def tui_available() -> bool:
    """The console needs the tui extra (installed by dev.py) and a terminal."""
    from awa import extras
    return not extras.missing_modules("tui") and sys.stdout.isatty()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m awa_tui.demo",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=None,
                        help="stop by itself after this many seconds")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--no-tui", action="store_true",
                        help="print live queue stats even when the TUI is available")
    parser.add_argument("--database-url", default=None, help="default: $DATABASE_URL, else "
                        "the embedded PostgreSQL")
    parser.add_argument("--worker-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_process:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        asyncio.run(worker_main())
        return 0
    if args.workers < 1:
        parser.error("--workers must be at least 1")

    try:
        url = db.resolve_database_url(args.database_url)
        print(f"database: {db.redact(url)} ({db.describe_source(args.database_url)})",
              flush=True)
        client = awa.Client(url)
        client.migrate()
    except awa.AwaError as exc:
        print(f"error: {db.one_line(exc)}", file=sys.stderr)
        return 1

    log_dir = Path(tempfile.mkdtemp(prefix="awa-demo-"))
    *worker_ports, exporter_port = free_ports(args.workers + 1)
    fleet = Fleet(url, args.workers, log_dir, ports=worker_ports)
    fleet.start()
    exporter = start_exporter(url, exporter_port, log_dir)
    prometheus = write_prometheus_config(log_dir / "prometheus.yml", worker_ports, exporter_port)
    worker_urls = ", ".join(f"http://{METRICS_HOST}:{p}/metrics" for p in worker_ports)
    print(f"metrics: workers on {worker_urls}"
          f"; exporter on http://{METRICS_HOST}:{exporter_port}/metrics", flush=True)
    print(f"prometheus: prometheus --config.file={prometheus}", flush=True)
    stop = threading.Event()
    counters = {"inserted": 0}
    producer_thread = threading.Thread(target=background, args=(url, fleet, stop, counters),
                                       name="awa-demo-producers", daemon=True)
    producer_thread.start()
    started = time.monotonic()
    try:
        if not args.no_tui and tui_available():
            from awa_tui.app import run_app
            # Staleness: each worker's own, as its snapshot publishes it.
            run_app(url, exit_after_s=args.duration)
        elif sys.stdout.isatty():
            from rich.live import Live
            with Live(stats_table(client, fleet, counters, started), refresh_per_second=2,
                      transient=False) as live:
                while args.duration is None or time.monotonic() - started < args.duration:
                    time.sleep(1.0)
                    live.update(stats_table(client, fleet, counters, started))
        else:
            print_piped(lambda: stats_table(client, fleet, counters, started), started,
                        args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping producers, workers and the exporter ...", flush=True)
        stop.set()
        producer_thread.join(timeout=10)
        fleet.stop()
        exporter.terminate()
        try:
            exporter.wait(timeout=10)
        except subprocess.TimeoutExpired:
            exporter.kill()
        client.close()
    print(f"done: {counters['inserted']} jobs inserted, {fleet.kills} worker(s) killed; "
          f"worker logs and prometheus.yml in {log_dir}")
    if args.database_url is None and not os.environ.get(db.DATABASE_URL_ENV):
        print(embedded_server_status())
    else:
        print(f"the database ({db.redact(url)}) is yours: the demo leaves it as it is.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
