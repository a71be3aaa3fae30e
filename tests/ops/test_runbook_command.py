"""`awa-ops runbook NAME` prints a runbook shipped inside the package; the runbook base
URL of `awa-ops generate` can be set once (env var or config file)."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

import yaml
from click.testing import CliRunner

from awa_ops.cli import main, runbook_files

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def test_every_runbook_is_package_data():
    """The wheel carries them: pyproject's package-data globs cover every file."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["awa_ops"]
    packaged = {Path(p).resolve() for g in globs for p in glob.glob(str(ROOT / "awa_ops" / g))}
    on_disk = {p.resolve() for p in (ROOT / "awa_ops" / "runbooks").rglob("*.md")}
    assert on_disk and on_disk <= packaged
    assert (ROOT / "runbooks").resolve() == (ROOT / "awa_ops" / "runbooks").resolve()
    assert {"stuck-running", "dlq", "alerts/AwaNoLeader"} <= set(runbook_files())


def test_runbook_prints_one_by_check_or_alert_name():
    result = run("runbook", "stuck-running")
    assert result.exit_code == 0
    assert result.stdout == (ROOT / "awa_ops/runbooks/stuck-running.md").read_text()
    result = run("runbook", "AwaNoLeader")
    assert result.exit_code == 0 and result.stdout.startswith("# AwaNoLeader")
    assert run("runbook", "runbooks/dlq.md").exit_code == 0  # the path findings print works too


def test_unknown_runbook_is_one_line_listing_the_known_ones():
    result = run("runbook", "stuck")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("awa-ops: no runbook 'stuck'; known: ")
    assert "stuck-running" in lines[0] and "alerts/AwaNoLeader" in lines[0]


def test_runbook_without_a_name_lists_them():
    result = run("runbook")
    assert result.exit_code == 0 and "stuck-running" in result.stdout.split()


def _runbook_url(out: Path) -> str:
    groups = yaml.safe_load((out / "alerts" / "awa-rules.yml").read_text())["groups"]
    rules = {rule["alert"]: rule for rule in groups[0]["rules"]}
    return rules["AwaNoLeader"]["annotations"]["runbook_url"]


def test_runbook_base_url_from_env_then_config_file_and_the_flag_wins(tmp_path):
    config = tmp_path / "awa-ops.toml"
    config.write_text('runbook_base_url = "https://wiki.example/ops/"\n')
    env = {"AWA_OPS_CONFIG": str(config), "AWA_RUNBOOK_BASE_URL": ""}
    assert run("generate", "--out", str(tmp_path / "a"), env=env).exit_code == 0
    assert _runbook_url(tmp_path / "a") == "https://wiki.example/ops/runbooks/alerts/AwaNoLeader.md"
    env["AWA_RUNBOOK_BASE_URL"] = "https://env.example/"
    assert run("generate", "--out", str(tmp_path / "b"), env=env).exit_code == 0
    assert _runbook_url(tmp_path / "b") == "https://env.example/runbooks/alerts/AwaNoLeader.md"
    assert run("generate", "--out", str(tmp_path / "c"), "--runbook-base-url",
               "https://flag.example/", env=env).exit_code == 0
    assert _runbook_url(tmp_path / "c") == "https://flag.example/runbooks/alerts/AwaNoLeader.md"


def test_an_unreadable_config_file_is_one_clear_line(tmp_path):
    config = tmp_path / "awa-ops.toml"
    config.write_text("runbook_base_url = \n")
    result = run("runbook", env={"AWA_OPS_CONFIG": str(config)})
    assert result.exit_code == 3 and result.stderr.startswith(f"awa-ops: cannot read {config}")
