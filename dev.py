#!/usr/bin/env python3
"""The front-door commands: ``python3 dev.py demo``, ``test`` and ``lint``.

Each creates ``./.venv`` on first use and reinstalls only when pyproject.toml
changed, so later runs start at once.  Needs nothing but Python 3.11+.
``test`` runs the suite on TEST_WORKERS pytest-xdist workers (``AWA_TEST_WORKERS``
overrides it; ``-n 0`` or ``-p no:xdist`` among the arguments runs it in one process).
``lint`` runs ruff and mypy (configured in pyproject.toml) and exits non-zero
on any finding.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
STAMP = VENV / ".dev-stamp"

# What `dev.py lint` checks when given no paths: the whole tree.
LINT_PATHS = ["dev.py", "awa", "awa_ops", "awa_tui", "tests", "benchmarks"]

# The suite is bound mostly by the 2 cores: its processes and the server's backends keep
# both cores about 80 % busy.  Clean-clone runs with 4 workers took 12:56 and 12:59, then
# 11:41 and 13:02 once Python could cache compiled modules (suite_environment): runs of one
# commit differ by a minute or more, so compare subsets A B B A.  6 workers (the server's
# connections shared out by tests/support/server_connections.py) took 12:33 and 12:41, at a
# load of 8-10 that makes the timing-sensitive tests likelier to flake, so 4 stay.  Every
# test owns its database; tests that share a costly fixture, or must not run beside each
# other, are kept on one worker by `xdist_group` marks, hence ``--dist loadgroup``.
TEST_WORKERS = 4


def pytest_args(rest: list[str]) -> list[str]:
    """pytest's arguments: ``rest``, run on workers unless ``rest`` chooses otherwise."""
    if any(a in ("-n", "--numprocesses", "no:xdist", "-pno:xdist")
           or a.startswith(("-n", "--numprocesses=")) for a in rest):
        return rest
    workers = os.environ.get("AWA_TEST_WORKERS") or str(TEST_WORKERS)
    return ["-n", workers, "--dist", "loadgroup", *rest]


def suite_environment() -> dict[str, str]:
    """The suite's environment: this one, except that Python may cache compiled modules.

    Some machines set PYTHONDONTWRITEBYTECODE (this one does).  The suite starts a few
    hundred Python processes (the CLIs, worker processes, each xdist worker), and without a
    cache each compiles every awa module it imports, and pytest rewrites every test module
    on every worker, afresh.  On tests/ops + tests/foundation, 4 workers, A B B A: user CPU
    74 / 75 s with the variable set against 48 / 51 s without, wall 65 / 69 s against
    53 / 57 s.  The caches go to __pycache__ directories, which git ignores."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 (dev.py runs under any python3: this is the check)
        sys.exit("awa needs Python 3.11 or newer")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PY.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PY.exists():
        print("creating ./.venv ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print("installing awa and its dependencies into ./.venv ...", flush=True)
    pip = [str(PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    # Every extra (the demo uses the console, the tests every part), and the dev tools.
    subprocess.run(pip + ["-e", f"{ROOT}[all,dev]"], check=True)
    STAMP.write_text(wanted)


def ensure_system_tools() -> None:
    """promtool/prometheus, tmux and pgbouncer are real parts of the test suite."""
    missing = [pkg for tool, pkg in (("promtool", "prometheus"), ("prometheus", "prometheus"),
                                     ("tmux", "tmux"), ("pgbouncer", "pgbouncer"))
               if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]
    missing = sorted(set(missing))
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"warning: {', '.join(missing)} missing and cannot be installed here; "
              f"install them (Debian: apt-get install {' '.join(missing)})", file=sys.stderr)
        return
    print(f"installing {', '.join(missing)} (apt-get) ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                   check=True, env=env)


def lint(paths: list[str]) -> int:
    """ruff check, then mypy; non-zero when either finds anything."""
    paths = paths or LINT_PATHS
    ruff = subprocess.call([str(PY), "-m", "ruff", "check", *paths], cwd=ROOT)
    # benchmarks/ are scripts that import their siblings (``import _support``) and reuse module
    # names of tests/ (``callbacks``): mypy checks them in a run of their own, rooted there.
    scripts = [p for p in paths if Path(p).parts[:1] == ("benchmarks",)]
    groups = [([p for p in paths if p not in scripts], None),
              (scripts, {**os.environ, "MYPYPATH": "benchmarks"})]
    mypy = 0
    for group, env in groups:
        if group:
            # Modules outside ``group`` are still analysed for their types; only ``group`` reports.
            mypy |= subprocess.call([str(PY), "-m", "mypy", "--follow-imports=silent", *group],
                                    cwd=ROOT, env=env)
    return 1 if ruff or mypy else 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "help"
    rest = argv[1:]
    if command == "demo":
        ensure_venv()
        return subprocess.call([str(PY), "-m", "awa_tui.demo", *rest], cwd=ROOT)
    if command == "test":
        ensure_venv()
        ensure_system_tools()
        return subprocess.call([str(PY), "-m", "pytest", *pytest_args(rest)], cwd=ROOT,
                               env=suite_environment())
    if command == "lint":
        ensure_venv()
        return lint(rest)
    if command == "bench":
        ensure_venv()
        return subprocess.call([str(PY), *rest], cwd=ROOT)
    print(__doc__.strip())
    print("\nusage: python3 dev.py demo | test [pytest args] | lint [paths] | "
          "bench benchmarks/<file>.py [args]")
    return 0 if command in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
