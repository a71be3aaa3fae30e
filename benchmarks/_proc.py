"""The local PostgreSQL server's CPU, read from /proc with the standard library alone.

Apart from ``_support`` because a peer's measured process (``peers.py --run`` under
PgQueuer's or awa-pg's python) reads it too, and that python has no psycopg or awa.
"""

from __future__ import annotations

import os
from pathlib import Path


def proc_stat(pid: int) -> tuple[int, list[int]] | None:
    """(parent pid, the numeric fields after the state) from /proc/<pid>/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces
    numbers = [int(f) for f in fields[1:]]
    return numbers[0], numbers


def server_cpu_s(postmaster: int) -> float | None:
    """CPU seconds of the server whose postmaster is ``postmaster``: its own, the
    backends it has reaped (``cutime``/``cstime``) and every live child's (autovacuum,
    the WAL writer and checkpoints included).  None when it is not on this machine."""
    own = proc_stat(postmaster)
    if own is None:
        return None
    ticks = sum(own[1][10:14])  # utime, stime, cutime, cstime
    for child in Path("/proc").iterdir():
        stat = proc_stat(int(child.name)) if child.name.isdigit() else None
        if stat and stat[0] == postmaster:
            ticks += sum(stat[1][10:12])
    return ticks / os.sysconf("SC_CLK_TCK")


def backend_cpu_s(pid: int) -> float:
    """CPU seconds one server backend (on this machine) has run, to the nanosecond
    (/proc/<pid>/schedstat; /proc/<pid>/stat counts in 10 ms ticks, coarser than a batch)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
