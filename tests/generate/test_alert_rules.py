"""The alert rules: conventions, runbooks, and promtool's own verdict."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from awa_ops.diagnose import CHECKS
from awa_ops.generate import dump_yaml
from awa_ops.generate.alerts import (
    ALERT_RUNBOOK_DIR,
    RULES_FILE,
    RULES_TEST_FILE,
    SEVERITIES,
    Thresholds,
    build_rules,
    rules_document,
    unit_tests_document,
)
from awa_ops.generate.templating import (
    humanize,
    humanize_duration,
    humanize_percentage,
    render_template,
)

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
REQUIRED = [
    "AwaNoActiveRuntime", "AwaNoLeader", "AwaQueueLagHigh", "AwaErrorRateHigh",
    "AwaThroughputCollapsed", "AwaRescuesSpiking", "AwaHeartbeatsStale", "AwaDeadlinesOverdue",
    "AwaDLQGrowing", "AwaXminHorizonPinned", "AwaIdleInTransaction", "AwaDeadTuplesGrowing",
    "AwaUniqueClaimWedged", "AwaMaintenanceOverrun", "AwaExporterDown"
]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: apt-get install prometheus (dev.py test installs it)"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def committed_rules() -> list[dict]:
    return yaml.safe_load((ALERTS / RULES_FILE).read_text())["groups"][0]["rules"]


def test_promtool_checks_and_unit_tests_pass_on_committed_rules():
    checked = promtool("check", "rules", RULES_FILE, cwd=ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", RULES_TEST_FILE, cwd=ALERTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_unit_tests_catch_a_wrong_rule(tmp_path):
    """The promtool tests are not vacuous: a rule with a wrong threshold fails them."""
    rules = (ALERTS / RULES_FILE).read_text()
    broken = rules.replace("(awa_db_queue_lag_seconds) > 300", "(awa_db_queue_lag_seconds) > 3000")
    assert broken != rules
    (tmp_path / RULES_FILE).write_text(broken)
    shutil.copy(ALERTS / RULES_TEST_FILE, tmp_path / RULES_TEST_FILE)
    result = promtool("test", "rules", RULES_TEST_FILE, cwd=tmp_path)
    assert result.returncode != 0
    assert "AwaQueueLagHigh" in result.stdout + result.stderr


def test_tuned_thresholds_ship_with_tests_that_still_pass(tmp_path):
    tuned = Thresholds(queue_lag_seconds=30, error_ratio=0.5, throughput_collapse_ratio=0.5,
                       rescues_per_10m=3, xmin_horizon_age_seconds=1, dead_tuples_min=100,
                       dead_tuple_ratio=0.5, dlq_growth_per_30m=1, leader_changes_per_hour=2,
                       maintenance_overruns_per_15m=1, notification_queue_usage=0.8,
                       for_overrides={"AwaXminHorizonPinned": "1s", "AwaNoLeader": "90s",
                                      "AwaErrorRateHigh": "0s"})
    rules = build_rules(tuned)
    (tmp_path / RULES_FILE).write_text(dump_yaml(rules_document(rules, "")))
    (tmp_path / RULES_TEST_FILE).write_text(dump_yaml(unit_tests_document(rules, "")))
    result = promtool("test", "rules", RULES_TEST_FILE, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_required_alerts_follow_mixin_conventions():
    rules = committed_rules()
    names = [rule["alert"] for rule in rules]
    assert set(REQUIRED) <= set(names)
    assert len(names) == len(set(names))
    for rule in rules:
        assert re.fullmatch(r"Awa[A-Z][A-Za-z]+", rule["alert"])
        assert rule["labels"]["severity"] in SEVERITIES
        assert re.fullmatch(r"\d+[smh]", rule["for"]) and rule["for"] != "0s"
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}
        assert annotations["summary"] and "{{" not in annotations["summary"]
        assert "{{" in annotations["description"], rule["alert"]
        assert annotations["runbook_url"].endswith(f"{ALERT_RUNBOOK_DIR}/{rule['alert']}.md")
    assert {rule["labels"]["severity"] for rule in rules} == set(SEVERITIES)


def test_every_alert_has_a_runbook_linking_its_diagnostic():
    for rule in build_rules(Thresholds()):
        runbook = ROOT / rule.runbook_path
        assert runbook.is_file(), f"missing {rule.runbook_path}"
        text = runbook.read_text()
        assert text.startswith(f"# {rule.name}")
        for heading in ("What it usually means", "How to confirm", "Recovery", "Prevention"):
            assert f"## {heading}" in text, f"{rule.runbook_path}: no '## {heading}'"
        assert rule.runbook_check in CHECKS
        assert f"../{rule.runbook_check}.md" in text, rule.runbook_path
        assert (runbook.parent / f"../{rule.runbook_check}.md").resolve().is_file()
        assert "awa-ops diagnose" in text


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    tests = yaml.safe_load((ALERTS / RULES_TEST_FILE).read_text())["tests"]
    firing: dict[str, int] = {}
    quiet: dict[str, int] = {}
    for group in tests:
        for case in group["alert_rule_test"]:
            bucket = firing if case["exp_alerts"] else quiet
            bucket[case["alertname"]] = bucket.get(case["alertname"], 0) + 1
    names = {rule["alert"] for rule in committed_rules()}
    assert set(firing) == names
    assert set(quiet) == names
    for_by_name = {rule["alert"]: rule["for"] for rule in committed_rules()}
    for group in tests:
        for case in group["alert_rule_test"]:
            if case["exp_alerts"]:  # a firing case is evaluated after the rule's for:
                assert _minutes(case["eval_time"]) > _minutes(for_by_name[case["alertname"]])


def _minutes(duration: str) -> float:
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match is not None, duration
    value, unit = match.groups()
    return int(value) * {"s": 1 / 60, "m": 1, "h": 60}[unit]


@pytest.mark.parametrize("value, text", [(0, "0"), (3, "3"), (1500, "1.5k"), (0.25, "250m"),
                                         (2_345_678, "2.346M")])
def test_humanize_matches_prometheus(value, text):
    assert humanize(value) == text


@pytest.mark.parametrize("value, text", [(0, "0s"), (42, "42s"), (660, "11m 0s"),
                                         (3725, "1h 2m 5s"), (90061, "1d 1h 1m 1s"),
                                         (0.5, "500ms")])
def test_humanize_duration_matches_prometheus(value, text):
    assert humanize_duration(value) == text


def test_humanize_percentage_matches_prometheus():
    assert humanize_percentage(0.3) == "30%"
    assert humanize_percentage(1) == "100%"


def test_render_template_fills_labels_and_values():
    text = ("{{ $value | humanizeDuration }} in {{ $labels.awa_job_queue }} "
            "({{ $value | humanize }})")
    assert render_template(text, {"awa_job_queue": "email"}, 660) == "11m 0s in email (660)"
    with pytest.raises(ValueError, match="not supported"):
        render_template("{{ $value | title }}", {}, 1)
