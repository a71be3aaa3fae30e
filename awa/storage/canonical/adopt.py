"""``awa adopt`` into the canonical engine: staged Rust-core rows into jobs_hot / scheduled_jobs.

The staged tables (``awa.storage.rust_core.adopt``) carry our column set, so
each row is written once, with its id, attempt, run lease, errors, progress
and callback columns as the Rust core had them.  A running attempt stays
``running`` with its last heartbeat (its claim time when it never beat), so
this engine's heartbeat rescue takes it once that is older than the
staleness; a ``waiting_external`` job keeps its callback id and timeout.
Unique claims are copied as the Rust core held them (the insert trigger is
off meanwhile, so a claim is neither taken twice nor refused), and the id
sequence continues past every id the Rust core handed out.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

_COLUMNS = (
    "id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, "
    "deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, "
    "unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, "
    "callback_on_fail, callback_transform, run_lease, progress")
_SELECT = (
    "id, kind, queue, args, state::awa.job_state, priority, attempt, max_attempts, run_at, "
    "CASE WHEN state = 'running' THEN coalesce(heartbeat_at, attempted_at, now()) "
    "ELSE heartbeat_at END, deadline_at, attempted_at, finalized_at, created_at, errors, "
    "metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, "
    "callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, "
    "progress")
TRIGGERS = "ALTER TABLE awa.{table} {action} TRIGGER awa_unique_claim_ins"
ADOPT_HOT = (f"INSERT INTO awa.jobs_hot ({_COLUMNS}) SELECT {_SELECT} FROM {{stage}}.jobs "
             "WHERE state NOT IN ('scheduled', 'retryable') ORDER BY id")
ADOPT_DEFERRED = (f"INSERT INTO awa.scheduled_jobs ({_COLUMNS}) SELECT {_SELECT} "
                  "FROM {stage}.jobs WHERE state IN ('scheduled', 'retryable') ORDER BY id")
ADOPT_DLQ = (f"INSERT INTO awa.dlq_entries (job_{_COLUMNS}, dlq_reason, dlq_at, "
             "original_run_lease) "
             f"SELECT {_SELECT}, dlq_reason, dlq_at, original_run_lease FROM {{stage}}.dlq "
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

COUNT_STATES = """
SELECT state::text AS state, count(*) AS n FROM awa.jobs_hot GROUP BY state
UNION ALL
SELECT state::text, count(*) FROM awa.scheduled_jobs GROUP BY state
UNION ALL
SELECT 'dlq', count(*) FROM awa.dlq_entries HAVING count(*) > 0"""
COUNT_TABLES = """
SELECT (SELECT count(*) FROM awa.job_unique_claims) AS unique_claims,
       (SELECT count(*) FROM awa.cron_jobs) AS cron_jobs,
       (SELECT count(*) FROM awa.queue_meta) AS queue_meta,
       (SELECT count(*) FROM awa.queue_descriptors) AS queue_descriptors,
       (SELECT count(*) FROM awa.job_kind_descriptors) AS job_kind_descriptors"""


def _q(text: str, **names: str) -> sql.Composed:
    return sql.SQL(text).format(**{k: sql.Identifier(v) for k, v in names.items()})


async def adopt_shared_tables(conn: psycopg.AsyncConnection[Any], staging: str,
                              next_id: int) -> None:
    """The tables both engines share (DLQ, unique claims, cron, queue_meta, descriptors)
    from the staging schema, then the id sequence past every adopted id."""
    await conn.execute(_q(ADOPT_DLQ, stage=staging))
    await conn.execute(_q(ADOPT_UNIQUE_CLAIMS, stage=staging))
    await conn.execute(_q(ADOPT_CRON, stage=staging))
    await conn.execute(_q(ADOPT_QUEUE_META, stage=staging))
    for table, key in (("queue_descriptors", "queue"), ("job_kind_descriptors", "kind")):
        await conn.execute(_q(ADOPT_DESCRIPTOR, stage=staging, table=table, key=key))
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


class CanonicalAdopt:
    """``awa.storage.rust_core.adopt.AdoptTarget`` for the canonical engine."""

    async def adopt_staged(self, conn: psycopg.AsyncConnection[Any], staging: str,
                           next_id: int) -> None:
        for table in ("jobs_hot", "scheduled_jobs"):
            await conn.execute(sql.SQL(TRIGGERS).format(table=sql.Identifier(table),
                                                        action=sql.SQL("DISABLE")))
        await conn.execute(_q(ADOPT_HOT, stage=staging))
        await conn.execute(_q(ADOPT_DEFERRED, stage=staging))
        for table in ("jobs_hot", "scheduled_jobs"):
            await conn.execute(sql.SQL(TRIGGERS).format(table=sql.Identifier(table),
                                                        action=sql.SQL("ENABLE")))
        await adopt_shared_tables(conn, staging, next_id)

    async def adopted_counts(self, conn: psycopg.AsyncConnection[Any]
                             ) -> tuple[dict[str, int], dict[str, int]]:
        return await counts(conn, COUNT_STATES)
