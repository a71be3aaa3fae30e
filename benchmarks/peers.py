"""Our two engines against the peers, on one workload, in one run (issue 32).

    .venv/bin/python benchmarks/peers.py                         # N=20000, W=64,256, 3 rounds
    .venv/bin/python benchmarks/peers.py --jobs 20000 --workers 64,256 --repeat 3 \\
        --systems canonical,queue_storage,awa-pg,pgqueuer
    (or: python3 dev.py bench benchmarks/peers.py ...)

The systems:

* ``canonical``, ``queue_storage`` -- this checkout's awa, on each storage engine;
* ``awa-pg`` -- awa-pg 0.6.9, the Rust core behind PyO3 (the venv tests/compat uses,
  ``~/.cache/awa-ops-tests/awa-pg-0.6.9``, made on first use as there);
* ``pgqueuer`` -- PgQueuer 1.6.0 on asyncpg, in a venv cached under
  ``~/.cache/awa-bench/peers/``, made on first use.

The workload, the same for each: one process (the system's python) starts a worker
with W concurrent no-op async handlers on a fresh database, then enqueues N jobs in
batches of 1000 through the system's bulk path (awa and awa-pg: ``enqueue_many_copy``,
COPY; PgQueuer: ``Queries.enqueue`` with arrays) while the worker is already claiming.
With ``--processes 2`` the worker runs in one process and the producer in another, both
under the system's python: the producer starts once the worker claims.  With
``--processes 0`` the producer runs alone, no worker anywhere: the enqueue path itself,
without a worker's share of the event loop and the server (W is shown as 0).  The default
runs the three layouts, one after the other.  Reported, on the machine's monotonic clock:

* enqueue jobs/s   -- N / the time the batches took (alongside the worker, if any);
* processed jobs/s -- N / (the N-th handler call - the first enqueue started);
* CPU ms/job       -- user+sys CPU of the process(es) (producer and worker) / N;
* server ms/job    -- CPU of the whole PostgreSQL server over the same span (the first
  enqueue to the N-th handler call, or to the last batch with no worker) / N, when the
  server runs on this machine (``-`` otherwise): the database's share, the same for every
  system (``_proc.server_cpu_s``);
* machine CPU ms/job -- the sum of the two: client process(es) plus the whole local
  server over the same span, per job (``-`` when the server's CPU is not measured);
* WAL bytes/job    -- the server's WAL written (``pg_current_wal_lsn()``) from just before
  the measured process(es) start to just after they exit, per job: the write volume each
  system's design costs (issue 48).  It counts the whole server, so only a run on an
  otherwise idle server means it; its start and shutdown are inside the span.

Each system keeps its defaults otherwise (awa: claim batch, flush interval,
maintenance on; PgQueuer: ``batch_size`` = W/2, the most it allows with
``max_concurrent_tasks`` = W, so its claims are not capped at its default 10).
Systems alternate within each W, the order reversed every other round (A B, B A:
``_support.alternation``); the end shows the medians and each system's rates round by
round against the first system's (``_support.paired_ratio``).
Every run gets a database of its own on the server of AWA_TEST_DATABASE_URL /
DATABASE_URL (else 127.0.0.1:5432), dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import fcntl
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from _proc import server_cpu_s  # benchmarks/, the script's own dir: stdlib only

QUEUE = "bench"
BATCH = 1_000
AWA_PG_VERSION = "0.6.9"
PGQUEUER_VERSION = "1.6.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
# The local server's postmaster pid, from the driver to the measured processes.
POSTMASTER_ENV = "AWA_BENCH_POSTMASTER"


@dataclasses.dataclass
class BenchNoop:
    """The job's args (kind ``bench_noop`` in awa and awa-pg alike)."""

    i: int = 0


# --- the measured process: one per run, under the system's python -----------------------
class Tally:
    """Counts handler calls; notes the moment the N-th one ran."""

    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.seen = 0
        self.done = asyncio.Event()
        self.finished_at = 0.0
        self.server_cpu_at_finish: float | None = None

    def hit(self) -> None:
        self.seen += 1
        if self.seen == self.expect:
            self.finished_at = time.monotonic()
            self.server_cpu_at_finish = _server_cpu()
            self.done.set()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _server_cpu() -> float | None:
    postmaster = os.environ.get(POSTMASTER_ENV)
    return server_cpu_s(int(postmaster)) if postmaster else None


