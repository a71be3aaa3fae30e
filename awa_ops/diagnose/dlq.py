"""dlq: depth by queue and reason, growth since the previous run, repeated errors.

Growth needs memory between runs: a small JSON file per database under the
XDG state directory.  Poison-job recognition: one error message repeated
across a job's attempts, or across many recent dead-lettered/failed jobs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psycopg.conninfo import conninfo_to_dict

from awa import config
from awa.fingerprint import fingerprint, normalize
from awa_ops.diagnose._text import awa, plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.storage import column_exists, storage_engine

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.session import OpsSession
    from awa_ops.storage import DetectedEngine


NAME = "dlq"
RUNBOOK = runbook("dlq")

async def _canonical_dlq(session: OpsSession, options: Options
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Depth by queue and reason, and the repeated last errors: one read transaction."""
    engine = await storage_engine(session)
    # The Rust-core layout keeps errors in each entry's payload (its engine reads them).
    with_errors = (getattr(engine, "read_only", False)
                   or await column_exists(session, "awa", "dlq_entries", "errors"))
    async with session.read():
        depths = await engine.dlq_depths(session.conn, queue=options.queue,
                                         recent_s=config.OPS_DLQ_RECENT_S)
        # A DLQ laid out without the per-attempt error array (another awa
        # distribution's) has no error history to compare.
        # Every distinct last error of the sample: they are grouped by cause here.
        errors = (await engine.repeated_errors(session.conn, queue=options.queue,
                                               sample=config.OPS_ERROR_SAMPLE,
                                               limit=config.OPS_ERROR_SAMPLE)
                  if with_errors else [])
    depth_rows = [{"queue": d.queue, "dlq_reason": d.reason, "depth": d.count,
                   "newest": d.newest, "recent": d.recent} for d in depths]
    # A shallow copy: group_by_cause only reads the rows, and asdict's deep copies of up to
    # OPS_ERROR_SAMPLE rows cost ~100 ms of CPU on a DLQ of distinct messages.
    return depth_rows, group_by_cause([dict(vars(e)) for e in errors])


