"""What a diagnostic returns, and how it is shown to an operator or a machine.

A check never prints: it returns a ``CheckResult`` of ``Finding``s, so the
CLI, ``--json``, the TUI and ``diagnose all`` render the same facts.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

RUNBOOK_DIR = "runbooks"


class Severity(enum.IntEnum):
    """Ordered so the worst of several is ``max()``; the value is the exit status."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    ERROR = 3  # the check could not run

    @property
    def label(self) -> str:
        return "could not run" if self is Severity.ERROR else self.name.lower()


def runbook(name: str) -> str:
    return f"{RUNBOOK_DIR}/{name}.md"


@dataclass
class Finding:
    severity: Severity
    summary: str  # what was seen, one line
    why: str = ""  # why it matters
    next_step: str | None = None  # a command the operator can run
    evidence: list[dict[str, Any]] = field(default_factory=list)
    runbook: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity.label,
            "summary": self.summary,
            "why": self.why,
            "next_step": self.next_step,
            "runbook": self.runbook,
            "evidence": [{k: plain(v) for k, v in row.items()} for row in self.evidence],
        }


@dataclass
class CheckResult:
    check: str
    findings: list[Finding] = field(default_factory=list)
    engine: str | None = None
    error: str | None = None  # set when the check could not run
    duration_ms: float = 0.0

    @property
    def severity(self) -> Severity:
        if self.error is not None:
            return Severity.ERROR
        return max((f.severity for f in self.findings), default=Severity.OK)

    @property
    def exit_code(self) -> int:
        return int(self.severity)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity > Severity.OK]

    def headline(self) -> str:
        if self.error is not None:
            return self.error
        worst = self.problems
        if worst:
            first = max(worst, key=lambda f: f.severity)
            more = f" (+{len(worst) - 1} more)" if len(worst) > 1 else ""
            return first.summary + more
        return self.findings[0].summary if self.findings else "nothing to report"

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.severity.label,
            "exit_code": self.exit_code,
            "engine": self.engine,
            "error": self.error,
            "duration_ms": round(self.duration_ms, 1),
            "findings": [f.to_dict() for f in self.findings],
        }


def worst(results: Iterable[CheckResult]) -> Severity:
    return max((r.severity for r in results), default=Severity.OK)


def plain(value: Any) -> Any:
    """A JSON-safe, human-readable form of a database value."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, (UUID,)):
        return str(value)
    if isinstance(value, (bytes, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def to_json(results: list[CheckResult]) -> str:
    """One shape for one check and for ``all``: ``status``, ``exit_code``, ``checks`` (one
    object per check) and ``findings`` (every check's, each naming its ``check``); one
    check's own fields stay at the top level too."""
    checks = [r.to_dict() for r in results]
    findings = [{**f, "check": c["check"]} for c in checks for f in c.get("findings") or []]
    top = {"status": worst(results).label, "exit_code": int(worst(results)), "checks": checks,
           "findings": findings}
    if len(results) == 1:
        top = {**checks[0], **top, "findings": checks[0].get("findings") or []}
    return json.dumps(top, indent=2)
