"""The incidents of the matrix, played against real parts (harness.Fleet).

Each scenario is a function that sets up a healthy fleet, calls ``fleet.incident_begins()``
and then causes its incident (or, for the healthy ones, nothing).  What every signal must
say is data, in expected.yaml beside this file; ``run`` plays a scenario, observes at the
times the data names, and compares.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import yaml

import awa
from incidents.harness import Fleet, Observation, Verdict, scaled_settings

EXPECTED = Path(__file__).with_name("expected.yaml")
STATUS_ORDER = ("ok", "warning", "critical", "could not run")


def expectations() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(EXPECTED.read_text())["scenarios"]


@contextmanager
def producing(url: str, queue: str = "default", period_s: float = 0.25,
              flaky_every: int = 25, bulk: int = 10) -> Iterator[None]:
    """A producer enqueueing the demo's healthy mix until the block ends: fast jobs (``bulk``
    per round), a few that take a while, and now and then one that fails once and then
    succeeds."""
    stop = threading.Event()

    def run() -> None:
        n = 0
        with awa.Client(url) as client:
            while not stop.is_set():
                client.insert_many([{}] * bulk, kind="fast", queue=queue)
                client.insert_many([{"ms": 300}] * 2, kind="sleep", queue=queue)
                n += 1
                if n % max(1, flaky_every // 12) == 0:
                    client.insert({"fail_times": 1}, kind="flaky", queue=queue)
                stop.wait(period_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


# --- scenarios ------------------------------------------------------------------------

def healthy_idle(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:4,email:2")
    fleet.worker("default:4,email:2")
    fleet.incident_begins()
    observe_all(fleet, spec)


def healthy_busy(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:8")
    fleet.worker("default:8")
    with producing(fleet.url):
        fleet.incident_begins()
        observe_all(fleet, spec)


def rolling_restart(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:8")
    fleet.worker("default:8")
    with producing(fleet.url):
        time.sleep(2)
        fleet.incident_begins()
        for old in list(fleet.workers):
            fleet.worker("default:8")  # the replacement first, then the old one drains
            old.terminate()
            fleet.forget_dead()
            time.sleep(2)
        observe_all(fleet, spec)


def worker_killed_long_jobs(fleet: Fleet, spec: dict[str, Any]) -> None:
    # A fleet of long jobs runs with a longer staleness (270 s in production, 18 s here), so
    # the orphaned attempts are seen before rescue takes them, however long `diagnose all`
    # takes to reach stuck-running on a loaded machine.
    patient = {"heartbeat_staleness_ms": round(3 * scaled_settings()["heartbeat_staleness_ms"])}
    victim = fleet.worker("long:4", **patient)
    # four long jobs, all on the victim (the only worker of "long" until the second starts)
    with awa.Client(fleet.url) as client:
        client.insert_many([{"seconds": 600}] * 4, kind="slow", queue="long")
    victim.wait_for_log("start", kind="slow", count=4, timeout=20)
    fleet.worker("default:4,long:4", **patient)  # rescue re-runs them here
    fleet.incident_begins()
    victim.kill()
    fleet.forget_dead()
    observe_all(fleet, spec)


def only_worker_of_queue_gone(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:4")
    only = fleet.worker("long:2")
    time.sleep(1)
    fleet.incident_begins()
    only.kill()
    fleet.forget_dead()
    with awa.Client(fleet.url) as client:
        client.insert_many([{}] * 4, kind="fast", queue="long")
    observe_all(fleet, spec)


def no_leader(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.incident_begins()
    fleet.worker("default:4", run_maintenance=False)
    fleet.worker("default:4", run_maintenance=False)
    observe_all(fleet, spec)


def frozen_leader(fleet: Fleet, spec: dict[str, Any]) -> None:
    first = fleet.worker("default:4")
    time.sleep(1)  # it wins the election
    fleet.worker("default:4")
    with producing(fleet.url):
        time.sleep(1)
        fleet.incident_begins()
        os.kill(first.pid, signal.SIGSTOP)
        observe_all(fleet, spec)
        os.kill(first.pid, signal.SIGCONT)


def idle_in_transaction(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:4")
    with psycopg.connect(fleet.url, application_name="report-job") as holder:
        fleet.incident_begins()
        holder.execute("SELECT txid_current()")  # holds an xid and stays idle, uncommitted
        observe_all(fleet, spec)
        holder.rollback()


def long_query(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:4")
    done = threading.Event()

    def report() -> None:  # an analytics query that runs for minutes
        with psycopg.connect(fleet.url, application_name="nightly-report") as conn:
            conn.execute("SET statement_timeout = 0")
            conn.execute("SELECT txid_current()")
            conn.execute("SELECT pg_sleep(%s)", (float(spec["duration_s"]) - 5,))
        done.set()

    thread = threading.Thread(target=report, daemon=True)
    fleet.incident_begins()
    thread.start()
    observe_all(fleet, spec)
    done.wait(10)


def dlq_one_cause(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:4,imports:4", dlq_enabled_by_default=True)
    fleet.incident_begins()
    with awa.Client(fleet.url) as client:
        for _ in range(6):
            client.insert_many([{"message": "cannot parse row: bad date '2024-13-01'"}] * 5,
                               kind="fail", queue="imports", max_attempts=1)
            time.sleep(1)
    observe_all(fleet, spec)


def exporter_down(fleet: Fleet, spec: dict[str, Any]) -> None:
    fleet.worker("default:4")
    time.sleep(1)
    fleet.incident_begins()
    fleet.stop_exporter()
    observe_all(fleet, spec)


def _backlog(fleet: Fleet, spec: dict[str, Any], slots: int, jobs: int, ms: int) -> None:
    """A burst of ``jobs`` jobs of ``ms`` each onto one worker with ``slots`` slots."""
    fleet.worker(f"default:{slots}")
    fleet.incident_begins()
    with awa.Client(fleet.url) as client:
        client.insert_many([{"ms": ms}] * jobs, kind="sleep", queue="default")
    observe_all(fleet, spec)


def backlog_not_draining(fleet: Fleet, spec: dict[str, Any]) -> None:
    _backlog(fleet, spec, slots=1, jobs=400, ms=200)  # 80 s of work: the lag keeps growing


def backlog_draining(fleet: Fleet, spec: dict[str, Any]) -> None:
    _backlog(fleet, spec, slots=16, jobs=300, ms=50)  # gone within a second or two


# --- server-wide incidents and the later scenarios of issue 46 ----------------------------

def replication_slot_pinned(fleet: Fleet, spec: dict[str, Any]) -> None:
    """A standby with hot_standby_feedback streams through a physical slot, then is gone
    (its host lost): the inactive slot keeps the xmin the standby last reported, and WAL."""
    cluster = _own_cluster(fleet)
    from support.pgcluster import PrivateCluster
    slot = "standby_eu_1"
    standby = PrivateCluster(*cluster.settings[4:], "-c", "hot_standby_feedback=on", init=False)
    fleet.worker("default:8")
    fleet.worker("default:8")
    try:
        cluster._run("pg_basebackup", "-D", str(standby.data), "-h", "127.0.0.1",
                     "-p", str(cluster.port), "-U", "postgres", "-R", "-C", "-S", slot,
                     "-X", "stream", "--checkpoint", "fast", "--no-sync")
        standby.start()
        with producing(fleet.url):
            _wait_for(fleet.url, "SELECT xmin IS NOT NULL FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (slot,), timeout=30)
            fleet.incident_begins()
            standby.stop("immediate")  # the standby's host is gone; its slot stays
            observe_all(fleet, spec)
    finally:
        standby.close()


def prepared_transaction(fleet: Fleet, spec: dict[str, Any]) -> None:
    """A two-phase commit whose coordinator died after PREPARE: the prepared transaction
    outlives its session and holds its xid (and locks) until someone resolves it."""
    fleet.worker("default:8")
    fleet.worker("default:8")
    gid = "export-batch-42"
    with producing(fleet.url):
        fleet.incident_begins()
        with psycopg.connect(fleet.url, autocommit=True) as coordinator:
            coordinator.execute("BEGIN")
            coordinator.execute("CREATE TABLE IF NOT EXISTS export_marks (batch int)")
            coordinator.execute("INSERT INTO export_marks VALUES (42)")
            coordinator.execute(f"PREPARE TRANSACTION '{gid}'")
        observe_all(fleet, spec)
    with psycopg.connect(fleet.url, autocommit=True) as conn:
        conn.execute(f"ROLLBACK PREPARED '{gid}'")


def dead_tuples_climbing(fleet: Fleet, spec: dict[str, Any]) -> None:
    """Autovacuum switched off on the queue tables (a bulk-load setting left behind) while
    they churn: dead tuples pile up with nothing to reclaim them."""
    fleet.worker("default:16")
    fleet.worker("default:16")
    with psycopg.connect(fleet.url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname LIKE 'awa%' AND c.relkind = 'r'")]
        for table in tables:
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    fleet.incident_begins()
    with producing(fleet.url, bulk=100, period_s=0.1):
        observe_all(fleet, spec)


def poison_job(fleet: Fleet, spec: dict[str, Any]) -> None:
    """Jobs whose handler kills the worker process: each claim crashes the worker of queue
    ``imports`` (its supervisor restarts it), rescue retries them, until their attempts are
    spent and they land in the DLQ."""
    fleet.worker("default:4", dlq_enabled_by_default=True)  # the leader, never crashes
    with supervised(fleet, "imports:4", dlq_enabled_by_default=True):
        fleet.wait_for_history(float(spec["history_s"]))  # AwaRescuesSpiking's 10m window
        fleet.incident_begins()
        with awa.Client(fleet.url) as client:
            client.insert_many([{"file": f"import-{i}.csv"} for i in range(6)], kind="crash",
                               queue="imports", max_attempts=3)
        observe_all(fleet, spec)


def unique_claim_superseded(fleet: Fleet, spec: dict[str, Any]) -> None:
    """Unique jobs whose mask excludes running: while two long reports run, newer duplicates
    are enqueued for later and take their unique keys.  One report's worker is then
    SIGKILLed: rescue cannot move that attempt back to retryable (a newer job holds the
    key), so it cancels it ("rescued as duplicate"); the other keeps running, superseded."""
    mask = {"states": ["scheduled", "available", "retryable"]}
    survivor = fleet.worker("reports:1")  # one report each
    victim = fleet.worker("reports:1")
    with awa.Client(fleet.url) as client:
        client.insert({"seconds": 3600, "report": "daily"}, kind="slow", queue="reports",
                      unique_opts=mask)
        client.insert({"seconds": 3600, "report": "weekly"}, kind="slow", queue="reports",
                      unique_opts=mask)
        deadline = time.monotonic() + 20
        while not (survivor.log_lines() and victim.log_lines()):
            if time.monotonic() > deadline:
                raise TimeoutError("the two reports did not start on both workers")
            time.sleep(0.1)
        for report in ("daily", "weekly"):
            client.insert({"seconds": 3600, "report": report}, kind="slow", queue="reports",
                          unique_opts=mask, run_at=timedelta(hours=6))
    fleet.incident_begins()
    victim.kill()
    fleet.forget_dead()
    observe_all(fleet, spec)


def database_unreachable(fleet: Fleet, spec: dict[str, Any]) -> None:
    """The database server goes away (stopped) for a while, then comes back."""
    cluster = _own_cluster(fleet)
    fleet.worker("default:8")
    fleet.worker("default:8")
    time.sleep(2)
    fleet.incident_begins()
    cluster.stop("immediate")
    try:
        observe_all(fleet, {**spec, "duration_s": spec["restart_at_s"]})
    finally:
        cluster.start()
    fleet.sleep_until(float(spec["duration_s"]))


def cron_stopped(fleet: Fleet, spec: dict[str, Any]) -> None:
    """A schedule that fired every minute stops firing while the fleet and its leader are
    healthy: its expression was edited by hand into one the leader cannot evaluate (a
    six-field expression pasted from another scheduler's docs)."""
    every_minute = [{"name": "hourly-digest", "cron_expr": "* * * * * */4", "kind": "fast"}]
    fleet.worker("default:4", env={"AWA_WORKER_PERIODIC": json.dumps(every_minute)})
    fleet.worker("default:4")
    time.sleep(10)  # it fires a few times
    fleet.incident_begins()
    with psycopg.connect(fleet.url, autocommit=True) as conn:
        conn.execute("UPDATE awa.cron_jobs SET cron_expr = '0 */5 * * * * ?' "
                     "WHERE name = 'hourly-digest'")
    observe_all(fleet, spec)


def callbacks_timing_out(fleet: Fleet, spec: dict[str, Any]) -> None:
    """An external system (a payment provider) stops calling back: every job parked in
    waiting_external runs past its callback timeout and is rescued (callback timed out)."""
    fleet.worker("default:4,payments:8", dlq_enabled_by_default=True)
    fleet.worker("default:4,payments:8", dlq_enabled_by_default=True)
    fleet.wait_for_history(float(spec["history_s"]))  # AwaDLQGrowing's 30m window
    fleet.incident_begins()
    with awa.Client(fleet.url) as client:
        # 60 s production callback timeout (4 s here); one attempt each
        client.insert_many([{"timeout": 60 * 1 / 15, "charge": i} for i in range(12)],
                           kind="await_callback", queue="payments", max_attempts=1)
    observe_all(fleet, spec)


# --- helpers of the scenarios above ----------------------------------------------------

def _own_cluster(fleet: Fleet) -> Any:
    if fleet.cluster is None:
        raise RuntimeError("this scenario needs its own PostgreSQL server (own_cluster in "
                           "expected.yaml): run it with benchmarks/incident_matrix.py")
    return fleet.cluster


def _wait_for(url: str, query: str, params: tuple[Any, ...], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while not conn.execute(query, params).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true after {timeout}s: {query}")
            time.sleep(0.2)


@contextmanager
def supervised(fleet: Fleet, queues: str, **settings: Any) -> Iterator[None]:
    """A worker for ``queues`` that is started again whenever it dies (a process
    supervisor: systemd, a Kubernetes restart policy)."""
    stop = threading.Event()
    current = [fleet.worker(queues, **settings)]

    def watch() -> None:
        while not stop.is_set():
            if not current[0].alive:
                fleet.forget_dead()
                stop.wait(1.0)  # the supervisor's restart back-off
                if not stop.is_set():
                    try:
                        current[0] = fleet.worker(queues, **settings)
                    except (RuntimeError, TimeoutError):
                        pass  # it crashed again while starting: try once more
            stop.wait(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


SCENARIOS: dict[str, Callable[[Fleet, dict[str, Any]], None]] = {
    f.__name__: f for f in (healthy_idle, healthy_busy, rolling_restart, worker_killed_long_jobs,
                            only_worker_of_queue_gone, no_leader, frozen_leader,
                            idle_in_transaction, long_query, dlq_one_cause, exporter_down,
                            backlog_not_draining, backlog_draining, replication_slot_pinned,
                            prepared_transaction, dead_tuples_climbing, poison_job,
                            unique_claim_superseded, database_unreachable, cron_stopped,
                            callbacks_timing_out)}


# --- observing and comparing -----------------------------------------------------------

def observe_all(fleet: Fleet, spec: dict[str, Any]) -> None:
    """Observe at each time the expectation names, then wait out the scenario."""
    for point in spec.get("observations", []):
        fleet.sleep_until(float(point["at"]))
        fleet.observations.append(fleet.observe())
    fleet.sleep_until(float(spec["duration_s"]))


def run(name: str, url: str, directory: Path, *, ci: bool = False,
        cluster: Any = None) -> Verdict:
    """Play scenario ``name``; ``ci``: its compressed length (``ci_duration_s``), observed
    only at the times that fall inside it."""
    spec = dict(expectations()[name])
    if ci and "ci_duration_s" in spec:
        # cut short: the observations and the alerts due after the cut are not waited for
        # (any alert that fires anyway still counts as a false alarm)
        end = float(spec["ci_duration_s"])
        spec["duration_s"] = end
        spec["observations"] = [o for o in spec.get("observations", [])
                                if float(o["at"]) < end]
        spec["alerts"] = {k: v for k, v in (spec.get("alerts") or {}).items()
                          if float(v) <= end}
    fleet = Fleet(url, directory, cluster)
    fleet.diagnose_flags = [str(f) for f in spec.get("diagnose_flags", [])]
    try:
        fleet.start()
        SCENARIOS[name](fleet, spec)
    finally:
        fleet.close()
    return compare(name, spec, fleet.alerts, fleet.observations)


def compare(name: str, spec: dict[str, Any], alerts: dict[str, Any],
            observations: list[Observation]) -> Verdict:
    expected_alerts = {k: float(v) for k, v in (spec.get("alerts") or {}).items()}
    verdict = Verdict(name, expected_alerts, dict(alerts), observations)
    from awa_ops.generate.alerts import Thresholds, build_rules
    rules = build_rules(Thresholds())
    for name_ in sorted(set(expected_alerts) - {rule.name for rule in rules}):
        # an incident no rule can catch yet: a missing signal, never a silent pass
        verdict.tally.append((f"alert:{name_}", True, False))
        verdict.problems.append(f"{name_} never fired: alerts/awa-rules.yml has no such rule")
    for rule in rules:
        want = rule.name in expected_alerts
        seen = alerts.get(rule.name)
        on_time = seen is not None and seen.at_s <= expected_alerts.get(rule.name, 0.0)
        verdict.tally.append((f"alert:{rule.name}", want, seen is not None and (on_time
                                                                             or not want)))
        if want and seen is None:
            verdict.problems.append(f"{rule.name} never fired (expected within "
                                    f"{expected_alerts[rule.name]}s)")
        elif want and not on_time and seen is not None:
            verdict.problems.append(f"{rule.name} fired late: {seen.at_s:.1f}s > "
                                    f"{expected_alerts[rule.name]}s")
        elif not want and seen is not None:
            verdict.problems.append(f"{rule.name} fired (false alarm) at {seen.at_s:.1f}s "
                                    f"{seen.labels}")
    for point, seen_at in zip(spec.get("observations", []), observations, strict=False):
        _compare_observation(verdict, point, seen_at)
    return verdict


def _compare_observation(verdict: Verdict, point: dict[str, Any], seen: Observation) -> None:
    where = f"at {seen.at_s:.1f}s"
    wanted = point.get("diagnose") or {}
    for check in sorted(set(wanted) - set(seen.diagnose)):
        # a check the expectation names that `diagnose all` does not run: a missing signal
        verdict.tally.append((f"diagnose:{check}", wanted[check]["status"] != "ok", False))
        verdict.problems.append(f"{where}: diagnose {check} did not report (no such check in "
                                f"`diagnose all`), expected {wanted[check]['status']}")
    for check, got in seen.diagnose.items():
        want = wanted.get(check) or {"status": "ok"}
        status = want["status"]
        bad = got["status"] != "ok"
        verdict.tally.append((f"diagnose:{check}", status != "ok", bad))
        if got["status"] != status:
            verdict.problems.append(f"{where}: diagnose {check} is {got['status']} "
                                    f"({'; '.join(got['summaries'])[:300]}), expected {status}")
            continue
        text = " | ".join(got["summaries"])
        steps = " | ".join(got["next_steps"])
        for phrase in want.get("says", []):
            if phrase not in text:
                verdict.problems.append(f"{where}: diagnose {check} does not say {phrase!r}: "
                                        f"{text[:300]}")
        for phrase in want.get("advises", []):
            if phrase not in steps:
                verdict.problems.append(f"{where}: diagnose {check} does not advise "
                                        f"{phrase!r}: {steps[:300]}")
        for phrase in want.get("never_advises", []):
            if phrase in steps:
                verdict.problems.append(f"{where}: diagnose {check} advises {phrase!r}: "
                                        f"{steps[:300]}")
    health = point.get("health")
    if health is not None:
        if seen.health.get("status") != health["status"]:
            verdict.problems.append(f"{where}: awa health is {seen.health.get('status')} "
                                    f"({seen.health.get('problems')}), expected "
                                    f"{health['status']}")
        if "unserved" in health and seen.health.get("queues_without_runtime") != \
                health["unserved"]:
            verdict.problems.append(f"{where}: awa health names unserved queues "
                                    f"{seen.health.get('queues_without_runtime')}, expected "
                                    f"{health['unserved']}")
    if "console" in point:
        want_console = point["console"]
        if want_console is None and seen.console is not None:
            verdict.problems.append(f"{where}: the console's Overview says {seen.console!r}")
        elif want_console is not None and (seen.console is None
                                           or want_console not in seen.console):
            verdict.problems.append(f"{where}: the console's Overview says {seen.console!r}, "
                                    f"expected {want_console!r}")
