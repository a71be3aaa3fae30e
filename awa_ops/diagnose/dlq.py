"""dlq: depth by queue and reason, growth since the previous run, repeated errors.

Growth needs memory between runs: a small JSON file per database under the
XDG state directory.  Poison-job recognition: one error message repeated
across a job's attempts, or across many recent dead-lettered/failed jobs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from awa import config
from awa_ops.diagnose._text import awa, plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.storage import column_exists, storage_engine

NAME = "dlq"
RUNBOOK = runbook("dlq")

async def _canonical_dlq(session, options) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
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
        errors = (await engine.repeated_errors(session.conn, queue=options.queue,
                                               sample=config.OPS_ERROR_SAMPLE)
                  if with_errors else [])
    depth_rows = [{"queue": d.queue, "dlq_reason": d.reason, "depth": d.count,
                   "newest": d.newest, "recent": d.recent} for d in depths]
    return depth_rows, [asdict(e) for e in errors]


def state_file(state_dir: Path | None, url: str) -> Path:
    base = state_dir or Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    parts = conninfo_to_dict(url)
    identity = f"{parts.get('host')}:{parts.get('port')}/{parts.get('dbname')}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return base / "awa-ops" / f"dlq-{digest}.json"


def _load_previous(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
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


async def check(session, engine, options) -> list[Finding]:
    depth_rows, errors = await _canonical_dlq(session, options)
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

    for e in errors:
        poison = int(e["max_repeats_in_one_job"]) >= config.OPS_POISON_REPEATS
        widespread = int(e["jobs"]) >= config.OPS_POISON_REPEATS
        if not (poison or widespread):
            continue
        where = "DLQ" if e["places"] == ["dlq"] else "DLQ/failed jobs"
        findings.append(Finding(
            Severity.WARNING,
            f"repeated error in {where} ({e['kind']}, queue {e['queue']}): "
            f"\"{(e['message'] or '')[:120]}\" — {plural(int(e['jobs']), 'job')}, up to "
            f"{e['max_repeats_in_one_job']} identical attempts in one job",
            "the same message on every attempt means retries cannot help: a poison job "
            "(bad args, a missing dependency, a code bug), not a transient fault",
            awa(f"job dump {e['sample_job_ids'][0]}") + "  # fix the cause, then: "
            + awa(f"dlq retry-bulk --queue {e['queue']}"),
            [e], RUNBOOK))

    if not findings:
        findings.append(Finding(
            Severity.OK,
            "the DLQ is empty" if total == 0 else
            f"{total} DLQ entries, none in the last {secs(config.OPS_DLQ_RECENT_S)}"
            + (" and no growth since the previous run" if previous else ""),
            evidence=depth_rows[:limit], runbook=RUNBOOK))
    return findings
