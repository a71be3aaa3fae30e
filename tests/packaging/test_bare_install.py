"""``pip install awa-py`` with no extra: the runtime, the CLI and metrics, and nothing else.

One fresh virtualenv per test run (pip's own cache makes the install take about a
minute) gets the package built from this checkout, without any extra.  In it a
real worker runs a job against the test database while none of the extras'
modules can be imported, and each command of an extra says in one line which
extra to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from awa.extras import MODULES, install_hint

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("bare-install")]


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding ``awa-py`` as ``pip install`` (no extra) installs it."""
    base = tmp_path_factory.mktemp("bare")
    # A copy of what the distribution is built from: the build writes nothing into the checkout.
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("awa", "awa_ops", "awa_tui"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", str(source)],
                          capture_output=True, text=True, timeout=840, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv / "bin"


def _env() -> dict[str, str]:
    """Nothing of this checkout or of the dev venv on the path of the bare venv's programs."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def run(bare: Path, program: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bare / program), *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=_env())


WORKER = textwrap.dedent("""
    import asyncio, importlib.util, json, sys
    from dataclasses import dataclass

    import awa

    EXTRAS = json.loads(sys.argv[2])

    @dataclass
    class Ping:
        n: int

    async def main():
        client = awa.AsyncClient(sys.argv[1])
        done = []

        @client.task(Ping)
        async def ping(job):
            done.append(job.args.n)

        await client.start([("default", 2)], poll_interval_ms=50)
        job = await client.insert(Ping(7))
        for _ in range(400):
            if (await client.get_job(job.id)).state == awa.JobState.Completed:
                break
            await asyncio.sleep(0.05)
        await client.shutdown(timeout_ms=2000)
        importable = [m for mods in EXTRAS.values() for m in mods
                      if importlib.util.find_spec(m) is not None]
        loaded = [m for mods in EXTRAS.values() for m in mods if m in sys.modules]
        print(json.dumps({"file": awa.__file__, "state": str((await client.get_job(job.id)).state),
                          "done": done, "importable": importable, "loaded": loaded}))

    asyncio.run(main())
""")


def test_a_worker_runs_with_no_extra_installed(bare_venv, database_url, tmp_path):
    import json

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = run(bare_venv, "python", str(script), database_url, json.dumps(MODULES), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["file"].startswith(str(ROOT)), out  # the installed package, not the checkout
    assert out["importable"] == [] and out["loaded"] == [], out
    assert out["done"] == [7] and out["state"].lower().endswith("completed"), out


def test_each_extras_command_names_its_extra_in_one_line(bare_venv, database_url, tmp_path):
    tui = run(bare_venv, "awa-tui", "--database-url", database_url, cwd=tmp_path)
    assert tui.returncode != 0
    assert tui.stderr.strip() == f"error: {install_hint('tui', 'awa-tui')}", tui.stderr

    serve = run(bare_venv, "awa", "serve", "--database-url", database_url, cwd=tmp_path)
    assert serve.returncode != 0
    assert serve.stderr.strip() == f"error: {install_hint('tui', 'awa serve')}", serve.stderr

    generate = run(bare_venv, "awa-ops", "generate", "--check", cwd=tmp_path)
    assert generate.returncode != 0
    assert generate.stderr.strip() == \
        f"error: {install_hint('ops', 'awa-ops generate')}", generate.stderr

    receiver = run(bare_venv, "awa", "callbacks", "serve", "--allow-unsigned",
                   "--database-url", database_url, cwd=tmp_path)
    assert receiver.returncode != 0
    assert receiver.stderr.strip() == \
        f"error: {install_hint('callbacks', 'awa callbacks serve')}", receiver.stderr

    # The core commands work, and listing them warns about no missing plugin.
    help_ = run(bare_venv, "awa", "--help", cwd=tmp_path)
    assert help_.returncode == 0 and "serve" in help_.stdout and help_.stderr == "", help_.stderr
    health = run(bare_venv, "awa-ops", "diagnose", "schema", "--database-url", database_url,
                 cwd=tmp_path)
    assert health.returncode == 0, health.stdout + health.stderr
