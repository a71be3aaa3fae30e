"""The compressed incident matrix (issue 46): each scenario of expected.yaml marked ``ci``,
against real worker processes, `awa-ops exporter` and a real Prometheus, on the default
engine; a false or missing signal fails.  benchmarks/incident_matrix.py runs every scenario on
both engines and prints precision, recall and time to detect."""

from __future__ import annotations

import pytest

from incidents.scenarios import expectations, run
from support.server_connections import with_worker_processes

# Each scenario reserves its worker processes (three at once in a rolling restart, else
# two) and the exporter, the observers and a producer beside them.
CI_SCENARIOS = [pytest.param(name, marks=pytest.mark.connections(with_worker_processes(
    3 if name == "rolling_restart" else 2, besides=8)))
    for name, spec in expectations().items() if spec.get("ci")]


# One xdist worker plays them one after another (about 6 minutes): each is a fleet with its
# own Prometheus, timed against its clock, and two at once on a 2-core CI machine beside
# the rest of the suite would judge the machine's load, not the signals.
@pytest.mark.xdist_group("incidents")
@pytest.mark.timeout(420)  # the longest scenario plays two production hours in 120 s
@pytest.mark.parametrize("scenario", CI_SCENARIOS)
def test_every_signal_says_what_the_matrix_expects(scenario, database_url, tmp_path):
    verdict = run(scenario, database_url, tmp_path, ci=True)
    assert not verdict.problems, f"{scenario}:\n  " + "\n  ".join(verdict.problems)
