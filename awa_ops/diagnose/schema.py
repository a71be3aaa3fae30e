"""schema: migration version versus this code, missing sequences and functions,
the storage engine in use, and a live switch of engines in progress (what blocks its next
step)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from awa import schema as migrations
from awa.schema.layout import describe_layout_steps
from awa.statements import Steps, run_async
from awa.storage import transition
from awa_ops.diagnose._text import awa, db_ref
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.storage import quote

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "schema"
RUNBOOK = runbook("schema")
RUNS_WITHOUT_SCHEMA = True

CANONICAL_OBJECTS = (
    ("sequence", "awa.jobs_id_seq"), ("table", "awa.jobs_hot"), ("table", "awa.scheduled_jobs"),
    ("view", "awa.jobs"), ("table", "awa.job_unique_claims"), ("table", "awa.queue_meta"),
    ("table", "awa.runtime_instances"), ("table", "awa.dlq_entries"),
    ("function", "awa.state_bit(awa.job_state)"), ("function", "awa.sync_unique_claim()"),
    ("function", "awa.notify_available()"),
)
MISSING = """
SELECT o.kind, o.name
FROM unnest(%(kinds)s::text[], %(names)s::text[]) AS o(kind, name)
WHERE CASE WHEN o.kind = 'function' THEN to_regprocedure(o.name) IS NULL
           ELSE to_regclass(o.name) IS NULL END
