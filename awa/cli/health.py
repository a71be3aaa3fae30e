"""`awa health [--json]`: is this awa deployment ready, from the database alone.

Reads (never writes): the schema version, the storage engine, the runtime
registry (``awa.runtime_instances``) and the queue depths.  Exit codes:

* 0 ready: the database answers, its schema is this code's, a live runtime leads, every
  runtime is healthy and every queue with runnable work has a live runtime serving it;
* 1 degraded: the database is fine but one of those fleet conditions fails (``problems``
  says which);
* 2 not ready: the database is unreachable (within ``--connect-timeout``) or its schema is
  not one this code can run on.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from awa import config, db, schema
from awa.cli.options import database_url_option, json_option, print_json, resolved_database_url
from awa.job import AwaError
from awa.known_queues import has_waiting, unserved_queues
from awa.liveness import runtime_live

EXIT_READY = 0
EXIT_DEGRADED = 1
EXIT_NOT_READY = 2


async def health_report(url: str, connect_timeout_s: float) -> dict[str, Any]:
    """The report; ``status`` is ``ready``, ``degraded`` or ``not_ready``."""
    from awa.statements import run_async
    from awa.storage import describe_layout, open_engine, transition

    report: dict[str, Any] = {
        "ready": False, "status": "not_ready", "postgres_connected": False,
        "schema_version": None, "expected_schema_version": schema.current_migration_version(),
        "schema_compatible": False, "storage_state": None, "active_engine": None,
        "live_runtimes": 0, "unhealthy_runtimes": 0, "leader": False,
        "queues_without_runtime": [], "problems": []}

    async def probe() -> None:
        conn = await db.connect(url, config.APP_NAME_CLI)
        try:
            report["postgres_connected"] = True
            layout = await describe_layout(conn)
            report["schema_version"] = layout.schema_version
            report["active_engine"] = layout.engine
            try:
                await schema.ensure_migrated(conn)
                report["schema_compatible"] = True
            except AwaError as exc:
                report["problems"].append(db.one_line(exc))
                return
            # The transition layer while a database is canonical or switching engines: its
            # depths cover both engines' queues.
            engine = await open_engine(conn)
            state = await run_async(conn, transition.read_steps(layout))
            report["storage_state"] = (state.state if state is not None else
                                       "active" if engine.name != "canonical" else "canonical")
            if state is not None:
                report["active_engine"] = state.enqueue_engine
            live = [r for r in await engine.runtime_instances(conn)
                    if runtime_live(r.last_seen_age_s, r.snapshot_interval_ms,
                                    r.heartbeat_staleness_ms / 1000
                                    if r.heartbeat_staleness_ms else None)
                    and not r.shutting_down]
            report["live_runtimes"] = len(live)
            report["unhealthy_runtimes"] = sum(1 for r in live if not r.healthy)
            report["leader"] = any(r.leader for r in live)
            waiting = [d.queue for d in await engine.queue_depths(conn, cap=1)
                       if has_waiting(d.depth)]
            report["queues_without_runtime"] = unserved_queues(waiting,
                                                               (r.queues for r in live))
        finally:
            await conn.close()

    try:
        await asyncio.wait_for(probe(), connect_timeout_s)
    except (TimeoutError, AwaError, OSError) as exc:
        report["problems"].append(f"database unreachable: {db.one_line(exc) or 'timed out'}")
    except Exception as exc:  # noqa: BLE001 (psycopg errors: the database did not answer)
        report["problems"].append(f"database error: {db.one_line(exc)}")
    if not (report["postgres_connected"] and report["schema_compatible"]):
        return report
    problems = report["problems"]
    if report["live_runtimes"] == 0:
        problems.append("no live runtime (no worker reported within two of its snapshot "
                        "intervals)")
    elif not report["leader"]:
        problems.append("no live runtime holds maintenance leadership")
    if report["unhealthy_runtimes"]:
        problems.append(f"{report['unhealthy_runtimes']} live runtime(s) report unhealthy")
    if report["queues_without_runtime"]:
        problems.append("queues with waiting jobs and no live runtime: "
                        + ", ".join(report["queues_without_runtime"]))
    report["status"] = "degraded" if problems else "ready"
    report["ready"] = not problems
    return report


@click.command("health")
@database_url_option
@json_option
@click.option("--connect-timeout", default=config.CONNECT_TIMEOUT_S, show_default=True,
              type=click.FloatRange(0, min_open=True), metavar="SECONDS",
              help="How long the database may take to answer before it counts as unreachable.")
def health_command(as_json: bool, connect_timeout: float) -> None:
    """Cluster readiness from the database: exit 0 ready, 1 degraded, 2 not ready."""
    report = asyncio.run(health_report(resolved_database_url(), connect_timeout))
    if as_json:
        print_json(report)
    else:
        rows = [("status", report["status"]),
                ("postgres", "connected" if report["postgres_connected"] else "unreachable"),
                ("schema", f"{report['schema_version']} (this code: "
                           f"{report['expected_schema_version']})"),
                ("engine", f"{report['active_engine']} ({report['storage_state']})"),
                ("live runtimes", f"{report['live_runtimes']} "
                                  f"({report['unhealthy_runtimes']} unhealthy)"),
                ("leader", "yes" if report["leader"] else "none"),
                ("unserved queues", ", ".join(report["queues_without_runtime"]) or "none")]
        for name, value in rows:
            click.echo(f"{name:<16} {value}")
        for problem in report["problems"]:
            click.echo(f"problem          {problem}")
    code = {"ready": EXIT_READY, "degraded": EXIT_DEGRADED}.get(report["status"],
                                                                   EXIT_NOT_READY)
    sys.exit(code)
