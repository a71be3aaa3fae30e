"""What every benchmark needs: its database on the test server, and the timing maths.

The server is found the way the tests find it: AWA_TEST_DATABASE_URL, then
DATABASE_URL, else the local PostgreSQL at 127.0.0.1:5432.  Most benchmarks
measure in a scratch database (created, migrated, dropped afterwards); the
big ones (ops.py, tui.py) build a named database once and reuse it, because
filling a million rows takes minutes.

A benchmark can also measure another build of awa -- a git ref of this repository --
beside this checkout's (``baseline_build``): the ref's tree in a cached virtualenv under
``~/.cache/awa-bench/<sha>``, and ``import awa`` in a benchmark run under that venv's python
with ``AWA_BENCH_CODE`` set to the tree (``Build.env``) is that ref's awa, while the
measuring code stays this checkout's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from _proc import backend_cpu_s, proc_stat, server_cpu_s  # benchmarks/: the script's own dir
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent
# The tree ``import awa`` is to come from: this checkout, or a baseline build's
# (``Build.env``); the benchmark scripts themselves are always this checkout's.
CODE_ENV = "AWA_BENCH_CODE"
CODE = os.environ.get(CODE_ENV) or str(ROOT)
if CODE not in sys.path:  # run as `python benchmarks/x.py` from any checkout
    sys.path.insert(0, CODE)

from awa import storage  # noqa: E402 (after the sys.path line above)

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
SERVER_URL_VARS = ("AWA_TEST_DATABASE_URL", "DATABASE_URL")

DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"
# Every engine's jobs: the view (on queue storage the canonical tables are empty, and a
# database counted by them was rebuilt at every run).
COUNT_JOBS = "SELECT count(*) FROM awa.jobs"
EMPTY_JOB_TABLES = "TRUNCATE awa.jobs_hot, awa.scheduled_jobs, awa.job_unique_claims"


def admin_url() -> str:
    """The server's maintenance database (``postgres``), where databases are created."""
    for var in SERVER_URL_VARS:
        if os.environ.get(var):
            return make_conninfo(os.environ[var], dbname="postgres")
    return LOCAL_SERVER


def _admin_execute(admin: str, statement: sql.Composed) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(statement)


def drop_database(admin: str, name: str) -> None:
    _admin_execute(admin, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
        sql.Identifier(name)))


