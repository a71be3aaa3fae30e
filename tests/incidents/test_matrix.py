"""The compressed incident matrix (issue 46): each scenario of expected.yaml marked ``ci``,
against real worker processes, `awa-ops exporter` and a real Prometheus, on the default
engine; a false or missing signal fails.  benchmarks/incident_matrix.py runs every scenario on
both engines and prints precision, recall and time to detect."""

from __future__ import annotations

import pytest

from incidents.scenarios import expectations, run
from support.server_connections import with_worker_processes

CI_SCENARIOS = [name for name, spec in expectations().items() if spec.get("ci")]


# three worker processes at most (a rolling restart), the exporter, the observers, a producer
@pytest.mark.connections(with_worker_processes(3, besides=14))
@pytest.mark.timeout(420)  # the longest scenario plays two production hours in 120 s
@pytest.mark.parametrize("scenario", CI_SCENARIOS)
def test_every_signal_says_what_the_matrix_expects(scenario, database_url, tmp_path):
    verdict = run(scenario, database_url, tmp_path, ci=True)
    assert not verdict.problems, f"{scenario}:\n  " + "\n  ".join(verdict.problems)
