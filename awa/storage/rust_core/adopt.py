"""The Rust-core side of ``awa adopt``: stage a 0.6.9 database's jobs, stash its schema, restore it.

A database laid out by the Rust-core awa 0.6 (migration version 40) keeps its
jobs in its own layout (queue storage: ready entries, deferred jobs, done
entries, receipts and leases, payload-borne errors; or canonical rows).  This
module reads that layout *while schema ``awa`` is still the Rust core's*
(its ``awa.jobs`` view is a PL/pgSQL function that names ``awa.`` objects)
into engine-neutral staging tables in schema ``STAGING``, each job once, in
our column set (``awa.jobs``' columns plus the table it came from).  Then the
Rust schema is renamed to ``STASH``, untouched, so ``awa adopt --abort`` can
rename it back and 0.6.9 workers run on it again; ``--finalize`` drops it.

Every statement reading the Rust layout is here (the read-only engine's
sibling); the target engine writes the staged rows into its own layout
(``AdoptTarget``), so nothing of the Rust core is written and nothing of
ours reaches into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from psycopg import sql

from awa.storage.common.fetch import fetch_all, fetch_one
from awa.storage.rust_core import OPEN_RECEIPT

STAGING = "awa_adopt"  # the staged jobs and the adoption's own state, until --finalize
STASH = "awa_rust_core"  # the Rust core's schema `awa`, renamed, until --finalize
RUST_VERSION = 40  # the migration version awa-pg / awa-cli 0.6.9 leave
# Advisory lock key of adoption (two `awa adopt` never interleave their phases).
ADOPT_LOCK_KEY = 0x61776164  # "awad"

# --- liveness: a Rust-core runtime that wrote its snapshot lately ------------------------
LIVE_RUNTIMES = """
SELECT instance_id::text AS instance_id, hostname, pid, shutting_down,
       EXTRACT(EPOCH FROM now() - last_seen_at)::float8 AS seen_s_ago,
       EXTRACT(EPOCH FROM last_seen_at + make_interval(
           secs => %(intervals)s * greatest(snapshot_interval_ms, 1) / 1000.0) - now()
       )::float8 AS gone_in_s
  FROM awa.runtime_instances
 WHERE last_seen_at > now() - make_interval(
           secs => %(intervals)s * greatest(snapshot_interval_ms, 1) / 1000.0)
 ORDER BY last_seen_at DESC
"""
LOCK = "SELECT pg_advisory_xact_lock(%(key)s)"
# The tables a starting 0.6.9 runtime writes first: held until the stash commits, so none
# starts between the liveness check and the rename.
LOCK_RUST_TABLES = ("LOCK TABLE awa.runtime_instances, awa.queue_meta, awa.job_unique_claims "
                    "IN ACCESS EXCLUSIVE MODE")
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '5s'"
RUST_QS_SCHEMA = "SELECT awa.active_queue_storage_schema() AS s"
SCHEMA_EXISTS = "SELECT to_regnamespace(%(name)s) IS NOT NULL AS present"
RELATION_EXISTS = "SELECT to_regclass(%(name)s) IS NOT NULL AS present"

# --- staging tables -----------------------------------------------------------------------
CREATE_STAGING = """
CREATE SCHEMA {stage};
CREATE TABLE {stage}.jobs (
    id bigint PRIMARY KEY, kind text NOT NULL, queue text NOT NULL, args jsonb NOT NULL,
    state text NOT NULL, priority smallint NOT NULL, attempt smallint NOT NULL,
    max_attempts smallint NOT NULL, run_at timestamptz NOT NULL, heartbeat_at timestamptz,
    deadline_at timestamptz, attempted_at timestamptz, finalized_at timestamptz,
    created_at timestamptz NOT NULL, errors jsonb[], metadata jsonb NOT NULL,
    tags text[] NOT NULL, unique_key bytea, unique_states bit(8), callback_id uuid,
    callback_timeout_at timestamptz, callback_filter text, callback_on_complete text,
    callback_on_fail text, callback_transform text, run_lease bigint NOT NULL,
    progress jsonb, source text NOT NULL);
CREATE TABLE {stage}.dlq (LIKE {stage}.jobs, dlq_reason text NOT NULL,
    dlq_at timestamptz NOT NULL, original_run_lease bigint NOT NULL, PRIMARY KEY (id));
CREATE TABLE {stage}.skipped (state text NOT NULL, source text NOT NULL, n bigint NOT NULL,
    reason text NOT NULL);
