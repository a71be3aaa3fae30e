"""``awa-ops diagnose``: the troubleshooting guide as scripted, read-only checks.

Each check is a module exposing ``NAME`` and ``async def check(session,
engine, options) -> list[Finding]``.  ``run_check`` / ``run_all`` are the
read API the CLI and the TUI share: they never raise for a database problem,
they return a ``CheckResult`` whose status is "could not run" instead.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from awa import config, db
from awa.job import AwaError
from awa_ops.findings import CheckResult, Finding, Severity
from awa_ops.session import OpsSession
from awa_ops.storage import Engine, detect_engine

# check name -> module; imported on first use so `run_check` stays cheap.
CHECKS: dict[str, str] = {
    "schema": "schema",
    "runtime": "runtime",
    "stuck-running": "stuck_running",
    "heartbeats": "heartbeats",
    "cancel-listener": "cancel_listener",
    "unique-wedge": "unique_wedge",
    "mvcc-horizon": "mvcc_horizon",
    "dead-tuples": "dead_tuples",
    "enqueue": "enqueue",
    "dlq": "dlq",
    "descriptors": "descriptors",
}


@dataclass
class Options:
    """What an operator can tune; every default comes from awa.config."""

    queue: str | None = None
    # Ignore conditions younger than this (running attempts, transactions).
    min_age_s: float | None = None
    heartbeat_staleness_s: float = config.HEARTBEAT_STALENESS_MS / 1000
    rescue_interval_s: float = config.HEARTBEAT_RESCUE_INTERVAL_MS / 1000
    election_interval_s: float = config.LEADER_ELECTION_INTERVAL_MS / 1000
    metrics_url: str | None = None
    state_dir: Path | None = None
    evidence_limit: int = config.OPS_EVIDENCE_LIMIT


def check_module(name: str):
    try:
        module_name = CHECKS[name]
    except KeyError:
        raise ValueError(f"unknown check {name!r}; "
                         f"choose one of: {', '.join(CHECKS)}, all") from None
    return importlib.import_module(f"{__name__}.{module_name}")


async def run_check(session: OpsSession, name: str, options: Options | None = None) -> CheckResult:
    """Run one check; database trouble becomes a 'could not run' result, not an exception."""
    options = options or Options()
    module = check_module(name)
    started = time.perf_counter()
    result = CheckResult(name)
    try:
        engine = await detect_engine(session)
        result.engine = engine.describe()
        if not engine.installed and not getattr(module, "RUNS_WITHOUT_SCHEMA", False):
            result.error = ("no awa schema in this database: run "
                            "`awa --database-url \"$DATABASE_URL\" migrate`")
        else:
            result.findings = await module.check(session, engine, options)
    except (psycopg.Error, AwaError, OSError) as exc:
        if session.conn.closed:
            result.error = f"lost the database connection: {db.one_line(exc)}"
        else:
            result.error = f"{name} could not run: {db.one_line(exc)}"
    except Exception as exc:  # a bug in one check must not hide the others' findings
        result.error = f"{name} could not run: {type(exc).__name__}: {db.one_line(exc)}"
    result.duration_ms = (time.perf_counter() - started) * 1000
    return result


async def run_all(session: OpsSession, options: Options | None = None,
                  names: list[str] | None = None) -> list[CheckResult]:
    """Every check in order, on one session (engine detected once)."""
    return [await run_check(session, name, options) for name in (names or list(CHECKS))]


__all__ = ["CHECKS", "Options", "run_check", "run_all", "check_module", "Finding", "Severity",
           "CheckResult", "Engine"]