# Each system's worker and producer, as coroutines; ``run_roles`` runs one or both in this
# process.  A worker prints READY once it claims; the times are time.monotonic(), one
# clock for every process of the machine, so two processes' times subtract.
@contextlib.asynccontextmanager
async def awa_runtime(url: str, workers: int, tally: Tally) -> AsyncIterator[None]:
    """awa (this checkout's) or awa-pg, the same client API: a runtime whose no-op handler
    counts in ``tally``, started, then shut down after the block."""
    import awa

    runtime = awa.AsyncClient(url)

    @runtime.task(BenchNoop, queue=QUEUE)
    async def noop(job: Any) -> None:
        tally.hit()

    await runtime.start([{"name": QUEUE, "max_workers": workers}])
    try:
        yield
    finally:
        await runtime.shutdown(5_000)
        await runtime.close()


async def awa_worker(url: str, n: int, workers: int, ready: asyncio.Event,
                     tally: Tally) -> None:
    async with awa_runtime(url, workers, tally):
        await asyncio.sleep(0.5)  # the runtime settles (leader, listeners) before the clock
        ready.set()
        await asyncio.wait_for(tally.done.wait(), 600)


async def awa_pg_activate(url: str) -> None:
    """awa-pg's COPY needs queue storage active, which its runtime's start makes it (as
    the worker process does in the other layouts): a runtime started and stopped before
    the clock, for the producer alone (nothing is enqueued yet, so it runs nothing)."""
    async with awa_runtime(url, 1, Tally(0)):
        pass


async def awa_producer(url: str) -> tuple[Callable[[int], Awaitable[None]],
                                         Callable[[], Awaitable[None]]]:
    """(send N jobs, close): connected before the clock starts."""
    import awa

    producer = awa.AsyncClient(url)
    await producer.health_check()  # connects before the clock starts

    async def send(n: int) -> None:
        for offset in range(0, n, BATCH):
            await producer.enqueue_many_copy(
                [BenchNoop(i) for i in range(offset, min(offset + BATCH, n))], queue=QUEUE)

    return send, producer.close


async def pgqueuer_install(url: str) -> None:
    import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information
    from pgqueuer import AsyncpgDriver, Queries  # type: ignore[import-not-found]  # its venv only

    install = await asyncpg.connect(url)
    await Queries(AsyncpgDriver(install)).install()
    await install.close()


async def pgqueuer_worker(url: str, n: int, workers: int, ready: asyncio.Event,
                          tally: Tally) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    worker_conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(worker_conn)))

    @qm.entrypoint("bench_noop")
    async def noop(job: Any) -> None:
        tally.hit()

    # PgQueuer wants max_concurrent_tasks >= 2 x batch_size.
    runner = asyncio.create_task(qm.run(batch_size=max(1, workers // 2),
                                        max_concurrent_tasks=workers))
    await asyncio.sleep(0.5)
    ready.set()
    waiting = asyncio.create_task(tally.done.wait())
    await asyncio.wait([waiting, runner], timeout=600, return_when=asyncio.FIRST_COMPLETED)
    if not tally.done.is_set():  # the worker ended (its error is raised here) or hung
        raise SystemExit(f"PgQueuer ran {tally.seen} of {n} jobs: "
                         f"{runner.exception() if runner.done() else 'timed out'}")
    qm.shutdown.set()
    await asyncio.wait_for(runner, 30)
    await worker_conn.close()


async def pgqueuer_producer(url: str) -> tuple[Callable[[int], Awaitable[None]],
                                              Callable[[], Awaitable[None]]]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    producer_conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(producer_conn))

    async def send(n: int) -> None:
        for offset in range(0, n, BATCH):
            size = min(BATCH, n - offset)
            payloads: list[bytes | None] = [json.dumps({"i": offset + k}).encode()
                                            for k in range(size)]
            await queries.enqueue(["bench_noop"] * size, payloads, [0] * size)

    return send, producer_conn.close


