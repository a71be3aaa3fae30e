"""Canonical engine: the ops read side (what awa-ops and awa-tui show).

Every statement is bounded and index-backed: pairs of ``(state, queue)`` are
enumerated by a loose index scan of each table's ``(state, queue, id)`` index
(one probe per pair, however many rows there are), counts stop at a cap and
lists at a limit, so a huge database costs about what a big one does.  The
caller owns the (short, read-only) transaction; nothing here writes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from awa import config
from awa.job import JOB_COLUMNS, Job
from awa.storage.common.fetch import fetch_all, float_or_none
from awa.storage.common.reads import (
    CANONICAL_KIND_PARTS,
    HOT_RECENTLY_COMPLETED,
    created_buckets,
    kind_count_params,
    kind_counts,
    without_bitmap_scans,
)
from awa.storage.common.tables import DEFERRED_STATES, HOT_STATES
from awa.storage.engine import (
    CAPPED_VALUES,
    CancelledAttempt,
    DlqCursor,
    DlqDepth,
    DlqEntriesPage,
    DlqPageQuery,
    DlqSummary,
    JobListQuery,
    JobRecord,
    JobSummary,
    KindCount,
    Oversized,
    QueueDetail,
    RepeatedError,
    RingState,
    RunningAttemptRead,
    RunningCounts,
    RuntimeDescriptorHashes,
    RuntimeInstance,
    StateBucket,
    StoredDescriptor,
    UniqueClaimHolder,
    WedgedClaims,
)

# --- queue lag and completions, DLQ depth ------------------------------------------
# (Queue depth itself is MaintenanceOps.queue_depths: one rule for every reader.)

# Per queue: the oldest runnable job (one probe per priority of the claim
# index), completions in a window (the finalized index), and the pause flag.
# Queues known only to queue_meta are listed too.
QUEUE_DETAILS = """
WITH q AS (
    SELECT unnest(%(queues)s::text[]) AS queue
    UNION
    SELECT queue FROM awa.queue_meta
), o AS (
    SELECT q.queue,
           (SELECT min(o.run_at) FROM unnest(%(priorities)s::smallint[]) pr(priority)
              CROSS JOIN LATERAL (
                  SELECT h.run_at FROM awa.jobs_hot h
                   WHERE h.state = 'available' AND h.queue = q.queue AND h.priority = pr.priority
                   ORDER BY h.run_at LIMIT 1) o) AS oldest_available,
           CASE WHEN %(since)s::timestamptz IS NULL THEN 0 ELSE
           (SELECT count(*) FROM (SELECT 1 FROM awa.jobs_hot h
              WHERE h.state = 'completed' AND h.queue = q.queue
                AND h.finalized_at > %(since)s AND h.finalized_at <= %(until)s
              LIMIT %(cap)s) c) END AS completed
      FROM q
)
SELECT o.queue, o.oldest_available,
       CASE WHEN o.oldest_available IS NOT NULL
            THEN greatest(EXTRACT(EPOCH FROM (now() - o.oldest_available))::float8, 0) END AS lag_s,
       o.completed, coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by
  FROM o LEFT JOIN awa.queue_meta m ON m.queue = o.queue
 ORDER BY o.queue
