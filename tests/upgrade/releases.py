"""Earlier releases of awa-py, built from this repository's own history for upgrade tests.

    from upgrade.releases import PREVIOUS, build
    old = build(PREVIOUS["bb0ffc4"])   # old.python runs that release's awa

A release is a pinned commit (``PREVIOUS``; from now on each release is also a git tag,
docs/production.md).  ``build`` checks it out with ``git worktree add --detach`` under
``~/.cache/awa-upgrade/<sha>/src`` (``AWA_UPGRADE_CACHE`` moves it) and makes a virtualenv
beside it whose ``.pth`` puts that tree first and this interpreter's site-packages after it:
the releases pinned here need no dependency this checkout lacks, so nothing is downloaded and
a build takes a second.  A clone without the commit (CI's shallow clone) fetches it from
``origin``; when that fails the error says so in one line, with the fix.
"""

from __future__ import annotations

import fcntl
import os
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# The releases a fleet may upgrade from: name -> commit.  32a8704: the round before this one
# (queue-storage layout 3, migrations 1-4); bb0ffc4: layout 8, migrations 1-6; 0.2.0:
# layout 8, migrations 1-7; 0.3.0: layout 8, migrations 1-8 (the live engine switch).
PREVIOUS = {
    "32a8704": "32a8704bd8e720d8e847e1e23fd4198e6c52940b",
    "bb0ffc4": "bb0ffc457543e890c5b0d0a04a30d57482baab0f",
    "0.2.0": "4512380c5a1ada57c9fcd78d2850c1f72b8ab05f",  # tag v0.2.0
    "0.3.0": "537e59e4244daacd3d742636fa1d16313a851ed8",  # tag v0.3.0
}
# The release a fleet rolls from today (docs/production.md's procedure goes one release at a
# time): CI rolls from it; benchmarks/upgrade.py rolls from any of PREVIOUS.
NEWEST = "0.3.0"
CACHE = Path(os.environ.get("AWA_UPGRADE_CACHE")
             or Path.home() / ".cache" / "awa-upgrade")


class ReleaseUnavailable(RuntimeError):
    """The commit is in neither this clone nor its origin."""


@dataclass(frozen=True)
class Release:
    """A built release: ``python`` imports its ``awa``; ``src`` is its tree."""

    name: str
    sha: str
    python: str
    src: Path

    def awa(self, *args: str) -> list[str]:
        """The command line of that release's ``awa`` CLI."""
        return [self.python, "-c", "import sys; from awa.cli import main; sys.exit(main())",
                *args]


def _git(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=False)


def ensure_commit(sha: str, root: Path = ROOT) -> None:
    """The commit is in the clone at ``root``, fetched from ``origin`` if it was not (a
    shallow clone); ``ReleaseUnavailable`` saying what to do otherwise."""
    if _git("cat-file", "-e", f"{sha}^{{commit}}", root=root).returncode == 0:
        return
    fetched = _git("fetch", "--quiet", "--depth", "1", "origin", sha, root=root)
    if (fetched.returncode != 0
            or _git("cat-file", "-e", f"{sha}^{{commit}}", root=root).returncode):
        reason = (fetched.stderr.strip().splitlines() or ["not found"])[-1]
        raise ReleaseUnavailable(
            f"previous release {sha[:12]} is not in this clone and `git fetch origin {sha}` "
            f"failed ({reason}): clone with history (git fetch --unshallow) to run the "
            f"upgrade tests")


def build(name: str, sha: str | None = None) -> Release:
    """Release ``name`` (a key of ``PREVIOUS``, or any commit given as ``sha``), built once
    per commit and reused; a file lock keeps two test processes from building it at once."""
    sha = sha or PREVIOUS[name]
    home = CACHE / sha
    src, venv = home / "src", home / "venv"
    marker = home / ".ready"
    if not marker.exists():
        home.mkdir(parents=True, exist_ok=True)
        with open(home / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                ensure_commit(sha)
                _git("worktree", "prune")
                if not (src / "awa").is_dir():
                    added = _git("worktree", "add", "--force", "--detach", str(src), sha)
                    if added.returncode != 0:
                        raise ReleaseUnavailable(f"git worktree add {src} {sha[:12]} failed: "
                                                 f"{added.stderr.strip()}")
                subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip",
                                str(venv)], check=True)
                marker.write_text(f"{name} {sha}\n")
    # The release borrows this interpreter's packages: point it at them on every use (the
    # cache outlives the checkout, and CI's clean clone has a venv of its own).
    pth = next(venv.glob("lib/python*/site-packages")) / "awa-release.pth"
    wanted = "\n".join([str(src), *site.getsitepackages()]) + "\n"
    if not pth.exists() or pth.read_text() != wanted:
        tmp = pth.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(wanted)
        tmp.replace(pth)
    return Release(name, sha, str(venv / "bin" / "python"), src)