"""
TRIGGERS = """
SELECT t.name FROM unnest(%(names)s::text[]) AS t(name)
WHERE NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgname = t.name AND tgrelid = 'awa.jobs_hot'::regclass)
"""
REQUIRED_TRIGGERS = ("awa_unique_claim_ins", "awa_unique_claim_upd", "awa_unique_claim_del",
                     "awa_notify_available")


def required_objects(engine: DetectedEngine) -> list[tuple[str, str]]:
    if engine.foreign_layout:
        # Laid out by the Rust core: check the objects the guide names for it.
        objects = [("table", "awa.runtime_instances"), ("table", "awa.queue_meta"),
                   ("function", "awa.active_queue_storage_schema()")]
    else:
        objects = list(CANONICAL_OBJECTS)
    if engine.is_queue_storage:
        q = quote(engine.schema)
        objects += [("table", f"{q}.leases"), ("table", f"{q}.lease_claims"),
                    ("table", f"{q}.lease_claim_closures")]
        if engine.foreign_layout:
            # The Rust core's substrate, created when its first worker boots.
            objects.append(("sequence", f"{q}.job_id_seq"))
        else:
            # Ours: job ids come from awa.jobs_id_seq; the claim takes the runtime's id.
            # qs_layout_version(): a layout older than the version record is missing it.
            objects += [("table", f"{q}.ready_entries"), ("table", f"{q}.done_entries"),
                        ("function", f"{q}.qs_claim(text, integer, bigint, uuid, bigint)"),
                        ("function", "awa.qs_layout_version()")]
    return objects


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    needed = migrations.current_migration_version()
    fix = awa("migrate")
    if not engine.installed:
        return [Finding(Severity.CRITICAL,
                        f"SchemaNotMigrated: {migrations.not_migrated_error(None)}",
                        "application code is newer than the database schema: nothing can enqueue "
                        "or run jobs", fix, runbook=RUNBOOK)]
    findings: list[Finding] = []
    found = engine.schema_version
    if engine.foreign_layout:
        findings.append(Finding(
            Severity.OK,
            f"schema laid out by the awa Rust core (its migration version {found}); engine: "
            f"{engine.describe()}",
            "its version numbers are its own; awa-ops reads it through the guide's queries",
            evidence=[{"engine": engine.name, "schema": engine.schema, "schema_version": found}],
            runbook=RUNBOOK))
    elif found is None or found < needed:
        findings.append(Finding(
            Severity.CRITICAL, f"SchemaNotMigrated: {migrations.not_migrated_error(found)}",
            "application code is newer than the database schema; clients refuse to start",
            fix, [{"schema_version": found, "code_version": needed}], RUNBOOK))
    elif found > needed:
        findings.append(Finding(
            Severity.WARNING, f"the database is at schema version {found}, newer than this code "
                              f"({needed})",
            "a newer awa migrated this database; these tools may misread new columns",
            "upgrade awa (pip install -U awa-py) on this host",
            [{"schema_version": found, "code_version": needed}], RUNBOOK))

    objects = required_objects(engine)
    missing, triggers = await session.fetch_sets(
        (MISSING, {"kinds": [k for k, _ in objects], "names": [n for _, n in objects]}),
        (TRIGGERS if not engine.foreign_layout else "SELECT NULL::text AS name WHERE false",
         {"names": list(REQUIRED_TRIGGERS)} if not engine.foreign_layout else None))
    if missing or triggers:
        names = [f"{m['kind']} {m['name']}" for m in missing] + \
                [f"trigger {t['name']} on awa.jobs_hot" for t in triggers]
        qs_seq = any(m["name"].endswith("job_id_seq") and engine.is_queue_storage for m in missing)
        findings.append(Finding(
            Severity.CRITICAL, f"missing schema objects: {', '.join(names)}",
            ("the queue-storage substrate (job_id_seq and friends) is created when the first "
             "worker boots (prepare_schema), not by migrate alone" if qs_seq else
             "a partial or hand-edited schema: producers or workers fail with "
             "'relation ... does not exist'"),
            (fix + "; then let one worker boot to completion before resuming producers; check "
             f"the schema the runtime uses: psql {db_ref()} -c "
             "'SELECT awa.active_queue_storage_schema()'") if qs_seq else fix,
            [*missing, *triggers], RUNBOOK))
    if not any(f.severity > Severity.OK for f in findings) and not engine.foreign_layout:
        findings.insert(0, Finding(
            Severity.OK, f"schema version {found} matches this code; engine: {engine.describe()}",
            evidence=[{"engine": engine.name, "schema": engine.schema, "schema_version": found,
                       "code_version": needed}], runbook=RUNBOOK))
    if not engine.foreign_layout and (found or 0) >= transition.TRANSITION_MIGRATION:
        findings.extend(await switch_findings(session))
    return findings


# A finalized switch (every database laid out for queue storage): its state and canonical's
# live jobs by state -- all its finding needs.
Finalized = tuple[transition.TransitionState, dict[str, int]]


def _switch_status() -> Steps[Finalized | transition.TransitionStatus | None]:
    """The switch's whole status while one is under way; once ``active`` only canonical's
    live jobs (counting queue storage's backlog there would scan it for nothing)."""
    layout = yield from describe_layout_steps()
    state = yield from transition.read_steps(layout)
    if state is None or state.state == transition.CANONICAL:
        return None  # no switch, and no canonical count on a database it would cost
    if state.state == transition.ACTIVE:
        return state, (yield from transition.canonical_backlog_steps())
    return (yield from transition.status_steps(layout))


async def switch_findings(session: OpsSession) -> list[Finding]:
    """The live switch of engines (``awa storage``): in progress, what blocks its next step;
    once finalized, live jobs left in canonical (nothing claims them there any more)."""
    async with session.read() as cur:
        found = await run_async(cur.connection, _switch_status())
    if found is None:
        return []
    if isinstance(found, tuple):
        state, left = found
        canonical_live = sum(left.values())
        if not canonical_live:
            return []
        evidence = [{"state": state.state, "epoch": state.epoch,
                     "in_state_s": round(state.in_state_s, 1),
                     "canonical_live_jobs": canonical_live}]
        return [Finding(
            Severity.WARNING, f"queue storage serves this database, but canonical still holds "
                              f"{canonical_live} live job(s) that nothing claims",
            "a producer of a release that knows nothing of the switch inserted into canonical "
            "after finalize", "roll that producer to this release, then enqueue those jobs again "
            "and cancel the stranded ones (`awa job list --state available`)", evidence,
            RUNBOOK)]
    status = found
    canonical_live = sum(status.canonical_backlog.values())
    evidence = [{"state": status.state.state, "epoch": status.state.epoch,
                 "in_state_s": round(status.state.in_state_s, 1),
                 "canonical_live_jobs": canonical_live,
                 "queue_storage_live_jobs": status.queue_storage_backlog,
                 **{f"runtimes_{k}": n for k, n in status.capability_counts.items()}}]
    unaware = status.capability_counts.get("canonical", 0)
    return [Finding(
        Severity.WARNING if unaware else Severity.OK,
        f"storage switch in progress: {status.describe()}",
        "while both engines hold live jobs, runtimes of this release claim from both; a runtime "
        "of an older release claims from one only and keeps the switch from ending",
        awa("storage status"), evidence, RUNBOOK)]

