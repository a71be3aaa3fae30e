"""PromQL helpers shared by the dashboard and alert generators and their tests.

Expressions are written once, here and in the generators, against names taken
from the metric catalogue; this module turns catalogue entries into selectors
and can list the metric and label names an expression refers to, so a test can
prove that nothing outside the catalogue is queried.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Grafana template variables the dashboards use, and what they stand for when
# an expression is evaluated by Prometheus directly (tests, promtool).
QUEUE_VAR = "queue"
DATASOURCE_VAR = "datasource"
GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "5m",
    "${queue:regex}": ".*",
    "$queue": ".*",
}

# Names Prometheus itself attaches to every scraped series or histogram
# sample, or to the series of its alerting rules: they are not in the catalogue
# because no awa code exports them.
ALERTS_SERIES = "ALERTS"
PROMETHEUS_LABELS = frozenset({"le", "job", "instance", "__name__", "alertname", "alertstate"})
PROMETHEUS_METRICS = frozenset({"up", ALERTS_SERIES})

# Everything in PromQL that may be followed by "(" and is not a metric.
FUNCTIONS = frozenset(
    [
        "abs", "absent", "absent_over_time", "avg", "avg_over_time", "bottomk", "ceil",
        "changes", "clamp", "clamp_max", "clamp_min", "count", "count_over_time",
        "count_values", "day_of_month", "day_of_week", "days_in_month", "delta", "deriv",
        "exp", "floor", "group", "histogram_quantile", "holt_winters", "hour", "idelta",
        "increase", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10",
        "log2", "max", "max_over_time", "min", "min_over_time", "minute", "month",
        "predict_linear", "present_over_time", "quantile", "quantile_over_time", "rate",
        "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt", "stddev",
        "stddev_over_time", "stdvar", "stdvar_over_time", "sum", "sum_over_time", "time",
        "timestamp", "topk", "vector", "year"
    ]
)
# Modifiers whose parenthesised argument is a list of label names.
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"}) | LABEL_LIST_KEYWORDS

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_RANGE = re.compile(r"\[[^\]]*\]")
_OFFSET = re.compile(r"\boffset\s+-?\d+[smhdwy]", re.IGNORECASE)
_TOKEN = re.compile(
    r"(?P<num>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?))"
    r"|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"|(?P<punct>[(){},])"
    r"|(?P<other>\S)"
)


@dataclass(frozen=True)
class References:
    metrics: frozenset[str]
    labels: frozenset[str]
    functions: frozenset[str]


def substitute_grafana_variables(expr: str, substitutions: dict[str, str] | None = None) -> str:
    """The expression as Prometheus would receive it from a dashboard."""
    for variable, value in (substitutions or GRAFANA_SUBSTITUTIONS).items():
        expr = expr.replace(variable, value)
    return expr


def references(expr: str) -> References:
    """Metric, label and function names an expression uses (after variable substitution)."""
    text = _STRING.sub('""', substitute_grafana_variables(expr))
    text = _OFFSET.sub(" ", _RANGE.sub(" ", text))
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text)]
    metrics: set[str] = set()
    labels: set[str] = set()
    functions: set[str] = set()
    in_matcher = False
    label_list_depth = 0
    pending_label_list = False
    for index, (kind, value) in enumerate(tokens):
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "punct":
            if value == "{":
                in_matcher = True
            elif value == "}":
                in_matcher = False
            elif value == "(" and pending_label_list:
                label_list_depth, pending_label_list = 1, False
            elif value == ")" and label_list_depth:
                label_list_depth = 0
            continue
        if kind != "ident":
            continue
        if label_list_depth:
            labels.add(value)
        elif in_matcher:
            # inside {...}: label names precede a matcher operator
            labels.add(value)
        elif value.lower() in KEYWORDS:
            pending_label_list = value.lower() in LABEL_LIST_KEYWORDS and following == "("
        elif following == "(" or (value in FUNCTIONS and following.lower() in ("by", "without")):
            functions.add(value)
        else:
            metrics.add(value)
    return References(frozenset(metrics), frozenset(labels), frozenset(functions))


def grafana_variable_query_references(query: str) -> References:
    """Names in a Grafana Prometheus variable query: ``label_values(metric, label)``."""
    match = re.fullmatch(
        r"\s*label_values\(\s*(?P<selector>.+?)\s*,\s*(?P<label>\w+)\s*\)\s*", query)
    if match is None:
        raise ValueError(f"unsupported variable query {query!r}")
    inner = references(match["selector"])
    return References(inner.metrics, inner.labels | {match["label"]}, inner.functions)


def selector(metric: str, **matchers: str) -> str:
    """``metric{label=~"value",...}``; values starting with ``=`` or ``!`` keep their operator."""
    if not matchers:
        return metric
    parts = []
    for label, value in matchers.items():
        op = "=~"
        for prefix in ("!=", "!~", "=~", "="):
            if value.startswith(prefix):
                op, value = prefix, value[len(prefix):]
                break
        parts.append(f'{label}{op}"{value}"')
    return f"{metric}{{{', '.join(parts)}}}"
