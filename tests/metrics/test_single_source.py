"""The catalogue is the only place metric names, labels and attribute keys are written.

Scans the string literals (f-strings included; docstrings excluded: they are
documentation) of awa/, awa_ops/ and awa_tui/ outside awa/metrics.py for:

* attribute keys (``awa.job.queue``) — code must use ``metrics.ATTR_*``;
* Prometheus names and labels (``awa_job_completed_total``,
  ``awa_job_duration_seconds_bucket``, ``awa_job_queue``) — code must derive
  them with ``prometheus_name(entry)`` / ``entry.labels``;
* OTel metric names inside a larger string (a hand-written query or message).

A literal that is exactly a catalogue metric name (``by_name("awa.job.completed")``,
``_family("awa.db.queue.depth")``) is a key into the catalogue, not a copy of it:
it is allowed, and it cannot drift — the lookup fails if the name is renamed.
It also checks that no code outside ``awa/instruments.py`` creates OTel instruments and that
the catalogue itself stays data: it imports neither OpenTelemetry nor the rest of awa.
Generated artefacts (dashboards/, alerts/) are produced from the catalogue and
checked by the generator's own --check test, so they are not scanned here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from awa import metrics

ROOT = Path(__file__).resolve().parents[2]
SCANNED_PACKAGES = ("awa", "awa_ops", "awa_tui")
CATALOGUE = ROOT / "awa" / "metrics.py"
INSTRUMENTS = ROOT / "awa" / "instruments.py"

ATTRIBUTE_KEYS = {value for name, value in vars(metrics).items()
                  if name.startswith("ATTR_") and isinstance(value, str)}
METRIC_NAMES = {e.name for e in metrics.ALL_METRICS}
OTEL_WORDS = METRIC_NAMES | ATTRIBUTE_KEYS
PROMETHEUS_WORDS = ({series for e in metrics.ALL_METRICS for series in metrics.prometheus_series(e)}
                    | {metrics.prometheus_label(key) for key in ATTRIBUTE_KEYS})
DOTTED = re.compile(r"\bawa(?:\.[a-z_]+)+")
UNDERSCORED = re.compile(r"\bawa_[a-z_]+")
# Legend / annotation templates ("{{awa_job_queue}}", "{{ $labels.awa_job_queue }}") are
# display text: a renamed label blanks a legend, it cannot break a query or an alert.
TEMPLATE = re.compile(r"\{\{[^}]*\}\}")
INSTRUMENT_FACTORIES = re.compile(
    r"\.create_(?:counter|up_down_counter|histogram|gauge|observable_\w+)\(")


def _docstring_nodes(tree: ast.AST) -> set[int]:
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def stray_names(path: Path) -> list[str]:
    """``line: word`` for every catalogue name, label or key copied into a literal of ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    documentation = _docstring_nodes(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if (not isinstance(node, ast.Constant) or not isinstance(node.value, str)
                or id(node) in documentation or node.value in METRIC_NAMES):
            continue
        text = TEMPLATE.sub("", node.value)
        words = (set(DOTTED.findall(text)) & OTEL_WORDS) | (
            set(UNDERSCORED.findall(text)) & PROMETHEUS_WORDS)
        found.extend(f"{node.lineno}: {word}" for word in sorted(words))
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def scanned_files():
    for package in SCANNED_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != CATALOGUE:
                yield path


def test_no_metric_name_or_attribute_key_is_written_outside_the_catalogue():
    stray = [f"{path.relative_to(ROOT)}:{hit}"
             for path in scanned_files() for hit in stray_names(path)]
    assert stray == [], ("metric names and attribute keys are written only in awa/metrics.py; "
                         "import its constants (ATTR_*) or use prometheus_name(entry):\n"
                         + "\n".join(stray))


def test_no_instrument_is_created_outside_awa_instruments():
    creators = [f"{path.relative_to(ROOT)}" for path in scanned_files()
                if path != INSTRUMENTS and INSTRUMENT_FACTORIES.search(path.read_text())]
    assert creators == [], f"instruments must come from awa.instruments.METRICS: {creators}"


def test_only_recording_and_telemetry_use_the_instruments():
    """Code records through awa.recording (one function per event), never on METRICS itself;
    awa.telemetry reads the instruments' histogram points to export them."""
    users = []
    for path in scanned_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            if "awa.instruments" in names:
                users.append(str(path.relative_to(ROOT)))
    assert sorted(set(users)) == ["awa/recording.py", "awa/telemetry.py"], users


def test_the_catalogue_is_data_only():
    """awa/metrics.py holds names, kinds, units, labels, help and buckets: no instrument, no
    recording (awa.instruments, awa.recording), so it imports no OpenTelemetry and no awa."""
    imported = set()
    for node in ast.walk(ast.parse(CATALOGUE.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert not {m for m in imported if m.split(".")[0] in ("opentelemetry", "awa")}, imported
    assert not INSTRUMENT_FACTORIES.search(CATALOGUE.read_text())


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scanner must flag each form, or the tests above prove nothing."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docs may mention awa.job.completed and awa_job_completed_total."""\n'
        'A = "awa.job.completed"\n'  # a catalogue key, allowed
        "B = f'rate(awa_job_completed_total[5m]) by ({q})'\n"
        'C = {"awa.job.queue": q}\n'
        'D = "histogram_quantile(0.9, awa_job_duration_seconds_bucket)"\n'
        'E = "SELECT * FROM awa.jobs_hot JOIN awa.queue_meta USING (queue)"\n'
        'F = logging.getLogger("awa.runtime.heartbeat")\n'
        'G = "sum by (awa_job_queue) (x)"\n'
        'H = metrics.by_name("awa.job.failed").prometheus\n'
        'I = "expected awa.job.failed to grow"\n'
        'J = "{{ $labels.awa_job_queue }} lags: " + "max by (awa_job_queue) (x)"\n')
    assert stray_names(sample) == [
        "3: awa_job_completed_total", "4: awa.job.queue",
        "5: awa_job_duration_seconds_bucket", "8: awa_job_queue", "10: awa.job.failed",
        "11: awa_job_queue"]


def test_label_values_the_runtime_uses_are_the_catalogue_s():
    """Dashboards filter on these values; the runtime's constants must be the catalogue's."""
    from awa.runtime import dispatcher
    from awa.runtime.maintenance import rescue

    assert {dispatcher.REASON_NOTIFY, dispatcher.REASON_POLL, dispatcher.REASON_CAPACITY} \
        == set(metrics.DISPATCH_REASONS)
    assert {rescue.HEARTBEAT_STALE.name, rescue.DEADLINE_EXCEEDED.name,
            rescue.CALLBACK_TIMEOUT.name} == set(metrics.RESCUE_KINDS)
