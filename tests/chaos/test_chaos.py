"""The chaos suite in CI: benchmarks/chaos.py's six real-fault scenarios, at a CI-sized load.

Real worker processes on a private PostgreSQL cluster, SIGKILLed, SIGSTOPped,
cut off by pg_terminate_backend and by a server restart; the verdict comes
from the handlers' own execution log (see benchmarks/chaos.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from awa import config
from awa.runtime.leader import fence_ms
from support.processes import SHORT_INTERVALS

ROOT = Path(__file__).resolve().parents[2]
CHAOS = ROOT / "benchmarks" / "chaos.py"

# One worker runs them all: chaos_results is one run of benchmarks/chaos.py per process.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("chaos")]


@pytest.fixture(scope="module")
def chaos_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("chaos") / "results.json"
    proc = subprocess.run([sys.executable, str(CHAOS), "--jobs", "6000", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=840)
    print(proc.stdout, proc.stderr[-3000:])
    assert out.exists(), f"chaos run wrote no results:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    results = {r["scenario"]: r for r in json.loads(out.read_text())}
    assert proc.returncode == 0, proc.stdout
    return results


@pytest.mark.parametrize("scenario", ["worker_sigkill", "terminate_backends", "pg_restart",
                                      "leader_sigkill", "leader_sigstop", "nonleader_sigstop"])
def test_nothing_lost_twice_or_stuck(chaos_results: dict[str, dict], scenario: str) -> None:
    result = chaos_results[scenario]
    assert (result["lost"], result["twice"], result["stuck"]) == (0, 0, 0), result


def test_killed_workers_attempts_are_run_again(chaos_results: dict[str, dict]) -> None:
    assert chaos_results["worker_sigkill"]["re_executed"] > 0


def test_frozen_leader_is_replaced_and_its_orphans_rescued_while_frozen(
        chaos_results: dict[str, dict]) -> None:
    result = chaos_results["leader_sigstop"]
    election_s = SHORT_INTERVALS["leader_election_interval_ms"] / 1000
    ping_ms = min(SHORT_INTERVALS["leader_election_interval_ms"],
                  config.LEADER_PING_MAX_INTERVAL_MS)
    bound_s = fence_ms(ping_ms) / 1000 + 2 * election_s
    assert result["new_leader_s"] is not None and result["new_leader_s"] <= bound_s, result
    orphaned = int(result["notes"][-1].split()[0])
    assert orphaned > 0 and result["rescued_while_stopped"] == orphaned, result


def test_stopped_worker_is_rescued_while_stopped(chaos_results: dict[str, dict]) -> None:
    result = chaos_results["nonleader_sigstop"]
    orphaned = int(result["notes"][-1].split()[0])
    assert orphaned > 0 and result["rescued_while_stopped"] == orphaned, result


def test_work_resumes_within_a_second_of_the_server_coming_back(
        chaos_results: dict[str, dict]) -> None:
    recovery = chaos_results["pg_restart"]["recovery_s"]
    assert recovery is not None and recovery < 1.0, chaos_results["pg_restart"]