def create_database(admin: str, name: str, engine: str | None = None) -> str:
    """Create ``name`` and migrate it (``engine``: as `awa migrate --engine`, default the
    default engine); returns its URL.  Dropped again if migrating fails."""
    _admin_execute(admin, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(admin, dbname=name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn, engine)
    except BaseException:
        drop_database(admin, name)
        raise
    return url


def migrate(conn: psycopg.Connection, engine: str | None) -> None:
    """Lay ``conn``'s database out for ``engine`` with the awa being measured: a baseline
    build from before the storage engines (no ``storage.migrate_sync``) knows only the
    canonical layout, through ``awa.schema.migrate_sync``."""
    if hasattr(storage, "migrate_sync"):
        storage.migrate_sync(conn, engine)
        return
    if engine not in (None, "canonical"):
        raise SystemExit(f"the awa of {CODE} has no storage engine {engine!r}: it predates "
                         "the engines and lays out the canonical tables only")
    from awa import schema
    schema.migrate_sync(conn)


def recreate_database(admin: str, name: str, engine: str | None = None) -> str:
    """A kept benchmark database, emptied by dropping and creating it again (migrated)."""
    drop_database(admin, name)
    return create_database(admin, name, engine)


@contextlib.contextmanager
def scratch_database(prefix: str = "awa_bench", engine: str | None = None) -> Iterator[str]:
    """A fresh migrated database for one benchmark run, dropped however the run ends
    (``AWA_BENCH_DB_PREFIX``, when set, goes before its name: whose benchmark it is, on
    a server several people share)."""
    admin = admin_url()
    name = f"{os.environ.get('AWA_BENCH_DB_PREFIX', '')}{prefix}_{uuid.uuid4().hex[:8]}"
    url = create_database(admin, name, engine)
    try:
        yield url
    finally:
        drop_database(admin, name)


def kept_job_count(admin: str, name: str) -> int | None:
    """Jobs in a kept benchmark database, or None when it does not exist yet."""
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute(DATABASE_EXISTS, (name,)).fetchone() is None:
            return None
    with psycopg.connect(make_conninfo(admin, dbname=name)) as conn:
        return conn.execute(COUNT_JOBS).fetchone()[0]  # type: ignore[index]  # count(*): one row


def empty_job_tables(conn: psycopg.Connection) -> None:
    """Between measured phases: no jobs left from the previous one."""
    conn.execute(EMPTY_JOB_TABLES)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (1-99) by statistics.quantiles; a single value is its own."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100)[int(q) - 1]


def paired_ratio(values: list[float], baselines: list[float]) -> str:
    """One engine's runs against the baseline engine's runs of the same rounds (each round
    ran both back to back, see ``alternation``): the per-round ratio's median, its geometric
    mean with a 95 % interval (normal, over the log ratios) and in how many rounds it was
    ahead.  Single runs on this machine differ by 15 %, so a comparison of a few percent is
    decided by the pairs, not by two medians taken at different moments."""
    ratios = [v / b for v, b in zip(values, baselines, strict=True)]
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    text = (f"{len(ratios)} rounds: median {100 * statistics.median(ratios):.1f}%, "
            f"geometric mean {100 * math.exp(mean):.1f}%")
    if len(logs) > 1:
        half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
        text += (f" (95% interval {100 * math.exp(mean - half):.1f}-"
                 f"{100 * math.exp(mean + half):.1f}%)")
    return text + f", ahead in {sum(r > 1 for r in ratios)}"


# What ``competing_load`` runs, in a child interpreter, until it is killed.
_BUSY_CORE = "while True: pass"
# Writes and fsyncs 256 MiB again and again, in the directory argv[1]: the disk is kept
# busy flushing, as a neighbour's bulk load or a backup would keep it.
_BUSY_DISK = """
import os, sys
block = bytes(1 << 20)
while True:
    with open(os.path.join(sys.argv[1], "busy-disk"), "wb") as f:
        for _ in range(256):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
"""
COMPETING_LOADS = {"cpu": _BUSY_CORE, "disk": _BUSY_DISK}


@contextlib.contextmanager
def competing_load(kind: str | None) -> Iterator[None]:
    """While the block runs, a neighbour competes for the machine: ``cpu`` keeps one core
    busy, ``disk`` keeps the disk flushing (``None``: nothing).  How an engine holds up
    on a shared server is a measurement of its own, and a single number taken on a quiet
    machine does not show it."""
    if kind is None:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="awa-bench-") as scratch:
        neighbour = subprocess.Popen([sys.executable, "-c", COMPETING_LOADS[kind], scratch])
        try:
            yield
        finally:
            neighbour.terminate()  # its file goes with the scratch directory
            neighbour.wait()