"""

# The queues a job completed in lately, by name (common.reads: a probe per queue).
RECENTLY_COMPLETED = HOT_RECENTLY_COMPLETED + "\n ORDER BY w.queue"

DLQ_DEPTHS_BY_QUEUE = """
WITH RECURSIVE qs AS (
    (SELECT queue FROM awa.dlq_entries ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM qs p CROSS JOIN LATERAL (
        SELECT d.queue FROM awa.dlq_entries d WHERE d.queue > p.queue
         ORDER BY d.queue LIMIT 1) n
)
SELECT qs.queue,
       (SELECT count(*) FROM (SELECT 1 FROM awa.dlq_entries d
         WHERE d.queue = qs.queue LIMIT %(cap)s) c) AS n
  FROM (SELECT queue FROM qs LIMIT %(max_queues)s) qs
"""

DLQ_DEPTHS = """
SELECT queue, dlq_reason, count(*) AS depth, max(dlq_at) AS newest,
       count(*) FILTER (WHERE dlq_at > now() - make_interval(secs => %(recent)s)) AS recent
FROM awa.dlq_entries
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
GROUP BY queue, dlq_reason
ORDER BY depth DESC
"""

# --- runtimes ---------------------------------------------------------------------

# The seed's runtime health query, plus what liveness and the screens need.
RUNTIME_INSTANCES = """
SELECT instance_id, hostname, pid, version, started_at, last_seen_at, snapshot_interval_ms,
       healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive,
       leader, shutting_down, queues,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8 AS last_seen_age_s,
       EXTRACT(EPOCH FROM (now() - started_at))::float8 AS uptime_s
  FROM awa.runtime_instances
 ORDER BY leader DESC, last_seen_at DESC
 LIMIT %(limit)s
"""

# --- running attempts ---------------------------------------------------------------

# The runtime that claimed the attempt (migration 0004).  Read through the row's JSON so the
# same statement serves a layout without the column (the Rust-core awa 0.6's canonical
# tables, read by awa.storage.rust_core through these statements): NULL there.  The rows
# are few (a bounded page, or one job).
CLAIMED_BY = "to_jsonb(t) ->> 'claimed_by' AS claimed_by"

_RUNNING_COLUMNS = """
SELECT id, kind, queue, attempt, max_attempts, run_lease, priority,
       attempted_at, heartbeat_at, deadline_at, tags, """ + CLAIMED_BY + """,
       EXTRACT(EPOCH FROM (now() - heartbeat_at))::float8 AS heartbeat_age_s,
       EXTRACT(EPOCH FROM (deadline_at - now()))::float8 AS deadline_remaining_s,
       EXTRACT(EPOCH FROM (now() - attempted_at))::float8 AS running_for_s
  FROM awa.jobs_hot t"""
# The seed's canonical running-jobs query (partial heartbeat index), bounded.
RUNNING = _RUNNING_COLUMNS + """
 WHERE state = 'running'
   AND (%(started_before)s::timestamptz IS NULL OR attempted_at IS NULL
        OR attempted_at <= %(started_before)s)
 ORDER BY heartbeat_at
 LIMIT %(limit)s
"""
RUNNING_BY_ID = _RUNNING_COLUMNS + """
 WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running'
 ORDER BY heartbeat_at
 LIMIT %(limit)s
"""

# Walks idx_jobs_hot_running_heartbeat: only running rows are touched.
RUNNING_COUNTS = """
SELECT queue, count(*) AS running,
       max(EXTRACT(EPOCH FROM (now() - heartbeat_at)))::float8 AS oldest_heartbeat_s,
       count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => %(staleness)s)) AS stale,
       count(*) FILTER (WHERE deadline_at < now()) AS overdue
FROM awa.jobs_hot
WHERE state = 'running' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
GROUP BY queue ORDER BY queue
"""

# Cancelled while running, deadline not yet passed: the handler may still hold
# its slot until it checks is_cancelled().  Uses idx_jobs_hot_finalized.
CANCELLED_WHILE_RUNNING = """
SELECT id AS job_id, kind, queue, attempt, run_lease, heartbeat_at, finalized_at, deadline_at,
       EXTRACT(EPOCH FROM (now() - finalized_at))::float8 AS cancelled_age_s,
       heartbeat_at > finalized_at AS heartbeat_after_cancel