CREATE TABLE {stage}.adoption (phase text NOT NULL, stash text NOT NULL,
    rust_queue_storage_schema text, engine text NOT NULL, next_id bigint NOT NULL,
    staged_at timestamptz NOT NULL DEFAULT now(), report jsonb);
"""

_PAYLOAD_COLUMNS = """
awa.queue_storage_payload_errors({p}.payload) AS errors,
coalesce(NULLIF({p}.payload->'metadata', 'null'::jsonb), '{{{{}}}}'::jsonb) AS metadata,
awa.queue_storage_payload_tags({p}.payload) AS tags"""

# Every job of the Rust core's own awa.jobs view (its jobs_compat(): ready, deferred,
# materialized leases, terminal and DLQ rows on queue storage; jobs_hot and scheduled_jobs
# on canonical), DLQ rows left to STAGE_DLQ.  A job the view shows twice (an older
# terminal row beside a newer live one) is staged once, the live row first.
STAGE_VIEW = """
INSERT INTO {stage}.jobs
SELECT v.id, v.kind, v.queue, v.args, v.state::text, v.priority, v.attempt, v.max_attempts,
       v.run_at, v.heartbeat_at, v.deadline_at, v.attempted_at, v.finalized_at, v.created_at,
       v.errors, coalesce(v.metadata, '{{}}'::jsonb), coalesce(v.tags, '{{}}'::text[]),
       v.unique_key, v.unique_states, v.callback_id, v.callback_timeout_at, v.callback_filter,
       v.callback_on_complete, v.callback_on_fail, v.callback_transform, v.run_lease,
       v.progress,
       CASE WHEN {queue_storage} THEN
            CASE WHEN v.state = 'available' THEN 'ready_entries'
                 WHEN v.state IN ('scheduled', 'retryable') THEN 'deferred_jobs'
                 WHEN v.state IN ('running', 'waiting_external') THEN 'leases'
                 ELSE 'done_entries' END
       ELSE CASE WHEN v.state IN ('scheduled', 'retryable') THEN 'scheduled_jobs'
                 ELSE 'jobs_hot' END END
  FROM awa.jobs v
 {not_in_dlq}
 ORDER BY CASE WHEN v.finalized_at IS NULL THEN 0 ELSE 1 END, v.finalized_at DESC
ON CONFLICT (id) DO NOTHING
"""
# STAGE_VIEW's {not_in_dlq} where the Rust core has a DLQ (else nothing: every row is staged);
# its {queue_storage} is the literal true or false.
NOT_IN_DLQ = "WHERE NOT EXISTS (SELECT 1 FROM {dlq}.dlq_entries d WHERE d.job_id = v.id)"
# On queue storage, rows still in the canonical tables (a database moved to queue storage
# by 0.6.9's mixed transition before its canonical backlog drained): the view reads only
# the active engine, so they are staged from the tables.
STAGE_CANONICAL_ROWS = """
INSERT INTO {stage}.jobs
SELECT j.id, j.kind, j.queue, j.args, j.state::text, j.priority, j.attempt, j.max_attempts,
       j.run_at, j.heartbeat_at, j.deadline_at, j.attempted_at, j.finalized_at, j.created_at,
       j.errors, j.metadata, j.tags, j.unique_key, j.unique_states, j.callback_id,
       j.callback_timeout_at, j.callback_filter, j.callback_on_complete, j.callback_on_fail,
       j.callback_transform, j.run_lease, j.progress, j.source
  FROM (SELECT h.*, 'jobs_hot' AS source FROM awa.jobs_hot h
        UNION ALL
        SELECT d.*, 'scheduled_jobs' FROM awa.scheduled_jobs d) j
