"""The real ``awa-pg`` SDK (the Rust core behind PyO3), installed once into a cached virtualenv.

    from support.awa_pg import awa_pg_python   # tests/ is on sys.path

    python = awa_pg_python()    # pip-installs awa-pg==0.6.9 on first use
    subprocess.run([str(python), "script.py"])   # `import awa` there is the reference

The differential suite (tests/compat) runs its scenarios under this interpreter
and under ours.  Same cache directory as ``support.rust_awa`` (one download per
machine); a file lock keeps two test processes from installing at once.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from support.rust_awa import CACHE

AWA_PG_VERSION = "0.6.9"


def awa_pg_python(version: str = AWA_PG_VERSION) -> Path:
    """A python of a venv where ``import awa`` is ``awa-pg==version``."""
    venv = CACHE / f"awa-pg-{version}"
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".awa-pg-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            if not python.exists():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            # psycopg: the scenarios arrange/observe rows with it; pytest-asyncio: awa-pg's
            # own awa.testing imports it.
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                            f"awa-pg=={version}", "psycopg[binary]>=3.2,<4",
                            "pytest-asyncio"], check=True, timeout=600)
            marker.touch()
    return python