async def run_roles(system: str, role: str, url: str, n: int, workers: int) -> dict[str, float]:
    """``role``: ``both`` (producer and worker in this process), ``worker``, ``producer``
    (beside a worker process) or ``alone`` (the producer with no worker anywhere).
    The producer's part reports when it started and ended, the worker's when the N-th
    handler ran (and the server's CPU at those moments); each part the CPU this process
    spent from the producer's start."""
    pgqueuer = system == "pgqueuer"
    if pgqueuer and role != "producer":
        await pgqueuer_install(url)
    if system == "awa-pg" and role == "alone":
        await awa_pg_activate(url)
    out: dict[str, float] = {}
    tally, ready = Tally(n), asyncio.Event()
    worker = None
    if role in ("both", "worker"):
        worker = asyncio.create_task(
            (pgqueuer_worker if pgqueuer else awa_worker)(url, n, workers, ready, tally))
        await asyncio.wait([worker, asyncio.create_task(ready.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        if worker.done():
            worker.result()  # its error
    if role == "worker":
        print("READY", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # the producer process is about to start
    producing = role in ("both", "producer", "alone")
    if producing:
        send, close = await (pgqueuer_producer if pgqueuer else awa_producer)(url)
    cpu0, server0, started = _cpu(), _server_cpu(), time.monotonic()
    if producing:
        await send(n)
        out.update(started=started, enqueued=time.monotonic())
        server1 = _server_cpu()
        if server0 is not None and server1 is not None:
            out.update(server_started=server0, server_enqueued=server1)
        await close()
    if worker is not None:
        await worker
        out["finished"] = tally.finished_at
        if tally.server_cpu_at_finish is not None:
            out["server_finished"] = tally.server_cpu_at_finish
    out["cpu_s"] = _cpu() - cpu0
    return out


def measured_process(system: str, role: str, url: str, n: int, workers: int) -> None:
    """``--run``: one role of one run, its result printed as the last line (JSON)."""
    print(json.dumps(asyncio.run(run_roles(system, role, url, n, workers))), flush=True)


# --- the driver ---------------------------------------------------------------------------
def _cached_venv(name: str, packages: list[str]) -> str:
    """The python of a venv under ~/.cache/awa-bench/peers with ``packages`` installed,
    made once (a file lock keeps two benchmarks from making it at once)."""
    home = CACHE / "awa-bench" / "peers"
    venv = home / name
    marker = venv / ".installed"
    if not marker.exists():
        home.mkdir(parents=True, exist_ok=True)
        with open(home / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                print(f"installing {' '.join(packages)} into {venv} ...", flush=True)
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                with open(home / f"{name}.pip.log", "w") as log:
                    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install",
                                          "--quiet", "--disable-pip-version-check", *packages],
                                         stdout=log, stderr=subprocess.STDOUT, timeout=900)
                if pip.returncode != 0:
                    raise SystemExit(f"installing {packages} failed: see {log.name}")
                marker.touch()
    return str(venv / "bin" / "python")


def awa_pg_python() -> str:
    """awa-pg's venv, the one tests/compat and tests/fleet use (tests/support/awa_pg.py)."""
    from support import awa_pg  # tests/ is on sys.path (main)

    return str(awa_pg.awa_pg_python(AWA_PG_VERSION))


@dataclasses.dataclass
class System:
    name: str
    python: str
    engine: str | None  # our engines: the layout the driver migrates; None: the system's own
    env: dict[str, str]


def systems(names: list[str]) -> dict[str, System]:
    out: dict[str, System] = {}
    ours = {k: v for k, v in os.environ.items() if k != _support.CODE_ENV}
    # A peer's python must not import this checkout's awa (the benchmarks dir is on its
    # path as the script's own, the repository root is not).
    peer = {k: v for k, v in ours.items() if k != "PYTHONPATH"}
    for name in names:
        if name in ("canonical", "queue_storage"):
            out[name] = System(name, sys.executable, name, ours)
        elif name == "awa-pg":
            out[name] = System(name, awa_pg_python(), None, peer)
        elif name == "pgqueuer":
            out[name] = System(name, _cached_venv(
                f"pgqueuer-{PGQUEUER_VERSION}",
                [f"pgqueuer=={PGQUEUER_VERSION}", "asyncpg"]), None, peer)
        else:
            raise SystemExit(f"unknown system {name!r}: canonical, queue_storage, awa-pg, "
                             "pgqueuer")
    return out


def migrate_awa_pg(python: str, env: dict[str, str], url: str) -> None:
    """awa-pg lays out its own schema (``Client.migrate()``, the Rust core's migrations, as
    tests/compat/runner.py does)."""
    subprocess.run([python, "-c", "import sys, awa; c = awa.Client(sys.argv[1]); c.migrate(); "
                    "c.close()", url], check=True, env=env, cwd="/")


@contextlib.contextmanager
def database_for(system: System) -> Iterator[str]:
    """A fresh database for one run: laid out by this checkout for our engines, empty for
    a peer (which lays out its own schema); dropped however the run ends."""
    if system.engine is not None:
        with _support.scratch_database("awa_bench_peers", system.engine) as url:
            yield url
        return
    admin = _support.admin_url()
    name = (f"{os.environ.get('AWA_BENCH_DB_PREFIX', '')}awa_bench_peers_"
            f"{uuid.uuid4().hex[:8]}")
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:  # a URL: the Rust core (sqlx) takes no key=value conninfo
        from support.rust_awa import as_url
        yield as_url(make_conninfo(admin, dbname=name))
    finally:
        _support.drop_database(admin, name)


def one_run(system: System, n: int, workers: int, processes: int) -> dict[str, float]:
    """One run: producer and worker in one process (``processes`` 1), the worker in one
    and the producer in another (2), or the producer alone (0: enqueue only), under the
    system's python."""
    with database_for(system) as url:
        if system.name == "awa-pg":
            migrate_awa_pg(system.python, system.env, url)
        wal_start = _wal_lsn()

        def role(name: str, **kw: Any) -> subprocess.Popen[str]:
            return subprocess.Popen([system.python, __file__, "--run", system.name, name, url,
                                     str(n), str(workers)], stdout=subprocess.PIPE, text=True,
                                    env=system.env, cwd="/", **kw)

        if processes == 0:
            alone = role("alone")
            raw = _result(system, workers, alone, alone.communicate(timeout=900)[0])
        elif processes == 1:
            both = role("both")
            raw = _result(system, workers, both, both.communicate(timeout=900)[0])
        else:
            worker = role("worker", stdin=subprocess.PIPE)
            assert worker.stdout is not None and worker.stdin is not None  # PIPEs
            said = worker.stdout.readline()
            if not said.startswith("READY"):
                worker.kill()
                raise SystemExit(f"the {system.name} worker (W={workers}) did not start: "
                                 f"{said!r}")
            producer = role("producer")
            worker.stdin.write("go\n")
            worker.stdin.flush()
            made = _result(system, workers, producer, producer.communicate(timeout=900)[0])
            ran = _result(system, workers, worker, worker.communicate(timeout=900)[0])
            raw = {**made, "cpu_s": made["cpu_s"] + ran["cpu_s"], "finished": ran["finished"]}
            if "server_finished" in ran:
                raw["server_finished"] = ran["server_finished"]
        wal_bytes = _wal_lsn() - wal_start
    server_end = raw.get("server_finished", raw.get("server_enqueued"))
    server = (1000 * (server_end - raw["server_started"]) / n
              if "server_started" in raw and server_end is not None else math.nan)
    return {"enqueue_per_s": n / (raw["enqueued"] - raw["started"]),
            "processed_per_s": (n / (raw["finished"] - raw["started"]) if "finished" in raw
                                else math.nan),
            "cpu_ms_per_job": 1000 * raw["cpu_s"] / n, "server_ms_per_job": server,
            "machine_ms_per_job": 1000 * raw["cpu_s"] / n + server,
            "wal_bytes_per_job": wal_bytes / n}


def _wal_lsn() -> int:
    """The server's WAL insert position, in bytes."""
    import psycopg
    with psycopg.connect(_support.admin_url(), autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None  # one row, always
    return int(row[0])


def _result(system: System, workers: int, proc: subprocess.Popen[str],
            stdout: str) -> dict[str, float]:
    lines = stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the {system.name} run (W={workers}) failed (exit status "
                         f"{proc.returncode}): {stdout[-2000:]}")
    return dict(json.loads(lines[-1]))


def main() -> None:
    sys.path.insert(0, str(_support.ROOT / "tests"))  # support.awa_pg, support.rust_awa
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", default="64,256")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--systems", default="canonical,queue_storage,awa-pg,pgqueuer")
    parser.add_argument("--processes", default="0,1,2",
                        help="0: the producer alone; 1: producer and worker in one process; "
                             "2: in two; a comma-separated list runs each")
    args = parser.parse_args()
    layouts = args.processes.split(",")
    if not set(layouts) <= {str(k) for k in LAYOUTS}:
        raise SystemExit(f"--processes {args.processes}: give 0, 1 or 2, or a comma-separated "
                         "list of them")
    import psycopg
    with psycopg.connect(_support.admin_url(), autocommit=True) as conn:
        postmaster = _support.ServerCpu(conn).postmaster
    if postmaster is not None:  # the server is on this machine: its CPU is measured
        os.environ[POSTMASTER_ENV] = str(postmaster)
    chosen = systems(args.systems.split(","))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"N={args.jobs} no-op async jobs, batches of {BATCH}; machine: {os.cpu_count()} "
          f"cores, load average {load}")
    for processes in (int(p) for p in layouts):
        print(f"\n== {LAYOUTS[processes]}")
        series(chosen, args, processes)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


LAYOUTS = {0: "the producer alone, no worker (enqueue only)",
           1: "producer and worker in one process", 2: "producer and worker in two processes"}


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _rate(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def _share(value: float, base: float) -> str:
    return "-" if math.isnan(value) else f"{100 * value / base:.1f}%"


def series(chosen: dict[str, System], args: argparse.Namespace, processes: int) -> None:
    """Every W and system alternated, then the medians and the per-round ratios."""
    print(f"{'system':>14} {'W':>5} {'enqueue/s':>10} {'processed/s':>12} {'CPU ms/job':>11} "
          f"{'server ms/job':>14} {'machine CPU ms/job':>19} {'WAL B/job':>10}")
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    workers = "0" if processes == 0 else args.workers
    for w, name in _support.alternation(workers, args.repeat, ",".join(chosen)):
        r = one_run(chosen[name], args.jobs, w, processes)
        results.setdefault((w, name), []).append(r)
        print(f"{name:>14} {w:>5} {r['enqueue_per_s']:>10.0f} {_rate(r['processed_per_s']):>12} "
              f"{r['cpu_ms_per_job']:>11.3f} {_ms(r['server_ms_per_job']):>14} "
              f"{_ms(r['machine_ms_per_job']):>19} {r['wal_bytes_per_job']:>10.0f}", flush=True)
    first = next(iter(chosen))
    print(f"\nmedians over the rounds (first: {first})\n{'system':>14} {'W':>5} "
          f"{'enqueue/s':>10} {'of first':>9} {'processed/s':>12} {'of first':>9} "
          f"{'CPU ms/job':>11} {'server ms/job':>14} {'machine CPU ms/job':>19} {'WAL B/job':>10}")
    for (w, name), runs in results.items():
        base = results[(w, first)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        bmed = {k: statistics.median(r[k] for r in base) for k in runs[0]}
        print(f"{name:>14} {w:>5} {med['enqueue_per_s']:>10.0f} "
              f"{_share(med['enqueue_per_s'], bmed['enqueue_per_s']):>9} "
              f"{_rate(med['processed_per_s']):>12} "
              f"{_share(med['processed_per_s'], bmed['processed_per_s']):>9} "
              f"{med['cpu_ms_per_job']:>11.3f} {_ms(med['server_ms_per_job']):>14} "
              f"{_ms(med['machine_ms_per_job']):>19} {med['wal_bytes_per_job']:>10.0f}")
    for measure in ("processed_per_s", "enqueue_per_s"):
        for (w, name), runs in results.items():
            if name != first and not math.isnan(runs[0][measure]):
                print(f"{name} / {first} {measure.replace('_per_s', '/s')}, W={w}, "
                      + _support.paired_ratio([r[measure] for r in runs],
                                              [r[measure] for r in results[(w, first)]]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--run":  # a peer's python: no _support there
        if sys.argv[2] in ("canonical", "queue_storage"):
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        measured_process(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
                         int(sys.argv[6]))
    else:
        import _support  # the driver: this checkout's awa and psycopg

        main()
