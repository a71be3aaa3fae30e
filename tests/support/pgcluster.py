"""A private, throwaway PostgreSQL cluster for tests that stop, restart or reconfigure the server.

The shared server on 127.0.0.1:5432 must never be restarted or reconfigured
by a test, so such tests start their own cluster (initdb + pg_ctl from the
machine's PostgreSQL binaries), run as the ``postgres`` OS user when we are
root (initdb refuses to run as root), on a free loopback port.

    with PrivateCluster() as cluster:
        url = cluster.url("postgres")
        cluster.stop(); cluster.start()
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def postgres_bin_dir() -> Path:
    """The newest installed PostgreSQL's binaries (Debian layout), or the PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb) found; "
                           "install the postgresql package")
    return Path(initdb).parent


# "LOW-HIGH": the loopback ports private servers (clusters, PgBouncer) may take; unset, any
# free port.  On a machine shared by several test runs each run gets a range of its own.
PRIVATE_PORTS_ENV = "AWA_TEST_PRIVATE_PORTS"
_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port (within ``AWA_TEST_PRIVATE_PORTS`` when set), not handed out
    before by this process."""
    span = os.environ.get(PRIVATE_PORTS_ENV)
    if span:
        low, _, high = span.partition("-")
        candidates = [p for p in range(int(low), int(high) + 1) if p not in _handed_out]
        # Spread the pytest-xdist workers over the range so they rarely race for a port.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        shift = (int(worker[2:]) if worker[2:].isdigit() else 0) * 7
        candidates = candidates[shift % max(len(candidates), 1):] + candidates[
            :shift % max(len(candidates), 1)]
        for port in candidates:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
        raise RuntimeError(f"no free port left in {PRIVATE_PORTS_ENV}={span}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """initdb'd on construction's ``start()``; removed on ``close()``."""

    def __init__(self, *settings: str, init: bool = True) -> None:
        """``init=False``: leave ``self.data`` empty for the caller to fill (a base backup)."""
        self.bin = postgres_bin_dir()
        self.base = Path(tempfile.mkdtemp(prefix="awa-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        self.settings = ["-c", "fsync=off", "-c", "max_connections=200", *settings]
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        if init:
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                      "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self._as_postgres, str(self.bin / tool), *args], check=True,
                       capture_output=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        options = " ".join([f"-p {self.port}", "-c listen_addresses=127.0.0.1",
                            f"-k {self.base}", *self.settings])
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.base / "log"),
                  "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop")

    def close(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PrivateCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
