"""Generated operator artefacts: Grafana dashboards and Prometheus alert rules (+ promtool tests).

``generate(out_dir)`` writes ``dashboards/*.json`` and ``alerts/*.yml`` under
``out_dir``; ``generate(out_dir, check=True)`` writes nothing and returns the
files that differ from what the code produces, so CI can fail on drift.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from awa_ops.generate.alerts import (
    DEFAULT_RUNBOOK_BASE_URL,
    RULES_FILE,
    RULES_TEST_FILE,
    Thresholds,
    build_rules,
    readme,
    rules_document,
    unit_tests_document,
)
from awa_ops.generate.dashboards import build_dashboards

DASHBOARDS_DIR = "dashboards"
ALERTS_DIR = "alerts"


class _BlockStyleDumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML ships no types
    """Multi-line strings (PromQL) as readable literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockStyleDumper.add_representer(str, _represent_str)


def dump_yaml(document: dict[str, Any]) -> str:
    text: str = yaml.dump(document, Dumper=_BlockStyleDumper, sort_keys=False,
                          width=1_000_000, allow_unicode=True)
    return text


def render(thresholds: Thresholds | None = None,
           runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL) -> dict[str, str]:
    """Relative path -> file content of every generated artefact."""
    thresholds = thresholds or Thresholds()
    rules = build_rules(thresholds)
    files = {f"{DASHBOARDS_DIR}/{name}": text
             for name, text in build_dashboards(thresholds, runbook_base_url).items()}
    files[f"{ALERTS_DIR}/{RULES_FILE}"] = dump_yaml(rules_document(rules, runbook_base_url))
    files[f"{ALERTS_DIR}/{RULES_TEST_FILE}"] = dump_yaml(
        unit_tests_document(rules, runbook_base_url))
    files[f"{ALERTS_DIR}/README.md"] = readme(rules, thresholds)
    return files


def generate(out_dir: str | Path, check: bool = False, thresholds: Thresholds | None = None,
             runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL) -> list[str]:
    """Write the artefacts under ``out_dir`` (or, with ``check``, only compare).

    Returns the relative paths that were written (or, with ``check``, that are
    missing or differ).
    """
    out = Path(out_dir)
    files = render(thresholds, runbook_base_url)
    changed = [relative for relative, text in files.items()
               if not (out / relative).is_file() or (out / relative).read_text() != text]
    if check or not changed:
        return changed
    for relative in changed:  # every directory first, then each file replaced atomically
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
    for relative in changed:
        path = out / relative
        partial = path.with_name(f".{path.name}.tmp")
        partial.write_text(files[relative])
        os.replace(partial, path)
    return changed
