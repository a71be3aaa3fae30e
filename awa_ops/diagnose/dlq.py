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
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from awa import config
from awa_ops.diagnose._text import awa, plural, secs
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.storage import column_exists, quote

NAME = "dlq"
RUNBOOK = runbook("dlq")

DEPTH = """
SELECT queue, dlq_reason, count(*) AS depth, max(dlq_at) AS newest,
       count(*) FILTER (WHERE dlq_at > now() - make_interval(secs => %(recent)s)) AS recent
FROM {dlq}
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
GROUP BY queue, dlq_reason
ORDER BY depth DESC
"""
# The newest entries only (idx_dlq_entries_dlq_at); recent failed jobs too, for
# queues without a DLQ (idx_jobs_hot_finalized).  Per job: its last error and
# how many of its attempts failed with that same message.
REPEATED_ERRORS = """
WITH recent AS (
    (SELECT job_id, kind, queue, errors, 'dlq' AS place FROM awa.dlq_entries
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY dlq_at DESC LIMIT %(sample)s)
    UNION ALL
    (SELECT id, kind, queue, errors, 'failed' FROM awa.jobs_hot
     WHERE state = 'failed' AND finalized_at IS NOT NULL
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY finalized_at DESC LIMIT %(sample)s)
), last_errors AS (
    SELECT job_id, kind, queue, place,
           left(errors[array_upper(errors, 1)]->>'error', 300) AS message,
           (SELECT count(*) FROM unnest(errors) e
            WHERE e->>'error' = errors[array_upper(errors, 1)]->>'error') AS same_attempts
    FROM recent
    WHERE errors IS NOT NULL AND cardinality(errors) > 0
)
SELECT kind, queue, message, count(*) AS jobs, max(same_attempts) AS max_repeats_in_one_job,
       (array_agg(job_id ORDER BY job_id DESC))[1:5] AS sample_job_ids,
       array_agg(DISTINCT place) AS places
FROM last_errors
GROUP BY kind, queue, message
ORDER BY count(*) DESC, max(same_attempts) DESC
LIMIT 10
"""


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
    params = {"queue": options.queue, "recent": config.OPS_DLQ_RECENT_S,
              "sample": config.OPS_ERROR_SAMPLE}
    schema = engine.schema if engine.is_queue_storage else "awa"
    depth_query = DEPTH.format(dlq=f"{quote(schema)}.dlq_entries")
    if await column_exists(session, schema, "dlq_entries", "errors"):
        depth_rows, errors = await session.fetch_sets((depth_query, params),
                                                      (REPEATED_ERRORS, params))
    else:  # the queue-storage DLQ keeps no per-attempt error array
        depth_rows, errors = await session.fetch_all(depth_query, params), []
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
