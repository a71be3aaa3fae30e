"""Run the real `awa-ops` command and read its JSON (shared by tests/ops)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

# Short intervals matching tests/support's SHORT_INTERVALS, passed to the checks.
FAST_FLAGS = ["--heartbeat-staleness", "1", "--election-interval", "0.2"]


@dataclass
class OpsRun:
    code: int
    stdout: str
    stderr: str

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def findings(self) -> list[dict[str, Any]]:
        return self.data["findings"]

    def check(self, name: str) -> dict[str, Any]:
        return next(c for c in self.data["checks"] if c["check"] == name)


def run_ops(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> OpsRun:
    proc = subprocess.run([sys.executable, "-m", "awa_ops.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    return OpsRun(proc.returncode, proc.stdout, proc.stderr)


def summaries(result: dict[str, Any]) -> str:
    return "\n".join(f"{f['severity']}: {f['summary']}" for f in result["findings"])
