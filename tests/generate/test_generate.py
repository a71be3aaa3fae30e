"""`awa-ops generate`: the committed artefacts are current, and --check catches drift."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from awa_ops.cli import main
from awa_ops.generate import ALERTS_DIR, DASHBOARDS_DIR, render
from awa_ops.generate.alerts import RULES_FILE, Thresholds, build_rules

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str):
    return CliRunner().invoke(main, ["generate", *args])


def copy_artefacts(target: Path) -> Path:
    for directory in (DASHBOARDS_DIR, ALERTS_DIR):
        shutil.copytree(ROOT / directory, target / directory)
    return target


def test_committed_files_are_up_to_date():
    result = run("--check", "--out", str(ROOT))
    assert result.exit_code == 0, result.stderr
    assert "up to date" in result.output


def test_check_fails_on_a_changed_and_on_a_missing_file(tmp_path):
    out = copy_artefacts(tmp_path)
    rules = out / ALERTS_DIR / RULES_FILE
    rules.write_text(rules.read_text().replace("for: 5m", "for: 1m", 1))
    (out / DASHBOARDS_DIR / "awa-maintenance.json").unlink()
    result = run("--check", "--out", str(out))
    assert result.exit_code == 1
    assert f"out of date: {ALERTS_DIR}/{RULES_FILE}" in result.stderr
    assert f"out of date: {DASHBOARDS_DIR}/awa-maintenance.json" in result.stderr
    assert "awa-overview.json" not in result.stderr
    # --check writes nothing
    assert not (out / DASHBOARDS_DIR / "awa-maintenance.json").exists()


def test_generate_writes_every_file_then_is_idempotent(tmp_path):
    first = run("--out", str(tmp_path))
    assert first.exit_code == 0, first.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) \
        == sorted(render())
    second = run("--check", "--out", str(tmp_path))
    assert second.exit_code == 0
    groups = yaml.safe_load((tmp_path / ALERTS_DIR / RULES_FILE).read_text())["groups"]
    rules = {rule["alert"]: rule for rule in groups[0]["rules"]}
    assert rules["AwaNoLeader"]["annotations"]["runbook_url"] == "runbooks/alerts/AwaNoLeader.md"


def test_thresholds_file_changes_rules_and_their_tests(tmp_path):
    overrides = tmp_path / "thresholds.yml"
    overrides.write_text("queue_lag_seconds: 42\nfor:\n  AwaNoLeader: 1m\n")
    result = run("--out", str(tmp_path / "out"), "--thresholds", str(overrides),
                 "--runbook-base-url", "https://runbooks.example/")
    assert result.exit_code == 0, result.stderr
    groups = yaml.safe_load((tmp_path / "out" / ALERTS_DIR / RULES_FILE).read_text())["groups"]
    rules = {rule["alert"]: rule for rule in groups[0]["rules"]}
    assert rules["AwaQueueLagHigh"]["expr"].endswith("> 42")
    assert rules["AwaNoLeader"]["for"] == "1m"
    assert rules["AwaNoLeader"]["annotations"]["runbook_url"] == \
        "https://runbooks.example/runbooks/alerts/AwaNoLeader.md"


def test_bad_thresholds_file_is_one_clear_line(tmp_path):
    unknown = tmp_path / "unknown.yml"
    unknown.write_text("queue_lag: 10\n")
    result = run("--out", str(tmp_path), "--thresholds", str(unknown))
    assert result.exit_code == 2
    assert "unknown threshold 'queue_lag'" in result.stderr
    assert "Traceback" not in result.stderr

    bad_for = tmp_path / "bad_for.yml"
    bad_for.write_text("for:\n  AwaNoLeader: soon\n")
    result = run("--out", str(tmp_path), "--thresholds", str(bad_for))
    assert result.exit_code == 2
    assert "for.AwaNoLeader must be a duration" in result.stderr

    missing = run("--out", str(tmp_path), "--thresholds", str(tmp_path / "nope.yml"))
    assert missing.exit_code == 2
    assert "cannot read thresholds file" in missing.stderr
    assert not (tmp_path / ALERTS_DIR).exists()  # no partial writes


def test_render_depends_only_on_its_inputs():
    assert render() == render(Thresholds())
    assert render(Thresholds(error_ratio=0.3)) != render()
    assert len(build_rules(Thresholds())) == len(build_rules(Thresholds(error_ratio=0.3)))


def test_unwritable_output_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / DASHBOARDS_DIR).write_text("a file where a directory belongs")
    result = run("--out", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: cannot write under")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / ALERTS_DIR).exists()