def group_by_cause(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Repeated last errors (one row per kind, queue and exact message) merged by error
    fingerprint: one poison bug is one group whatever file, id or value its messages name.

    Biggest first; each group keeps its count of jobs, the worst repetition within one
    job, kinds, queues, first and last seen, sample job ids and one example message.
    """
    groups: dict[str, dict[str, Any]] = {}
    for e in errors:
        key = fingerprint(e["message"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "fingerprint": key, "pattern": normalize(e["message"]),
                "message": e["message"], "jobs": 0, "max_repeats_in_one_job": 0,
                "kinds": [], "queues": [], "first_seen": None, "last_seen": None,
                "sample_job_ids": [], "places": []}
        g["jobs"] += int(e["jobs"])
        g["max_repeats_in_one_job"] = max(g["max_repeats_in_one_job"],
                                          int(e["max_repeats_in_one_job"]))
        for field_, value in (("kinds", e["kind"]), ("queues", e["queue"])):
            if value not in g[field_]:
                g[field_].append(value)
        g["places"] = sorted(set(g["places"]) | set(e["places"]))
        g["sample_job_ids"] = sorted(set(g["sample_job_ids"]) | set(e["sample_job_ids"]),
                                     reverse=True)[:5]
        for field_, pick in (("first_seen", min), ("last_seen", max)):
            if e.get(field_) is not None:
                g[field_] = e[field_] if g[field_] is None else pick(g[field_], e[field_])
    return sorted(groups.values(), key=lambda g: (-g["jobs"], -g["max_repeats_in_one_job"],
                                                  g["pattern"]))


def redrive_commands(group: dict[str, Any]) -> list[str]:
    """The commands that redrive exactly one cause's jobs, each matching where they sit
    (``dlq retry-bulk`` for DLQ entries, ``job retry-failed`` for failed jobs), scoped by
    its error fingerprint (and its queue and kind when it has one of each)."""
    scope = f" --fingerprint {group['fingerprint']}"
    if len(group["queues"]) == 1:
        scope += f" --queue {shlex.quote(group['queues'][0])}"
    if len(group["kinds"]) == 1:
        scope += f" --kind {shlex.quote(group['kinds'][0])}"
    places = set(group["places"])
    commands = []
    if "dlq" in places:
        commands.append(awa(f"dlq retry-bulk{scope}"))
    if places - {"dlq"}:
        commands.append(awa(f"job retry-failed{scope}"))
    return commands


def state_file(state_dir: Path | None, url: str) -> Path:
    base = state_dir or Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    parts = conninfo_to_dict(url)
    identity = f"{parts.get('host')}:{parts.get('port')}/{parts.get('dbname')}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return base / "awa-ops" / f"dlq-{digest}.json"


def _load_previous(path: Path) -> dict[str, Any] | None:
    try:
        previous: dict[str, Any] = json.loads(path.read_text())
        return previous
    except (OSError, ValueError):
        return None


def _save(path: Path, depth: dict[str, int]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"at": time.time(), "depth": depth}))
        tmp.replace(path)
    except OSError:
        pass  # growth tracking is a convenience; the check itself still reports depth


def _ago(ts: datetime, now: datetime) -> str:
    return f"{secs(max(0.0, (now - ts).total_seconds()))} ago"


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    depth_rows, errors = await _canonical_dlq(session, options)
    now = datetime.now(UTC)
    by_queue: dict[str, int] = {}
    for row in depth_rows:
        by_queue[row["queue"]] = by_queue.get(row["queue"], 0) + int(row["depth"])
    total = sum(by_queue.values())
    recent = sum(int(r["recent"]) for r in depth_rows)

    path = state_file(options.state_dir, session.url)
    previous = _load_previous(path)
    _save(path, by_queue)
    growth: dict[str, int] = {}
    since = None
    if previous and not options.queue:
        since = time.time() - float(previous["at"])
        for queue, n in by_queue.items():
            delta = n - int(previous["depth"].get(queue, 0))
            if delta > 0:
                growth[queue] = delta

    findings: list[Finding] = []
    limit = options.evidence_limit
    if growth:
        grew = sum(growth.values())
        findings.append(Finding(
            Severity.WARNING,
            f"the DLQ grew by {grew} since the previous run {secs(since)} ago "
            f"({', '.join(f'{q} +{n}' for q, n in sorted(growth.items(), key=lambda i: -i[1]))})",
            "terminal failures are landing faster than they are handled; one failure mode "
            "usually dominates",
            awa("dlq list --limit 20") + "  # then pause the upstream queue if one error dominates",
            [{"queue": q, "grew_by": n, "depth": by_queue[q]} for q, n in growth.items()][:limit],
            RUNBOOK))
    elif recent:
        findings.append(Finding(
            Severity.WARNING,
            f"{plural(recent, 'job')} reached the DLQ in the last {secs(config.OPS_DLQ_RECENT_S)} "
            f"({total} in total)",
            "each is a terminal failure an operator must retry, purge or let retention remove",
            awa("dlq list --limit 20"), depth_rows[:limit], RUNBOOK))

    # One finding per cause (error fingerprint), not per message text.
    for e in errors:
        poison = int(e["max_repeats_in_one_job"]) >= config.OPS_POISON_REPEATS
        widespread = int(e["jobs"]) >= config.OPS_POISON_REPEATS
        if not (poison or widespread):
            continue
        where = "DLQ" if e["places"] == ["dlq"] else "DLQ/failed jobs"
        kinds, queues = ", ".join(e["kinds"]), ", ".join(e["queues"])
        seen = ""
        if e["first_seen"] is not None and e["last_seen"] is not None:
            seen = (f", first seen {_ago(e['first_seen'], now)}, "
                    f"last seen {_ago(e['last_seen'], now)}")
        variants = ("" if e["pattern"] == " ".join((e["message"] or "").split()) else
                    f" (one cause: \"{e['pattern'][:100]}\")")
        findings.append(Finding(
            Severity.WARNING,
            f"repeated error in {where} ({kinds}, queue {queues}): "
            f"\"{(e['message'] or '')[:120]}\"{variants} — {plural(int(e['jobs']), 'job')}, "
            f"up to {e['max_repeats_in_one_job']} identical attempts in one job{seen}",
            "the same error on every attempt means retries cannot help: a poison job "
            "(bad args, a missing dependency, a code bug), not a transient fault",
            awa(f"job dump {e['sample_job_ids'][0]}") + "  # fix the cause, then: "
            + " ; ".join(redrive_commands(e)),
            [e], RUNBOOK))

    if not findings:
        findings.append(Finding(
            Severity.OK,
            "the DLQ is empty" if total == 0 else
            f"{total} DLQ entries, none in the last {secs(config.OPS_DLQ_RECENT_S)}"
            + (" and no growth since the previous run" if previous else ""),
            evidence=depth_rows[:limit], runbook=RUNBOOK))
    return findings
