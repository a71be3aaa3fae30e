"""``awa-ops diagnose``: the troubleshooting guide as scripted, read-only checks.

Each check is a module exposing ``NAME`` and ``async def check(session,
engine, options) -> list[Finding]``.  ``run_check`` / ``run_all`` are the
read API the CLI and the TUI share: they never raise for a database problem,
they return a ``CheckResult`` whose status is "could not run" instead.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import psycopg

from awa import config, db
from awa.job import AwaError
from awa.liveness import runtime_live
from awa_ops.diagnose._text import USING, awa
from awa_ops.findings import CheckResult, Finding, Severity
from awa_ops.replication import on_standby
from awa_ops.session import OpsSession
from awa_ops.storage import DetectedEngine, detect_engine, storage_engine

# check name -> module; imported on first use so `run_check` stays cheap.
CHECKS: dict[str, str] = {
    "schema": "schema",
    "replication": "replication",
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
    "cron": "cron",
}


@dataclass
class Options:
    """What an operator can tune; every default comes from awa.config."""

    queue: str | None = None
    # Ignore conditions younger than this (running attempts, transactions).
    min_age_s: float | None = None
    # None: each runtime's own (what its snapshot publishes), else the config default;
    # a value given (--heartbeat-staleness) overrides them.
    heartbeat_staleness_s: float | None = None
    heartbeat_interval_s: float | None = None
    # What was given, before resolve_timing filled in the two above: checks that judge each
    # attempt by its own runtime's published timing let only these override it.
    flagged_staleness_s: float | None = None
    flagged_interval_s: float | None = None
    timing_resolved: bool = False
    rescue_interval_s: float = config.HEARTBEAT_RESCUE_INTERVAL_MS / 1000
    election_interval_s: float = config.LEADER_ELECTION_INTERVAL_MS / 1000
    metrics_url: str | None = None
    state_dir: Path | None = None
    evidence_limit: int = config.OPS_EVIDENCE_LIMIT
    # On a hot standby, where the checks that only the primary can answer run
    # (``--primary-url``); without it they name the command to run there instead.
    primary_url: str | None = None
    primary_session: OpsSession | None = None  # opened from primary_url on first need

    @property
    def staleness_s(self) -> float:
        """``heartbeat_staleness_s`` as the checks use it: ``resolve_timing`` fills it in
        before any check runs."""
        assert self.heartbeat_staleness_s is not None, "resolve_timing() fills it in first"
        return self.heartbeat_staleness_s


async def primary_session(options: Options) -> OpsSession | None:
    """A read-only session on ``options.primary_url`` (opened once), or None without one.

    Refuses, in one line, a ``--primary-url`` that reaches a standby too."""
    if options.primary_url is None:
        return None
    if options.primary_session is None or options.primary_session.conn.closed:
        opened = await OpsSession.open(options.primary_url, read_only=True)
        if await on_standby(opened):
            await opened.close()
            raise AwaError(f"--primary-url {db.redact(options.primary_url)} reaches a hot "
                           "standby too; give the primary's URL")
        options.primary_session = opened
    return options.primary_session


async def close_primary(options: Options) -> None:
    if options.primary_session is not None:
        await options.primary_session.close()
        options.primary_session = None


async def primary_or_none(session: OpsSession, options: Options) -> OpsSession | None:
    """Where to ask what only the primary knows: this session on a primary, else the
    ``--primary-url`` session, else None (the caller says what to run on the primary)."""
    if not await on_standby(session):
        return session
    return await primary_session(options)


def needs_primary(name: str, what: str) -> Finding:
    """What a check that only the primary can answer reports on a standby without
    ``--primary-url``."""
    return Finding(
        Severity.WARNING,
        f"{name} not checked: this is a hot standby, and {what} are the primary's",
        "a standby has its own sessions and locks, not the primary's; run this check against "
        "the primary",
        f'awa-ops diagnose {name} --database-url "$PRIMARY_URL"   '
        f'(or add --primary-url "$PRIMARY_URL" here)')


def check_module(name: str) -> ModuleType:
    try:
        module_name = CHECKS[name]
    except KeyError:
        raise ValueError(f"unknown check {name!r}; "
                         f"choose one of: {', '.join(CHECKS)}, all") from None
    return importlib.import_module(f"{__name__}.{module_name}")


async def resolve_timing(session: OpsSession, options: Options) -> Options:
    """``options`` with the heartbeat timing filled in where not given: the largest the
    live runtimes publish (awa.runtime.snapshot), else the config defaults."""
    if options.timing_resolved:
        return options
    options = replace(options, flagged_staleness_s=options.heartbeat_staleness_s,
                      flagged_interval_s=options.heartbeat_interval_s, timing_resolved=True)
    if options.heartbeat_staleness_s is not None and options.heartbeat_interval_s is not None:
        return options
    staleness: list[int] = []
    intervals: list[int] = []
    try:
        engine = await detect_engine(session)
        if engine.installed:
            reads = await storage_engine(session)
            async with session.read():
                instances = await reads.runtime_instances(session.conn, limit=1_000)
            for r in instances:
                if runtime_live(r.last_seen_age_s, r.snapshot_interval_ms):
                    staleness += [r.heartbeat_staleness_ms] if r.heartbeat_staleness_ms else []
                    intervals += [r.heartbeat_interval_ms] if r.heartbeat_interval_ms else []
    except (psycopg.Error, AwaError, OSError):
        pass  # each check then reports the database trouble itself
    return replace(
        options,
        heartbeat_staleness_s=options.heartbeat_staleness_s if options.heartbeat_staleness_s
        is not None else max(staleness, default=config.HEARTBEAT_STALENESS_MS) / 1000,
        heartbeat_interval_s=options.heartbeat_interval_s if options.heartbeat_interval_s
        is not None else max(intervals, default=config.HEARTBEAT_INTERVAL_MS) / 1000)


async def run_check(session: OpsSession, name: str, options: Options | None = None) -> CheckResult:
    """Run one check; database trouble becomes a 'could not run' result, not an exception."""
    options = await resolve_timing(session, options or Options())
    module = check_module(name)
    started = time.perf_counter()
    result = CheckResult(name)
    using = USING.set(session.url)
    try:
        engine = await detect_engine(session)
        result.engine = engine.describe()
        if not engine.installed and not getattr(module, "RUNS_WITHOUT_SCHEMA", False):
            result.error = ("no awa schema in this database: run "
                            f"`{awa('migrate')}`")
        else:
            target, what = session, getattr(module, "NEEDS_PRIMARY", None)
            if what is not None and await on_standby(session):
                primary = await primary_session(options)
                if primary is None:
                    result.findings = [needs_primary(name, what)]
                    result.duration_ms = (time.perf_counter() - started) * 1000
                    return result
                target, engine = primary, await detect_engine(primary)
                result.engine = f"{engine.describe()} (on the primary, --primary-url)"
            result.findings = await module.check(target, engine, options)
    except (psycopg.Error, AwaError, OSError) as exc:
        if session.conn.closed:
            result.error = f"lost the database connection: {db.one_line(exc)}"
        else:
            result.error = f"{name} could not run: {db.one_line(exc)}"
    except Exception as exc:  # a bug in one check must not hide the others' findings
        result.error = f"{name} could not run: {type(exc).__name__}: {db.one_line(exc)}"
    finally:
        USING.reset(using)
    result.duration_ms = (time.perf_counter() - started) * 1000
    return result


async def run_all(session: OpsSession, options: Options | None = None,
                  names: list[str] | None = None) -> list[CheckResult]:
    """Every check, reported in order, on one session (engine detected once).  The enqueue
    check's WAL samples are taken meanwhile on a connection of their own
    (enqueue.start_sampling), and that check runs last, to find them taken."""
    options = await resolve_timing(session, options or Options())
    names = names or list(CHECKS)
    stop = await check_module("enqueue").start_sampling(session) if "enqueue" in names else None
    try:
        last = [name for name in names if name == "enqueue"]
        done = {name: await run_check(session, name, options)
                for name in [*(name for name in names if name != "enqueue"), *last]}
        return [done[name] for name in names]
    finally:
        if stop is not None:
            await stop()


__all__ = ["CHECKS", "Options", "run_check", "run_all", "check_module", "Finding", "Severity",
           "CheckResult", "DetectedEngine"]