ON CONFLICT (id) DO NOTHING
"""
COUNT_VIEW = "\nSELECT count(*) AS n FROM awa.jobs v\n " + NOT_IN_DLQ

# Open receipt claims (queue storage's unmaterialized running attempts), which the Rust
# core's view leaves out: the guide's open-claim anti-join, minus claims with a lease row
# (the view has those), joined to the claimed ready entry for kind, args and payload.
_OPEN_RECEIPTS = """
  FROM {s}.lease_claims c
  LEFT JOIN {s}.ready_entries r
    ON r.ready_slot = c.ready_slot AND r.ready_generation = c.ready_generation
   AND r.queue = c.queue AND r.priority = c.priority AND r.enqueue_shard = c.enqueue_shard
   AND r.lane_seq = c.lane_seq
  LEFT JOIN {s}.attempt_state a ON a.job_id = c.job_id AND a.run_lease = c.run_lease
 WHERE """ + OPEN_RECEIPT
STAGE_RECEIPTS = """
INSERT INTO {stage}.jobs
SELECT c.job_id, r.kind, c.queue, r.args, 'running', c.priority, c.attempt, c.max_attempts,
       r.run_at, coalesce(a.heartbeat_at, c.claimed_at), c.deadline_at, c.claimed_at, NULL,
       r.created_at, """ + _PAYLOAD_COLUMNS.format(p="r") + """,
       r.unique_key, r.unique_states::bit(8), NULL, NULL, NULL, NULL, NULL, NULL, c.run_lease,
       coalesce(NULLIF(a.progress, 'null'::jsonb), NULLIF(r.payload->'progress', 'null'::jsonb)),
       'lease_claims'
""" + _OPEN_RECEIPTS + """
   AND r.job_id IS NOT NULL
ON CONFLICT (id) DO NOTHING
"""
COUNT_RECEIPTS_WITHOUT_ENTRY = ("SELECT count(*) AS n " + _OPEN_RECEIPTS
                                + " AND r.job_id IS NULL")

# Compact receipt claims (0.6.9's zero-deadline claims: one lease_claim_batches row per
# claim batch), open when no closure batch covers the receipt, no closure row names the
# attempt and no lease materialized it.  Neither the Rust core's view nor its CLI lists them.
_OPEN_COMPACT = """
  FROM {s}.lease_claim_batches b
 CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.receipt_ids, b.lane_seqs, b.attempts,
                           b.max_attempts)
       AS i(job_id, run_lease, receipt_id, lane_seq, attempt, max_attempts)
  LEFT JOIN {s}.ready_entries r
    ON r.ready_slot = b.ready_slot AND r.ready_generation = b.ready_generation
   AND r.queue = b.queue AND r.priority = b.priority AND r.enqueue_shard = b.enqueue_shard
   AND r.lane_seq = i.lane_seq
  LEFT JOIN {s}.attempt_state a ON a.job_id = i.job_id AND a.run_lease = i.run_lease
 WHERE NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closure_batches cb
                    WHERE cb.receipt_ranges @> i.receipt_id)
   AND NOT EXISTS (SELECT 1 FROM {s}.lease_claim_closures cx
                    WHERE cx.job_id = i.job_id AND cx.run_lease = i.run_lease)
   AND NOT EXISTS (SELECT 1 FROM {s}.leases l
                    WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease)"""
STAGE_COMPACT = """
INSERT INTO {stage}.jobs
SELECT i.job_id, r.kind, b.queue, r.args, 'running', r.priority, i.attempt, i.max_attempts,
       r.run_at, coalesce(a.heartbeat_at, b.claimed_at), b.deadline_at, b.claimed_at, NULL,
       r.created_at, """ + _PAYLOAD_COLUMNS.format(p="r") + """,
       r.unique_key, r.unique_states::bit(8), NULL, NULL, NULL, NULL, NULL, NULL, i.run_lease,
       coalesce(NULLIF(a.progress, 'null'::jsonb), NULLIF(r.payload->'progress', 'null'::jsonb)),
       'lease_claim_batches'
""" + _OPEN_COMPACT + """
   AND r.job_id IS NOT NULL
ON CONFLICT (id) DO NOTHING
"""
COUNT_COMPACT_WITHOUT_ENTRY = "SELECT count(*) AS n " + _OPEN_COMPACT + " AND r.job_id IS NULL"

STAGE_DLQ = """
INSERT INTO {stage}.dlq
SELECT d.job_id, d.kind, d.queue, d.args, d.state::text, d.priority, d.attempt,
       d.max_attempts, d.run_at, NULL, NULL, d.attempted_at, d.finalized_at, d.created_at,
       """ + _PAYLOAD_COLUMNS.format(p="d") + """,
       d.unique_key, d.unique_states::bit(8), NULL, NULL, NULL, NULL, NULL, NULL, d.run_lease,
       NULLIF(d.payload->'progress', 'null'::jsonb), 'dlq_entries', d.dlq_reason, d.dlq_at,
       d.original_run_lease
  FROM {dlq}.dlq_entries d
