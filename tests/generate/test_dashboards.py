"""The dashboards: valid for Grafana's import; every query parses and names only catalogue names."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from awa import metrics
from awa_ops.diagnose import CHECKS
from awa_ops.findings import runbook
from awa_ops.generate.promql import (
    FUNCTIONS,
    PROMETHEUS_LABELS,
    PROMETHEUS_METRICS,
    grafana_variable_query_references,
    references,
    substitute_grafana_variables,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RULES = ROOT / "alerts" / "awa-rules.yml"
TITLES = {"Awa overview", "Awa workers and dispatch", "Awa maintenance", "Awa Postgres health"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def all_panels(dashboard: dict) -> list[dict]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def dashboard_expressions() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, expr) for every target of every dashboard."""
    return [(d["title"], panel["title"], target["expr"])
            for d in map(load, DASHBOARDS) for panel in all_panels(d)
            for target in panel.get("targets", [])] + \
        [(d["title"], f"annotation {a['name']}", a["expr"])
         for d in map(load, DASHBOARDS) for a in d["annotations"]["list"]]


def rule_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return [(rule["alert"], rule["expr"]) for rule in rules]


def unknown_names(expr: str) -> list[str]:
    """Metric, label and function names in ``expr`` that the catalogue (or PromQL) lacks."""
    refs = references(expr)
    problems = [f"function {name}" for name in refs.functions - FUNCTIONS]
    allowed_labels = set(PROMETHEUS_LABELS)
    for name in refs.metrics:
        entry = metrics.by_prometheus_name(name)
        if entry is None and name not in PROMETHEUS_METRICS:
            problems.append(f"metric {name}")
        elif entry is not None:
            allowed_labels.update(entry.labels)
    problems += [f"label {label}" for label in refs.labels - allowed_labels]
    return problems


def test_the_four_dashboards_exist():
    assert {load(path)["title"] for path in DASHBOARDS} == TITLES


def test_dashboards_are_valid_for_grafana_import():
    uids = set()
    for path in DASHBOARDS:
        dashboard = load(path)
        assert dashboard["schemaVersion"] >= 36
        assert dashboard["uid"] and dashboard["uid"] not in uids and len(dashboard["uid"]) <= 40
        assert isinstance(dashboard["annotations"]["list"], list)  # Grafana iterates it on load
        for annotation in dashboard["annotations"]["list"]:
            assert annotation["datasource"]["uid"] == "${datasource}"
        uids.add(dashboard["uid"])
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        assert variables["queue"]["type"] == "query"
        assert variables["queue"]["datasource"]["uid"] == "${datasource}"
        assert variables["queue"]["includeAll"] and variables["queue"]["multi"]
        cells = [(x, y) for panel in all_panels(dashboard)
                 for grid in [panel["gridPos"]]
                 for x in range(grid["x"], grid["x"] + grid["w"])
                 for y in range(grid["y"], grid["y"] + grid["h"])]
        assert len(cells) == len(set(cells)), f"{path.name}: panels overlap"
        ids = [panel["id"] for panel in all_panels(dashboard)]
        assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
        for panel in all_panels(dashboard):
            grid = panel["gridPos"]
            assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
            if panel["type"] == "row":
                continue
            where = f"{path.name}: {panel['title']}"
            assert panel["description"].strip(), where
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            assert panel["fieldConfig"]["defaults"]["unit"], where
            assert panel["fieldConfig"]["defaults"]["thresholds"]["steps"], where
            ref_ids = [target["refId"] for target in panel["targets"]]
            assert ref_ids and len(ref_ids) == len(set(ref_ids)), where
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", where
                assert target["expr"].strip(), where


def test_dashboards_link_runbooks_that_exist():
    linked = set()
    for path in DASHBOARDS:
        dashboard = load(path)
        assert any(link["type"] == "link" and link["url"].endswith("runbooks/")
                   for link in dashboard["links"])
        for panel in all_panels(dashboard):
            for link in panel.get("links", []):
                relative = "runbooks/" + link["url"].split("runbooks/", 1)[1]
                linked.add(relative)
    assert any(path.startswith("runbooks/alerts/") for path in linked)
    assert any(not path.startswith("runbooks/alerts/") for path in linked)
    missing = sorted(path for path in linked if not (ROOT / path).is_file())
    assert not missing, f"panels link runbooks that do not exist: {missing}"
    # the others are the runbooks of `awa-ops diagnose` checks, the paths their findings print
    assert {path for path in linked if not path.startswith("runbooks/alerts/")} <= \
        {runbook(check) for check in CHECKS}


def test_every_query_names_only_catalogue_metrics_and_labels():
    expressions = [(f"{d}/{p}", e) for d, p, e in dashboard_expressions()] + rule_expressions()
    assert len(expressions) > 60
    problems = {where: unknown_names(expr) for where, expr in expressions if unknown_names(expr)}
    assert not problems, problems
    for path in DASHBOARDS:
        for variable in load(path)["templating"]["list"]:
            if variable["type"] == "query":
                refs = grafana_variable_query_references(variable["query"])
                (metric,) = refs.metrics
                assert metrics.by_prometheus_name(metric) is not None
                assert refs.labels <= set(metrics.by_prometheus_name(metric).labels)


def test_the_name_check_can_fail():
    assert "metric awa_jobs_done_total" in \
        unknown_names('sum(rate(awa_jobs_done_total{awa_job_queue="x"}[5m]))')
    assert unknown_names('sum by (queue) (awa_job_in_flight)') == ["label queue"]
    assert unknown_names('max by (awa_db_table) (awa_job_in_flight)') == ["label awa_db_table"]
    assert unknown_names(
        "histogram_quantile(0.9, sum by (le) (rate(awa_job_duration_seconds_bucket[5m])))") == []


def test_every_dashboard_query_parses(tmp_path):
    """promtool parses each dashboard expression, as a recording rule."""
    rules = [{"record": f"awa:dashboard_query:{index}", "expr": substitute_grafana_variables(expr)}
             for index, (_, _, expr) in enumerate(dashboard_expressions())]
    rule_file = tmp_path / "dashboard-queries.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([shutil.which("promtool") or "promtool", "check", "rules",
                             str(rule_file)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_every_catalogue_metric_is_on_a_dashboard():
    used = set()
    for _, _, expr in dashboard_expressions():
        for name in references(expr).metrics:
            entry = metrics.by_prometheus_name(name)
            if entry is not None:
                used.add(entry.name)
    assert {entry.name for entry in metrics.ALL_METRICS} - used == set()


def test_dashboards_round_trip_through_the_grafana_schema_model():
    """Decoding with the SDK's dashboard model (Grafana's schema), then encoding, loses nothing."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    for path in DASHBOARDS:
        original = load(path)
        decoded = Dashboard.from_json(original)
        assert json.loads(json.dumps(decoded, cls=JSONEncoder)) == original, path.name
