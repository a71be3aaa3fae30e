"""A private PgBouncer (Debian's ``pgbouncer`` package) in front of a PostgreSQL server.

    with PgBouncer(target_port=5432, port=15500) as bouncer:   # transaction mode
        url = bouncer.url(dbname)          # every database of the target, through the pooler
        bouncer.restart()                  # the process killed and started again, same port
        bouncer.admin("RECONNECT")         # the admin console

PgBouncer refuses to run as root, so when we are root it switches to the ``postgres``
OS user itself (``-u postgres``; the process we start is PgBouncer, so signals reach
it).  Authentication is ``trust`` with ``postgres`` in the auth file: the test server
trusts loopback too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from support.pgcluster import free_port

# The settings the production guide (docs/production.md) recommends for awa, scaled down.
DEFAULT_SETTINGS: dict[str, str] = {
    "pool_mode": "transaction",
    "default_pool_size": "10",
    "max_client_conn": "1000",
    "max_prepared_statements": "0",
    "server_reset_query": "",
    "ignore_startup_parameters": "extra_float_digits",
    "server_check_delay": "0",
}
STARTUP_TIMEOUT_S = 10.0


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if found is None:
        raise RuntimeError("pgbouncer is not installed: apt-get install -y pgbouncer "
                           "(python3 dev.py installs it with the other system tools)")
    return found


class PgBouncer:
    def __init__(self, *, port: int | None = None, target_host: str = "127.0.0.1",
                 target_port: int = 5432, **settings: str) -> None:
        self.binary = pgbouncer_binary()
        self.port = port if port is not None else free_port()
        self.base = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
        self.settings = {**DEFAULT_SETTINGS, **settings}
        self.target = (target_host, target_port)
        self.proc: subprocess.Popen[bytes] | None = None
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")
            self._as_postgres = ["-u", "postgres"]
        self._write_config()

    def _write_config(self) -> None:
        host, port = self.target
        lines = ["[databases]", f"* = host={host} port={port}", "", "[pgbouncer]",
                 "listen_addr = 127.0.0.1", f"listen_port = {self.port}",
                 f"unix_socket_dir = {self.base}", "auth_type = trust",
                 f"auth_file = {self.base / 'users.txt'}", "admin_users = postgres",
                 f"logfile = {self.base / 'pgbouncer.log'}",
                 f"pidfile = {self.base / 'pgbouncer.pid'}"]
        lines += [f"{k} = {v}" for k, v in self.settings.items()
                  if k != "max_prepared_statements"]  # 1.21+ only; 0 is 1.18's behaviour
        (self.base / "users.txt").write_text('"postgres" ""\n')
        (self.base / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
        if self._as_postgres:
            for path in self.base.iterdir():
                shutil.chown(path, "postgres")

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        self.proc = subprocess.Popen([self.binary, *self._as_postgres,
                                      str(self.base / "pgbouncer.ini")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self.url("pgbouncer"), autocommit=True,
                                     prepare_threshold=None, connect_timeout=1) as conn:
                    conn.execute("SHOW VERSION")
                answered = True
            except psycopg.Error:
                answered = False
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start on port {self.port}: "
                                   f"{self.log_tail()}")
            if answered:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM: PgBouncer's immediate shutdown (every client and server connection cut)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        (self.base / "pgbouncer.pid").unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def admin(self, command: str) -> list[tuple[object, ...]]:
        """One admin-console command (``SHOW POOLS``, ``RECONNECT`` ...); its rows."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True,
                             prepare_threshold=None) as conn:
            cur = conn.execute(command)
            return cur.fetchall() if cur.description else []

    def server_connections(self, dbname: str) -> int:
        """Server connections PgBouncer holds for ``dbname`` now (active + idle + used ...)."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True,
                             prepare_threshold=None) as conn:
            cur = conn.execute("SHOW POOLS")
            names = [c.name for c in cur.description or []]
            total = 0
            for row in cur.fetchall():
                r = dict(zip(names, row, strict=True))
                if r["database"] == dbname:
                    total += sum(int(r[k]) for k in ("sv_active", "sv_idle", "sv_used",
                                                     "sv_tested", "sv_login"))
            return total

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.base / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