"""
# Completed history past our retention is not brought over (our cleanup would delete it
# on its first pass).
SKIP_OLD_COMPLETED = """
WITH gone AS (
    DELETE FROM {stage}.jobs
     WHERE state = 'completed'
       AND finalized_at < now() - make_interval(secs => %(retention_s)s)
    RETURNING source)
INSERT INTO {stage}.skipped
SELECT 'completed', source, count(*), %(reason)s FROM gone GROUP BY source
"""
SKIP = "INSERT INTO {stage}.skipped VALUES (%(state)s, %(source)s, %(n)s, %(reason)s)"

STAGE_TABLES = {
    "unique_claims": """
CREATE TABLE {stage}.unique_claims AS
SELECT c.unique_key, c.job_id FROM awa.job_unique_claims c
 WHERE EXISTS (SELECT 1 FROM {stage}.jobs j WHERE j.id = c.job_id)
    OR EXISTS (SELECT 1 FROM {stage}.dlq d WHERE d.id = c.job_id)""",
    "cron_jobs": """
CREATE TABLE {stage}.cron_jobs AS
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs""",
    "queue_meta": """
CREATE TABLE {stage}.queue_meta AS
SELECT queue, paused, paused_at, paused_by, enqueue_shards FROM awa.queue_meta""",
    "queue_descriptors": """
CREATE TABLE {stage}.queue_descriptors AS
SELECT queue, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
       last_seen_at, created_at, updated_at, sync_interval_ms FROM awa.queue_descriptors""",
    "job_kind_descriptors": """
