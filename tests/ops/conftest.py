"""Fixtures for awa-ops tests."""

from __future__ import annotations

import os

import pytest

from ops_helpers import OpsRun, run_ops


@pytest.fixture
def ops(database_url, tmp_path):
    """`awa-ops diagnose <check> --json` against this test's database."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def diagnose(check: str, *extra: str) -> OpsRun:
        return run_ops("diagnose", check, "--database-url", database_url, "--json", *extra, env=env)
    return diagnose