class ServerCpu:
    """CPU seconds the whole PostgreSQL server spent, when it runs on this machine.

    The postmaster's own CPU and that of the backends it has reaped
    (``cutime``/``cstime``), plus every live child's: autovacuum, the WAL
    writer and checkpoints included, so an engine's background cost counts too --
    less what the backend of ``conn`` itself spent: the measuring connection's own
    reads (counting finished rows through ``awa.jobs``, say) are not the system under
    test, and cost more on one engine than on the other.
    ``read()`` is None when the server is not local (its /proc entry is not there).
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        self.backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]  # one row
        stat = proc_stat(self.backend)
        self.postmaster = stat[0] if stat else None

    def read(self) -> float | None:
        if self.postmaster is None:
            return None
        total = server_cpu_s(self.postmaster)
        return None if total is None else total - backend_cpu_s(self.backend)


class Backend:
    """An autocommit connection and the CPU its backend spends."""

    def __init__(self, conn: psycopg.AsyncConnection) -> None:
        self.conn = conn
        self.pid = conn.info.backend_pid

    def cpu(self) -> float:
        return backend_cpu_s(self.pid)


def alternation(sizes: str, repeat: int, engines: str) -> Iterator[tuple[int, str]]:
    """``(size, engine)`` for an engine comparison: for each of the comma-separated sizes,
    ``repeat`` rounds that alternate the engines, so each pair meets the same machine (this
    one is shared and noisy; back-to-back blocks per engine would compare two moments).

    Every other round runs the engines in reverse order (A B, B A, A B, ...): the run
    after another one starts where its predecessor's dropped database left the server
    (a DROP DATABASE forces a checkpoint), and the machine drifts within a series.  With
    one fixed order the same engine always ran second: measured on one checkout against
    itself, the second run of each pair was the slower in 6 pairs of 6, by 0.2-24 %."""
    names = engines.split(",")
    for size in (int(x) for x in sizes.split(",")):
        for round_no in range(repeat):
            for engine in (names if round_no % 2 == 0 else names[::-1]):
                yield size, engine


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def read_body(receive) -> bytes:
    """The whole request body of an ASGI http request, however many messages it came in."""
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            return raw


# --- baseline builds: another git ref of this repository, measured beside this checkout --
BENCH_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "awa-bench"


@dataclasses.dataclass(frozen=True)
class Build:
    """One build of awa a benchmark runs: its label, its python, the tree its ``awa`` is."""

    label: str
    python: str
    code: str | None = None  # None: this checkout

    def env(self) -> dict[str, str]:
        """The environment a benchmark process of this build runs in."""
        env = {k: v for k, v in os.environ.items() if k != CODE_ENV}
        if self.code is not None:
            env[CODE_ENV] = self.code
        return env


CURRENT = Build("current", sys.executable)


def resolve_ref(ref: str) -> str:
    """The commit sha of a git ref of this repository (a sha, a branch, ``HEAD~3``...)."""
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                           f"{ref}^{{commit}}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"--baseline {ref}: not a commit of {ROOT}")
    return done.stdout.strip()


def baseline_build(ref: str) -> Build:
    """The build of git ref ``ref``: its tree (``git archive``) and a virtualenv with that
    tree installed (``pip install -e``, its own dependencies), made once per commit under
    ``~/.cache/awa-bench/<sha>`` and reused; a file lock keeps two benchmarks from building
    the same one at once."""
    sha = resolve_ref(ref)
    home = BENCH_CACHE / sha
    src, venv = home / "src", home / "venv"
    marker = home / ".installed"
    if not marker.exists():
        home.mkdir(parents=True, exist_ok=True)
        with open(home / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                print(f"building the baseline {ref} ({sha[:12]}) in {home} ...", flush=True)
                archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha],
                                         capture_output=True, check=True).stdout
                if src.exists():
                    subprocess.run(["rm", "-rf", str(src)], check=True)
                with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                    tar.extractall(src, filter="data")
                subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
                with open(home / "pip.log", "w") as log:  # the index's chatter, kept aside
                    pip = subprocess.run(
                        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                         "--disable-pip-version-check", "-e", str(src)],
                        stdout=log, stderr=subprocess.STDOUT, timeout=900)
                if pip.returncode != 0:
                    raise SystemExit(f"installing {ref} failed; see {home / 'pip.log'}")
                marker.write_text(f"{ref}\n")
    return Build(ref, str(venv / "bin" / "python"), str(src))


def tree_build(ref: str) -> Build:
    """Git ref ``ref``'s ``awa/`` tree, extracted once under ``~/.cache/awa-bench/trees/<sha>``,
    run on this checkout's python and venv (``CODE_ENV`` puts the tree first on the path):
    no install, so a bisect costs seconds per commit -- valid while the refs' dependencies
    are those of this venv."""
    sha = resolve_ref(ref)
    tree = BENCH_CACHE / "trees" / sha
    if not (tree / "awa").exists():
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "awa"],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
    return Build(ref, sys.executable, str(tree))


# --- measured processes ----------------------------------------------------------------
def under_callgrind(prefix: str, cmd: list[str]) -> tuple[list[str], str]:
    """``cmd`` run under ``valgrind --tool=callgrind``, and the file it writes its counts to
    (one per process: ``callgrind_instructions`` adds them up)."""
    with tempfile.NamedTemporaryFile(prefix=prefix, suffix=".cg", delete=False) as out:
        out_file = out.name
    return (["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
             "--dump-instr=no", "--collect-jumps=no", *cmd], out_file)


def callgrind_instructions(out_file: str) -> int:
    """The instructions callgrind counted: the summary of every file written for
    ``out_file`` (a process and each process it forked), added; the files are removed."""
    total, found = 0, False
    for path in Path(out_file).parent.glob(Path(out_file).name + "*"):
        match = re.search(r"^summary:\s+(\d+)", path.read_text(), re.MULTILINE)
        path.unlink()
        if match is not None:
            total, found = total + int(match.group(1)), True
    if not found:
        raise SystemExit("no callgrind summary line")
    return total


def measured_result(cmd: list[str], build: Build) -> dict[str, Any]:
    """Run one measured process of ``build``; its result is the JSON of its last line."""
    done = subprocess.run(cmd, env=build.env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measured process failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
