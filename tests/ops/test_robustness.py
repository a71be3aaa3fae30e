"""Issue 13: numbers are floats at the SQL boundary; a check's bug is "could not run", alone."""

from __future__ import annotations

from awa_ops import diagnose
from awa_ops.findings import Severity, worst
from awa_ops.session import OpsSession


async def test_numeric_results_are_floats(database_url):
    async with await OpsSession.open(database_url) as session:
        row = await session.fetch_one(
            "SELECT EXTRACT(EPOCH FROM now() - (now() - interval '2 seconds')) AS age")
    assert isinstance(row["age"], float) and row["age"] == 2.0
    assert 3.5 - row["age"] == 1.5  # a Decimal here was the TypeError of issue 13


async def test_a_check_that_crashes_could_not_run_and_the_others_still_run(database_url,
                                                                           monkeypatch):
    module = diagnose.check_module("heartbeats")

    async def broken(session, engine, options):
        return 1.0 - __import__("decimal").Decimal(1)  # TypeError, as in issue 13

    monkeypatch.setattr(module, "check", broken)
    async with await OpsSession.open(database_url) as session:
        results = await diagnose.run_all(session, names=["schema", "heartbeats", "runtime"])
    by_name = {r.check: r for r in results}
    crashed = by_name["heartbeats"]
    assert crashed.severity is Severity.ERROR and crashed.exit_code == 3
    assert crashed.error.startswith("heartbeats could not run: TypeError: unsupported operand")
    assert "\n" not in crashed.error
    assert by_name["schema"].error is None and by_name["runtime"].error is None
    assert by_name["schema"].findings and by_name["runtime"].findings
    assert worst(results) is Severity.ERROR
