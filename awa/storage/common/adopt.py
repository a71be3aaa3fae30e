"""The engine-neutral core of ``awa adopt``: the staged Rust-core rows of the tables every
layout shares, and the counts that check an adoption.

The staged tables (``awa.storage.rust_core.adopt``) carry our column set (``COLUMNS``, read
as ``SELECT``: a running attempt keeps its last heartbeat, its claim time when it never
beat).  The DLQ, unique claims (copied as the Rust core held them), cron, queue_meta and
descriptors are written here for either engine, then the id sequence continues past every
id the Rust core handed out.  Each engine places the jobs themselves in its own layout.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

COLUMNS = (
    "id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, "
    "deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, "
    "unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, "
    "callback_on_fail, callback_transform, run_lease, progress")
SELECT = (
    "id, kind, queue, args, state::awa.job_state, priority, attempt, max_attempts, run_at, "
    "CASE WHEN state = 'running' THEN coalesce(heartbeat_at, attempted_at, now()) "
    "ELSE heartbeat_at END, deadline_at, attempted_at, finalized_at, created_at, errors, "
    "metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, "
    "callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, "
    "progress")
ADOPT_DLQ = (f"INSERT INTO awa.dlq_entries (job_{COLUMNS}, dlq_reason, dlq_at, "
             "original_run_lease) "
             f"SELECT {SELECT}, dlq_reason, dlq_at, original_run_lease FROM {{stage}}.dlq "
             "ORDER BY id")
ADOPT_UNIQUE_CLAIMS = ("INSERT INTO awa.job_unique_claims (unique_key, job_id) "
                       "SELECT unique_key, job_id FROM {stage}.unique_claims "
                       "ON CONFLICT DO NOTHING")
ADOPT_CRON = """
INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, args, priority, max_attempts,
                           tags, metadata, missed_fire_policy, last_enqueued_at, paused_at,
                           paused_by, created_at, updated_at)
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM {stage}.cron_jobs
ON CONFLICT (name) DO NOTHING"""
ADOPT_QUEUE_META = """
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by, enqueue_shards)
SELECT queue, paused, paused_at, paused_by, enqueue_shards FROM {stage}.queue_meta
ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, paused_at = excluded.paused_at,
    paused_by = excluded.paused_by, enqueue_shards = excluded.enqueue_shards"""
ADOPT_DESCRIPTOR = """
INSERT INTO awa.{table} ({key}, display_name, description, owner, docs_url, tags, extra,
                         descriptor_hash, last_seen_at, created_at, updated_at, sync_interval_ms)
SELECT {key}, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
       last_seen_at, created_at, updated_at, sync_interval_ms FROM {stage}.{table}
ON CONFLICT ({key}) DO NOTHING"""
SET_SEQUENCE = "SELECT setval('awa.jobs_id_seq', %(next_id)s, true)"

COUNT_TABLES = """
SELECT (SELECT count(*) FROM awa.job_unique_claims) AS unique_claims,
       (SELECT count(*) FROM awa.cron_jobs) AS cron_jobs,
       (SELECT count(*) FROM awa.queue_meta) AS queue_meta,
       (SELECT count(*) FROM awa.queue_descriptors) AS queue_descriptors,
       (SELECT count(*) FROM awa.job_kind_descriptors) AS job_kind_descriptors"""



def staged(text: str, **names: str) -> sql.Composed:
    """``text`` with its ``{name}`` placeholders as quoted identifiers (the staging schema)."""
    return sql.SQL(text).format(**{k: sql.Identifier(v) for k, v in names.items()})


async def adopt_shared_tables(conn: psycopg.AsyncConnection[Any], staging: str,
                              next_id: int) -> None:
    """The tables both engines share (DLQ, unique claims, cron, queue_meta, descriptors)
    from the staging schema, then the id sequence past every adopted id."""
    await conn.execute(staged(ADOPT_DLQ, stage=staging))
    await conn.execute(staged(ADOPT_UNIQUE_CLAIMS, stage=staging))
    await conn.execute(staged(ADOPT_CRON, stage=staging))
    await conn.execute(staged(ADOPT_QUEUE_META, stage=staging))
    for table, key in (("queue_descriptors", "queue"), ("job_kind_descriptors", "kind")):
        await conn.execute(staged(ADOPT_DESCRIPTOR, stage=staging, table=table, key=key))
    if next_id > 0:
        await conn.execute(SET_SEQUENCE, {"next_id": next_id})


async def counts(conn: psycopg.AsyncConnection[Any], count_states: str
                 ) -> tuple[dict[str, int], dict[str, int]]:
    """Jobs per state (``count_states``: the engine's own count) and the shared tables' rows."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(count_states)
        states: dict[str, int] = {}
        for r in await cur.fetchall():
            states[r["state"]] = states.get(r["state"], 0) + int(r["n"])
        await cur.execute(COUNT_TABLES)
        row = await cur.fetchone()
    tables = {k: int(v) for k, v in (row or {}).items()}
    return dict(sorted(states.items())), tables
