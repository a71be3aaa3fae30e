"""The Rust-core `awa` CLI (PyPI ``awa-cli``), installed once into a cached virtualenv.

    from support.rust_awa import rust_awa_binary, rust_awa   # tests/ is on sys.path

    binary = rust_awa_binary()                 # pip-installs awa-cli==0.6.9 on first use
    rust_awa(binary, database_url, "migrate")  # the Rust core lays out its own schema
    python = rust_awa_python()                 # the same venv with awa-pg==0.6.9 (its SDK)

The cache directory is the one tests/ops/test_queue_storage.py uses, so the
package is downloaded once for both; a file lock keeps two test processes
from installing into it at the same time.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict

AWA_CLI_VERSION = "0.6.9"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "awa-ops-tests"


def rust_awa_binary(version: str = AWA_CLI_VERSION) -> Path:
    """The ``awa`` executable of ``awa-cli==version``, installed on first use."""
    venv = CACHE / f"awa-cli-{version}"
    binary = venv / "bin" / "awa"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".awa-cli-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                            f"awa-cli=={version}"], check=True, timeout=600)
    return binary


AWA_PG_VERSION = "0.6.9"


def rust_awa_python(version: str = AWA_PG_VERSION) -> Path:
    """A python with ``awa-pg==version`` importable as ``awa`` (the cached awa-cli venv)."""
    binary = rust_awa_binary(version)
    python = binary.with_name("python")
    marker = binary.parent.parent / f".awa-pg-{version}"
    if marker.exists():
        return python
    with open(CACHE / f".awa-cli-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            subprocess.run([str(binary.with_name("pip")), "install", "-q",
                            f"awa-pg=={version}"], check=True, timeout=600)
            marker.touch()
    return python


def as_url(conninfo: str) -> str:
    """The Rust CLI takes only URL-form connection strings."""
    p = conninfo_to_dict(conninfo)
    auth = quote(str(p.get("user", "postgres")))
    if p.get("password"):
        auth += f":{quote(str(p['password']))}"
    return f"postgresql://{auth}@{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{p['dbname']}"


def rust_awa(binary: Path, database_url: str, *args: str) -> str:
    """Run the Rust-core CLI; its stdout (a failure raises with its stderr)."""
    proc = subprocess.run([str(binary), "--database-url", as_url(database_url), *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RUST_LOG": "warn"})
    assert proc.returncode == 0, f"awa {' '.join(args)}: {proc.stderr[-2000:]}"
    return proc.stdout