FROM awa.jobs_hot
WHERE state = 'cancelled'
  AND finalized_at > now() - make_interval(secs => %(window)s)
  AND attempted_at IS NOT NULL
  AND deadline_at > now()
  AND heartbeat_at >= finalized_at - make_interval(secs => %(staleness)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY finalized_at
LIMIT %(limit)s
"""

# --- uniqueness ----------------------------------------------------------------------

UNIQUE_HOLDERS = """
SELECT c.unique_key, c.job_id, h.state::text AS state,
       EXISTS (SELECT 1 FROM awa.dlq_entries d WHERE d.job_id = c.job_id) AS in_dlq
  FROM awa.job_unique_claims c LEFT JOIN awa.jobs h ON h.id = c.job_id
 WHERE c.unique_key = ANY(%(keys)s::bytea[])
"""

# The guide's wedge (a running job whose unique key another job holds), per queue.
WEDGED_CLAIMS = """
SELECT j.queue, count(*) AS wedged
  FROM awa.jobs_hot j
  JOIN awa.job_unique_claims c ON c.unique_key = j.unique_key AND c.job_id <> j.id
 WHERE j.state = 'running'
 GROUP BY j.queue
"""

# --- job lists and detail --------------------------------------------------------------

# A list row: never the args (nor any other big value); the last error's head, as much
# of it as an error fingerprint reads (awa.fingerprint.MAX_TEXT).
JOB_LIST_COLUMNS = ("id, kind, queue, state::text AS state, priority, attempt, max_attempts, "
                    "run_at, created_at, attempted_at, finalized_at, tags, "
                    "left(t.errors[array_upper(t.errors, 1)] ->> 'error', 500) AS last_error")

# Whether a row's kind or args contain the text asked for (case-insensitive: the console's
# "/" search); a column of the inner selects, so it applies after their window like kind
# and tag.
ARGS_MATCH = ("(%(args)s::text IS NULL OR strpos(lower(t.kind), lower(%(args)s)) > 0"
              " OR strpos(lower(t.args::text), lower(%(args)s)) > 0) AS args_match")

# Jobs list for one table: enumerate its (state, queue) pairs (loose index
# scan), keep those the filter allows, take the newest rows of each from the
# (state, queue, id) index, then apply the filters no index serves (kind,
# tag, args).  Without such filters the result is exact; with them it covers the
# newest ``window`` rows.
_JOBS_LIST = """
WITH RECURSIVE pairs AS (
    (SELECT state, queue FROM {table} ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM pairs p CROSS JOIN LATERAL (
        SELECT t.state, t.queue FROM {table} t
         WHERE (t.state, t.queue) > (p.state, p.queue)
         ORDER BY t.state, t.queue LIMIT 1) n
), picked AS (
    SELECT state, queue FROM pairs
     WHERE (%(state)s::text IS NULL OR state::text = %(state)s)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     LIMIT %(max_pairs)s
), per_pair AS (
    SELECT CASE WHEN %(post_filtered)s
                THEN greatest(%(page)s, %(window)s / greatest(count(*), 1))
                ELSE %(page)s END AS k
      FROM picked
)
SELECT t.* FROM picked p CROSS JOIN per_pair CROSS JOIN LATERAL (
    SELECT {columns}, {args_match} FROM {table} t
     WHERE t.state = p.state AND t.queue = p.queue
     ORDER BY t.id DESC LIMIT per_pair.k) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s
"""
# Neither state nor queue given: the newest rows by primary key, then the
# kind/tag filters within the newest ``window`` of them.
_JOBS_NEWEST = """
SELECT t.* FROM (
    SELECT {columns}, {args_match} FROM {table} t ORDER BY t.id DESC
     LIMIT CASE WHEN %(post_filtered)s THEN %(window)s ELSE %(page)s END) t
 WHERE (%(kind)s::text IS NULL OR t.kind = %(kind)s)
   AND (%(tag)s::text IS NULL OR t.tags @> ARRAY[%(tag)s::text])
   AND t.args_match
 ORDER BY t.id DESC
 LIMIT %(page)s
"""
_HOT = sql.Identifier("awa", "jobs_hot")
_DEFERRED = sql.Identifier("awa", "scheduled_jobs")
_LIST_PARTS = {"columns": sql.SQL(JOB_LIST_COLUMNS), "args_match": sql.SQL(ARGS_MATCH)}
JOBS_HOT_NEWEST = sql.SQL(_JOBS_NEWEST).format(table=_HOT, **_LIST_PARTS)
SCHEDULED_JOBS_NEWEST = sql.SQL(_JOBS_NEWEST).format(table=_DEFERRED, **_LIST_PARTS)
JOBS_HOT_LIST = sql.SQL(_JOBS_LIST).format(table=_HOT, **_LIST_PARTS)
SCHEDULED_JOBS_LIST = sql.SQL(_JOBS_LIST).format(table=_DEFERRED, **_LIST_PARTS)

_JOB_COLUMNS = ", ".join(JOB_COLUMNS)
_DLQ_AS_JOB = ", ".join("job_id AS id" if c == "id" else c for c in JOB_COLUMNS)
# The job, or its DLQ entry with dlq_reason set: by primary key either way.
JOB_RECORD = f"""
SELECT {_JOB_COLUMNS}, NULL::text AS dlq_reason, NULL::timestamptz AS dlq_at, {CLAIMED_BY}
  FROM awa.jobs t WHERE id = %(id)s
UNION ALL
SELECT {_DLQ_AS_JOB}, dlq_reason, dlq_at, NULL::text FROM awa.dlq_entries WHERE job_id = %(id)s
LIMIT 1"""

# The same, with args, metadata, errors and progress fetched only when their JSON text is
# at most %(cap)s characters; otherwise their first %(cap)s characters and their size.
_TEXTS = {"args": "r.args::text", "metadata": "r.metadata::text",
          "errors": "array_to_json(r.errors)::text", "progress": "r.progress::text"}
JOB_RECORD_CAPPED = ("SELECT " + ", ".join(
    f"CASE WHEN x.{c}_bytes <= %(cap)s THEN r.{c} END AS {c}, "
    f"CASE WHEN x.{c}_bytes > %(cap)s THEN left(x.{c}_text, %(cap)s) END AS {c}_head, "
    f"x.{c}_bytes" if c in _TEXTS else f"r.{c}"
    for c in (*JOB_COLUMNS, "dlq_reason", "dlq_at", "claimed_by")) + f"""
  FROM ({JOB_RECORD}) r
 CROSS JOIN LATERAL (SELECT {", ".join(f"{t} AS {c}_text" for c, t in _TEXTS.items())}) y
 CROSS JOIN LATERAL (SELECT {", ".join(f"y.{c}_text, coalesce(octet_length(y.{c}_text), 0) AS "
                                       f"{c}_bytes" for c in _TEXTS)}) x""")


def capped_record(row: dict[str, Any], **extra: Any) -> JobRecord:
    """A ``JOB_RECORD_CAPPED`` row as a record: oversized values named, left empty."""
    oversized = {c: Oversized(row[f"{c}_head"], int(row[f"{c}_bytes"]))
                 for c in CAPPED_VALUES if row.get(f"{c}_head") is not None}
    values = {k: v for k, v in row.items() if k in JOB_COLUMNS}
    values["args"] = {} if "args" in oversized else values.get("args")
    return JobRecord(Job.from_row(values), row["dlq_reason"], row["dlq_at"], row["claimed_by"],
                     oversized, **extra)


def cap_record(record: JobRecord, cap_bytes: int) -> JobRecord:
    """The capped form of a record already fetched whole (a layout whose values cannot be
    capped in SQL): the rendering stays bounded even though the fetch was not."""
    oversized: dict[str, Oversized] = {}
    job = record.job
    empty: dict[str, Any] = {"args": {}, "metadata": {}, "errors": [], "progress": None}
    for name in CAPPED_VALUES:
        value = getattr(job, name)
        if value is None:
            continue
        text = json.dumps(value, default=str, separators=(", ", ": "))
        size = len(text.encode())
        if size > cap_bytes:
            oversized[name] = Oversized(text[:cap_bytes], size)
            setattr(job, name, empty[name])
    return dataclasses.replace(record, oversized=oversized) if oversized else record


# --- DLQ pages and errors ------------------------------------------------------------------

DLQ_LIST_COLUMNS = ("job_id, kind, queue, dlq_reason, dlq_at, attempt, max_attempts, "
                    "errors[array_upper(errors, 1)]->>'error' AS last_error")
# DLQ page: the index that serves the most selective given filter, newest
# first; the rest are applied within the newest ``window`` entries.
_DLQ_LIST = """
SELECT * FROM (
    SELECT {columns} FROM awa.dlq_entries
     WHERE {where}
       AND (%(before_at)s::timestamptz IS NULL OR (dlq_at, job_id) < (%(before_at)s, %(before_id)s))
     ORDER BY dlq_at DESC, job_id DESC LIMIT %(window)s) w
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (%(reason)s::text IS NULL OR dlq_reason = %(reason)s)
 ORDER BY dlq_at DESC, job_id DESC
 LIMIT %(page)s
"""
DLQ_BY_QUEUE = sql.SQL(_DLQ_LIST).format(columns=sql.SQL(DLQ_LIST_COLUMNS),
                                         where=sql.SQL("queue = %(queue)s"))
DLQ_BY_KIND = sql.SQL(_DLQ_LIST).format(columns=sql.SQL(DLQ_LIST_COLUMNS),
                                        where=sql.SQL("kind = %(kind)s"))
DLQ_NEWEST = sql.SQL(_DLQ_LIST).format(columns=sql.SQL(DLQ_LIST_COLUMNS), where=sql.SQL("true"))

# The newest entries only (idx_dlq_entries_dlq_at); recent failed jobs too, for
# queues without a DLQ (idx_jobs_hot_finalized).  Per job: its last error and
# how many of its attempts failed with that same message.
REPEATED_ERRORS = """
WITH recent AS (
    (SELECT job_id, kind, queue, errors, 'dlq' AS place, dlq_at AS at FROM awa.dlq_entries
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY dlq_at DESC LIMIT %(sample)s)
    UNION ALL
    (SELECT id, kind, queue, errors, 'failed', finalized_at FROM awa.jobs_hot
     WHERE state = 'failed' AND finalized_at IS NOT NULL
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY finalized_at DESC LIMIT %(sample)s)
), last_errors AS (
    SELECT job_id, kind, queue, place, at,
           left(errors[array_upper(errors, 1)]->>'error', 300) AS message,
           (SELECT count(*) FROM unnest(errors) e
            WHERE e->>'error' = errors[array_upper(errors, 1)]->>'error') AS same_attempts
    FROM recent
    WHERE errors IS NOT NULL AND cardinality(errors) > 0
)
SELECT kind, queue, message, count(*) AS jobs, max(same_attempts) AS max_repeats_in_one_job,
       (array_agg(job_id ORDER BY job_id DESC))[1:5] AS sample_job_ids,
       array_agg(DISTINCT place) AS places, min(at) AS first_seen, max(at) AS last_seen
FROM last_errors
GROUP BY kind, queue, message
ORDER BY count(*) DESC, max(same_attempts) DESC
LIMIT %(limit)s
"""

# --- descriptors -----------------------------------------------------------------------------

DESCRIPTORS = """
SELECT 'queue' AS type, queue AS key, descriptor_hash, last_seen_at,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8 AS age_s
FROM awa.queue_descriptors
UNION ALL
SELECT 'kind', kind, descriptor_hash, last_seen_at,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8
FROM awa.job_kind_descriptors
ORDER BY 1, 2
"""
RUNTIME_DESCRIPTOR_HASHES = "SELECT instance_id, descriptor_hashes FROM awa.runtime_instances"

# --- whole-table summaries (the REST API's /api/stats, /api/kinds; cached by the caller) ----
# Jobs per state counts every job (the ``awa.jobs`` view covers each engine's tables), so it
# costs a scan: the API serves it from a TTL cache, never per keystroke.  DLQ entries count
# as failed (they are failed jobs parked aside).
STATE_COUNTS = """
SELECT state::text AS state, count(*) AS n FROM awa.jobs GROUP BY state
UNION ALL
SELECT 'failed', count(*) FROM awa.dlq_entries"""
# The newest jobs below an id, for the created-per-minute series (common.reads): each
# table's primary key backwards, merged.
NEWEST_CREATED = """
SELECT id, state::text AS state, created_at FROM awa.jobs
 WHERE id < %(before_id)s ORDER BY id DESC LIMIT %(limit)s"""
ABOVE_EVERY_ID = 2**63 - 1
# Per kind and queue: the canonical tables' rows by their kind indexes, completions by queue
# (common.reads).
KIND_COUNTS = CANONICAL_KIND_PARTS


def job_summary(row: dict[str, Any]) -> JobSummary:
    """A job-list row (the filters' helper columns left out)."""
    values = {k: v for k, v in row.items() if k != "args_match"}
    values["tags"] = list(values["tags"] or [])
    return JobSummary(**values)


def published_timing(value: Any) -> dict[str, int]:
    """The heartbeat timing a runtime published with its queues (awa.runtime.snapshot)."""
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict) and item.get("heartbeat_staleness_ms") is not None:
            return {key: int(item[key]) for key in ("heartbeat_interval_ms",
                                                    "heartbeat_staleness_ms")
                    if item.get(key) is not None}
    return {}


def queue_names(value: Any) -> list[str]:
    """Queue names from a runtime's ``queues`` json, whatever shape a runtime wrote, sorted."""
    names: set[str] = set()
    if isinstance(value, dict):
        value = [{"name": k, **(v if isinstance(v, dict) else {})} for k, v in value.items()]
    for item in value or []:
        if isinstance(item, str):
            names.add(item)
        elif isinstance(item, (list, tuple)) and item:
            names.add(str(item[0]))
        elif isinstance(item, dict):
            name = item.get("name") or item.get("queue")
            if name:
                names.add(str(name))
    return sorted(names)


class CanonicalReads:
    """The ``OpsReads`` group on ``awa.jobs_hot`` / ``awa.scheduled_jobs``."""

    async def completed_totals(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int] | None:
        """None: retention deletes completed rows without counting them."""
        return None

    async def queue_details(self, conn: psycopg.AsyncConnection[Any], queues: Sequence[str], *,
                            since: datetime | None = None, until: datetime | None = None,
                            cap: int) -> list[QueueDetail]:
        rows = await fetch_all(conn, QUEUE_DETAILS, {
            "queues": list(queues), "since": since, "until": until, "cap": cap,
            "priorities": list(range(config.MIN_PRIORITY, config.MAX_PRIORITY + 1))})
        return [QueueDetail(r["queue"], r["oldest_available"], float_or_none(r["lag_s"]),
                            int(r["completed"]), bool(r["paused"]), r["paused_at"],
                            r["paused_by"]) for r in rows]

    async def recently_completed_queues(self, conn: psycopg.AsyncConnection[Any], *,
                                        within_s: float, limit: int) -> list[str]:
        rows = await fetch_all(conn, RECENTLY_COMPLETED, {"within": within_s, "limit": limit})
        return [r["queue"] for r in rows]

    async def dlq_depths_by_queue(self, conn: psycopg.AsyncConnection[Any], *, cap: int,
                                  max_queues: int) -> list[DlqDepth]:
        rows = await fetch_all(conn, DLQ_DEPTHS_BY_QUEUE, {"cap": cap, "max_queues": max_queues})
        return [DlqDepth(r["queue"], None, int(r["n"]), r["n"] >= cap) for r in rows]

    async def dlq_depths(self, conn: psycopg.AsyncConnection[Any], *, queue: str | None = None,
                         recent_s: float = 0.0) -> list[DlqDepth]:
        rows = await fetch_all(conn, DLQ_DEPTHS, {"queue": queue, "recent": recent_s})
        return [DlqDepth(r["queue"], r["dlq_reason"], int(r["depth"]), False, r["newest"],
                         int(r["recent"])) for r in rows]

    async def runtime_instances(self, conn: psycopg.AsyncConnection[Any], *,
                                limit: int | None = None) -> list[RuntimeInstance]:
        rows = await fetch_all(conn, RUNTIME_INSTANCES, {"limit": limit})
        return [RuntimeInstance(
            instance_id=str(r["instance_id"]), hostname=r["hostname"], pid=r["pid"],
            version=r["version"], started_at=r["started_at"], last_seen_at=r["last_seen_at"],
            snapshot_interval_ms=int(r["snapshot_interval_ms"]), healthy=bool(r["healthy"]),
            postgres_connected=bool(r["postgres_connected"]),
            poll_loop_alive=bool(r["poll_loop_alive"]), heartbeat_alive=bool(r["heartbeat_alive"]),
            maintenance_alive=bool(r["maintenance_alive"]), leader=bool(r["leader"]),
            shutting_down=bool(r["shutting_down"]), queues=queue_names(r["queues"]),
            **published_timing(r["queues"]),
            last_seen_age_s=float(r["last_seen_age_s"]), uptime_s=float_or_none(r["uptime_s"]))
            for r in rows]

    async def running_attempts(self, conn: psycopg.AsyncConnection[Any], *,
                               started_before: datetime | None = None,
                               job_ids: Sequence[int] | None = None,
                               limit: int) -> list[RunningAttemptRead]:
        if job_ids is not None:
            rows = await fetch_all(conn, RUNNING_BY_ID, {"ids": list(job_ids), "limit": limit})
        else:
            rows = await fetch_all(conn, RUNNING,
                                   {"started_before": started_before, "limit": limit})
        return [RunningAttemptRead(
            id=r["id"], kind=r["kind"], queue=r["queue"], attempt=r["attempt"],
            max_attempts=r["max_attempts"], run_lease=r["run_lease"], priority=r["priority"],
            attempted_at=r["attempted_at"], heartbeat_at=r["heartbeat_at"],
            deadline_at=r["deadline_at"], tags=list(r["tags"] or []),
            heartbeat_age_s=float_or_none(r["heartbeat_age_s"]),
            deadline_remaining_s=float_or_none(r["deadline_remaining_s"]),
            running_for_s=float_or_none(r["running_for_s"]), claimed_by=r["claimed_by"])
            for r in rows]

    async def running_counts(self, conn: psycopg.AsyncConnection[Any], *, stale_after_s: float,
                             queue: str | None = None) -> list[RunningCounts]:
        rows = await fetch_all(conn, RUNNING_COUNTS, {"staleness": stale_after_s, "queue": queue})
        return [RunningCounts(r["queue"], int(r["running"]), float_or_none(r["oldest_heartbeat_s"]),
                              int(r["stale"]), int(r["overdue"])) for r in rows]

    async def cancelled_while_running(self, conn: psycopg.AsyncConnection[Any], *,
                                      window_s: float, stale_after_s: float,
                                      queue: str | None = None,
                                      limit: int) -> list[CancelledAttempt]:
        rows = await fetch_all(conn, CANCELLED_WHILE_RUNNING, {
            "window": window_s, "staleness": stale_after_s, "queue": queue, "limit": limit})
        return [CancelledAttempt(**r) for r in rows]

    async def unique_claim_holders(self, conn: psycopg.AsyncConnection[Any],
                                   keys: Sequence[bytes]) -> list[UniqueClaimHolder]:
        if not keys:
            return []
        rows = await fetch_all(conn, UNIQUE_HOLDERS, {"keys": [bytes(k) for k in keys]})
        return [UniqueClaimHolder(bytes(r["unique_key"]), r["job_id"], r["state"],
                                  bool(r["in_dlq"])) for r in rows]

    async def wedged_claims(self, conn: psycopg.AsyncConnection[Any]) -> list[WedgedClaims]:
        return [WedgedClaims(r["queue"], int(r["wedged"]))
                for r in await fetch_all(conn, WEDGED_CLAIMS)]

    async def job_page(self, conn: psycopg.AsyncConnection[Any],
                       query: JobListQuery) -> list[JobSummary]:
        params = {"state": query.state, "queue": query.queue, "kind": query.kind,
                  "tag": query.tag, "args": query.args,
                  "post_filtered": query.post_filtered, "page": query.page,
                  "window": query.window, "max_pairs": query.max_pairs}
        newest = query.state is None and query.queue is None
        hot, deferred = ((JOBS_HOT_NEWEST, SCHEDULED_JOBS_NEWEST) if newest
                         else (JOBS_HOT_LIST, SCHEDULED_JOBS_LIST))
        rows: list[dict[str, Any]] = []
        if query.state is None or query.state in HOT_STATES:
            rows += await fetch_all(conn, hot, params)
        if query.state is None or query.state in DEFERRED_STATES:
            rows += await fetch_all(conn, deferred, params)
        rows.sort(key=lambda r: r["id"], reverse=True)
        return [job_summary(r) for r in rows[: query.page]]

    async def job_record(self, conn: psycopg.AsyncConnection[Any], job_id: int, *,
                         cap_bytes: int | None = None) -> JobRecord | None:
        if cap_bytes is not None:
            rows = await fetch_all(conn, JOB_RECORD_CAPPED, {"id": job_id, "cap": cap_bytes})
            return capped_record(rows[0]) if rows else None
        rows = await fetch_all(conn, JOB_RECORD, {"id": job_id})
        if not rows:
            return None
        row = rows[0]
        return JobRecord(Job.from_row(row), row["dlq_reason"], row["dlq_at"], row["claimed_by"])

    async def dlq_page(self, conn: psycopg.AsyncConnection[Any],
                       query: DlqPageQuery) -> DlqEntriesPage:
        statement = DLQ_BY_QUEUE if query.queue else DLQ_BY_KIND if query.kind else DLQ_NEWEST
        before = query.before
        rows = await fetch_all(conn, statement, {
            "queue": query.queue, "kind": query.kind, "reason": query.reason,
            "window": query.window, "page": query.page,
            "before_at": before.dlq_at if before else None,
            "before_id": before.job_id if before else None})
        entries = [DlqSummary(**r) for r in rows]
        last = entries[-1] if len(entries) >= query.page and entries else None
        return DlqEntriesPage(entries, DlqCursor(last.dlq_at, last.job_id) if last else None)

    async def repeated_errors(self, conn: psycopg.AsyncConnection[Any], *,
                              queue: str | None = None, sample: int,
                              limit: int = 10) -> list[RepeatedError]:
        rows = await fetch_all(conn, REPEATED_ERRORS, {"queue": queue, "sample": sample,
                                                   "limit": limit})
        return [RepeatedError(r["kind"], r["queue"], r["message"], int(r["jobs"]),
                              int(r["max_repeats_in_one_job"]), list(r["sample_job_ids"]),
                              list(r["places"]), r["first_seen"], r["last_seen"])
                for r in rows]

    async def descriptors(self, conn: psycopg.AsyncConnection[Any]) -> list[StoredDescriptor]:
        return [StoredDescriptor(r["type"], r["key"], r["descriptor_hash"], r["last_seen_at"],
                           float_or_none(r["age_s"])) for r in await fetch_all(conn, DESCRIPTORS)]

    async def runtime_descriptor_hashes(
            self, conn: psycopg.AsyncConnection[Any]) -> list[RuntimeDescriptorHashes]:
        return [RuntimeDescriptorHashes(str(r["instance_id"]), r["descriptor_hashes"])
                for r in await fetch_all(conn, RUNTIME_DESCRIPTOR_HASHES)]

    async def ring_states(self, conn: psycopg.AsyncConnection[Any]) -> list[RingState]:
        return []  # rows updated in place: no partition rings

    async def state_counts(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in await fetch_all(conn, STATE_COUNTS):
            counts[r["state"]] = counts.get(r["state"], 0) + int(r["n"])
        return counts

    async def created_timeseries(self, conn: psycopg.AsyncConnection[Any], *, minutes: int,
                                 cap: int) -> list[StateBucket]:
        async def newest(before_id: int | None, limit: int) -> list[dict[str, Any]]:
            return await fetch_all(conn, NEWEST_CREATED, {
                "before_id": ABOVE_EVERY_ID if before_id is None else before_id,
                "limit": limit})

        return await created_buckets(conn, newest, minutes=minutes, cap=cap)

    async def kind_counts(self, conn: psycopg.AsyncConnection[Any], *,
                          cap: int) -> list[KindCount]:
        return kind_counts(await without_bitmap_scans(
            conn, lambda: fetch_all(conn, KIND_COUNTS, kind_count_params(cap))))