CREATE TABLE {stage}.job_kind_descriptors AS
SELECT kind, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
       last_seen_at, created_at, updated_at, sync_interval_ms FROM awa.job_kind_descriptors""",
}
UNIQUE_CLAIMS_LEFT = """
SELECT count(*) AS n FROM awa.job_unique_claims c
 WHERE NOT EXISTS (SELECT 1 FROM {stage}.unique_claims s
                    WHERE s.unique_key = c.unique_key AND s.job_id = c.job_id)"""
# Rust-core tables with rows that have no counterpart here (reported, never moved).
NOT_MOVED = {
    "runtime_instances": "runtimes of the stopped Rust-core fleet: ours register themselves",
    "batch_operations": "batch operations are not provided by awa-py",
}
COUNT_TABLE = "SELECT count(*) AS n FROM awa.{table}"
SEQUENCE_LAST = "SELECT last_value AS n FROM awa.{seq}"
RUST_ID_SEQUENCES = ("jobs_id_seq", "job_id_seq")
MAX_STAGED_ID = """
SELECT greatest((SELECT max(id) FROM {stage}.jobs), (SELECT max(id) FROM {stage}.dlq),
                %(floor)s)::bigint AS n"""
RECORD = """
INSERT INTO {stage}.adoption (phase, stash, rust_queue_storage_schema, engine, next_id)
VALUES ('staged', %(stash)s, %(qs)s, %(engine)s, %(next_id)s)"""
STASH_SCHEMA = "ALTER SCHEMA awa RENAME TO {stash}"

# --- after staging ------------------------------------------------------------------------
ADOPTION = "SELECT phase, stash, rust_queue_storage_schema, engine, next_id, report " \
           "FROM {stage}.adoption"
SET_PHASE = "UPDATE {stage}.adoption SET phase = %(phase)s, report = coalesce(%(report)s, report)"
STAGED_BY_STATE = """
SELECT state, source, count(*) AS n FROM {stage}.jobs GROUP BY state, source
UNION ALL
SELECT 'dlq', source, count(*) FROM {stage}.dlq GROUP BY source
ORDER BY 1, 2"""
STAGED_TABLE_COUNT = "SELECT count(*) AS n FROM {stage}.{table}"
SKIPPED = "SELECT state, source, n, reason FROM {stage}.skipped WHERE n > 0 ORDER BY state, source"
DROP_OURS = "DROP SCHEMA awa CASCADE"
RESTORE_STASH = "ALTER SCHEMA {stash} RENAME TO awa"
DROP_SCHEMA = "DROP SCHEMA {schema} CASCADE"


class AdoptTarget(Protocol):
    """What an engine offers ``awa adopt``: write the staged rows into its own layout.

    ``adopt_staged`` runs inside the caller's transaction, reads the tables of
    ``STAGING`` (``jobs``, ``dlq``, ``unique_claims``, ``cron_jobs``,
    ``queue_meta``, ``queue_descriptors``, ``job_kind_descriptors``), keeps
    every id and column, turns running attempts into orphans its rescue takes
    and moves its id sequence past ``next_id``.  ``adopted_counts`` reads back
    what the layout holds, with the keys of ``StagedCounts.states`` and
    ``StagedCounts.tables``.
    """

    async def adopt_staged(self, conn: psycopg.AsyncConnection[Any], staging: str,
                           next_id: int) -> None: ...

    async def adopted_counts(self, conn: psycopg.AsyncConnection[Any]
                             ) -> tuple[dict[str, int], dict[str, int]]: ...


@dataclass
class StagedCounts:
    """What staging found: per (state, source table), per table, and what stays behind."""

    moves: list[tuple[str, str, int]] = field(default_factory=list)  # state, source, n
    tables: dict[str, int] = field(default_factory=dict)
    cannot: list[tuple[str, str, int, str]] = field(default_factory=list)  # state, src, n, why
    next_id: int = 0

    @property
    def states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for state, _, n in self.moves:
            out[state] = out.get(state, 0) + n
        return dict(sorted(out.items()))


def _q(text: str, **names: str) -> sql.Composed:
    return sql.SQL(text).format(**{k: sql.Identifier(v) for k, v in names.items()})


async def _count(conn: psycopg.AsyncConnection[Any], query: Any,
                 params: dict[str, Any] | None = None) -> int:
    row = await fetch_one(conn, query, params)
    return int(row["n"] or 0) if row else 0


async def schema_exists(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    row = await fetch_one(conn, SCHEMA_EXISTS, {"name": name})
    return bool(row and row["present"])


async def relation_exists(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    row = await fetch_one(conn, RELATION_EXISTS, {"name": name})
    return bool(row and row["present"])


async def lock(conn: psycopg.AsyncConnection[Any]) -> None:
    """The adoption lock, for the current transaction."""
    await conn.execute(LOCK, {"key": ADOPT_LOCK_KEY})


async def live_runtimes(conn: psycopg.AsyncConnection[Any],
                        intervals: float) -> list[dict[str, Any]]:
    """Rust-core runtimes whose snapshot is younger than ``intervals`` of their own interval."""
    return await fetch_all(conn, LIVE_RUNTIMES, {"intervals": intervals})


async def lock_rust_tables(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(LOCK_TIMEOUT)
    await conn.execute(LOCK_RUST_TABLES)


async def rust_queue_storage_schema(conn: psycopg.AsyncConnection[Any]) -> str | None:
    row = await fetch_one(conn, RUST_QS_SCHEMA)
    return row["s"] if row else None


async def stage(conn: psycopg.AsyncConnection[Any], *, retention_s: float,
                retention_reason: str) -> StagedCounts:
    """Stage every job and table of the Rust-core layout into ``STAGING`` (caller's transaction).

    Schema ``awa`` must still be the Rust core's.  Returns what was staged and
    what was not (with the reason); nothing of the Rust core is written.
    """
    qs = await rust_queue_storage_schema(conn)
    dlq = qs or "awa"
    has_dlq = await relation_exists(conn, f"{dlq}.dlq_entries")
    for statement in CREATE_STAGING.strip().split(";\n"):
        if statement.strip():
            await conn.execute(_q(statement, stage=STAGING))
    view = sql.SQL(STAGE_VIEW).format(
        stage=sql.Identifier(STAGING),
        not_in_dlq=_q(NOT_IN_DLQ, dlq=dlq) if has_dlq else sql.SQL(""),
        queue_storage=sql.SQL("true" if qs else "false"))
    shown = await _count(conn, _q(COUNT_VIEW if has_dlq else "SELECT count(*) AS n FROM awa.jobs",
                                  dlq=dlq))
    cur = await conn.execute(view)
    staged = cur.rowcount
    if shown > staged:
        await conn.execute(_q(SKIP, stage=STAGING), {
            "state": "any", "source": "awa.jobs", "n": shown - staged,
            "reason": "an older row of a job shown twice by the Rust core's view "
                      "(the job's newest row is moved)"})
    if qs:
        await conn.execute(_q(STAGE_CANONICAL_ROWS, stage=STAGING))
        await conn.execute(_q(STAGE_RECEIPTS, stage=STAGING, s=qs))
        await conn.execute(_q(STAGE_COMPACT, stage=STAGING, s=qs))
        for source, query in (("lease_claims", COUNT_RECEIPTS_WITHOUT_ENTRY),
                              ("lease_claim_batches", COUNT_COMPACT_WITHOUT_ENTRY)):
            lost = await _count(conn, _q(query, s=qs))
            if lost:
                await conn.execute(_q(SKIP, stage=STAGING), {
                    "state": "running", "source": source, "n": lost,
                    "reason": "the claim's ready entry was already pruned: its kind and "
                              "args are gone"})
    if has_dlq:
        await conn.execute(_q(STAGE_DLQ, stage=STAGING, dlq=dlq))
    await conn.execute(_q(SKIP_OLD_COMPLETED, stage=STAGING),
                       {"retention_s": retention_s, "reason": retention_reason})
    for statement in STAGE_TABLES.values():
        await conn.execute(_q(statement, stage=STAGING))
    left = await _count(conn, _q(UNIQUE_CLAIMS_LEFT, stage=STAGING))
    if left:
        await conn.execute(_q(SKIP, stage=STAGING), {
            "state": "-", "source": "job_unique_claims", "n": left,
            "reason": "held by a job that is not moved"})
    for table, reason in NOT_MOVED.items():
        if await relation_exists(conn, f"awa.{table}"):
            n = await _count(conn, _q(COUNT_TABLE, table=table))
            if n:
                await conn.execute(_q(SKIP, stage=STAGING), {
                    "state": "-", "source": table, "n": n, "reason": reason})
    floor = 0
    for seq in RUST_ID_SEQUENCES:
        if await relation_exists(conn, f"awa.{seq}"):
            floor = max(floor, await _count(conn, _q(SEQUENCE_LAST, seq=seq)))
    next_id = await _count(conn, _q(MAX_STAGED_ID, stage=STAGING), {"floor": floor})
    counts = await staged_counts(conn)
    counts.next_id = next_id
    return counts


async def record(conn: psycopg.AsyncConnection[Any], *, engine: str, next_id: int) -> None:
    """Remember the staged adoption (phase ``staged``) and rename the Rust schema to ``STASH``."""
    qs = await rust_queue_storage_schema(conn)
    await conn.execute(_q(RECORD, stage=STAGING), {
        "stash": STASH, "qs": None if qs in (None, "awa") else qs, "engine": engine,
        "next_id": next_id})
    await conn.execute(_q(STASH_SCHEMA, stash=STASH))


async def staged_counts(conn: psycopg.AsyncConnection[Any]) -> StagedCounts:
    counts = StagedCounts()
    for r in await fetch_all(conn, _q(STAGED_BY_STATE, stage=STAGING)):
        counts.moves.append((r["state"], r["source"], int(r["n"])))
    for table in STAGE_TABLES:
        counts.tables[table] = await _count(conn, _q(STAGED_TABLE_COUNT, stage=STAGING,
                                                     table=table))
    for r in await fetch_all(conn, _q(SKIPPED, stage=STAGING)):
        counts.cannot.append((r["state"], r["source"], int(r["n"]), r["reason"]))
    return counts


async def adoption(conn: psycopg.AsyncConnection[Any]) -> dict[str, Any] | None:
    """The recorded adoption (phase, stash, engine, next_id, report), None when there is none."""
    if not await relation_exists(conn, f"{STAGING}.adoption"):
        return None
    return await fetch_one(conn, _q(ADOPTION, stage=STAGING))


async def set_phase(conn: psycopg.AsyncConnection[Any], phase: str,
                    report: str | None = None) -> None:
    await conn.execute(_q(SET_PHASE, stage=STAGING), {"phase": phase, "report": report})


async def restore(conn: psycopg.AsyncConnection[Any], *, ours_present: bool) -> None:
    """Drop our layout and give schema ``awa`` back to the Rust core (caller's transaction)."""
    if ours_present:
        await conn.execute(DROP_OURS)
    await conn.execute(_q(RESTORE_STASH, stash=STASH))
    await conn.execute(_q(DROP_SCHEMA, schema=STAGING))


async def drop(conn: psycopg.AsyncConnection[Any], rust_queue_storage_schema: str | None,
               stash_present: bool) -> None:
    """``--finalize``: drop the stashed Rust schema (and its own queue-storage schema)."""
    if stash_present:
        await conn.execute(_q(DROP_SCHEMA, schema=STASH))
    if rust_queue_storage_schema and await schema_exists(conn, rust_queue_storage_schema):
        await conn.execute(_q(DROP_SCHEMA, schema=rust_queue_storage_schema))
    await conn.execute(_q(DROP_SCHEMA, schema=STAGING))
