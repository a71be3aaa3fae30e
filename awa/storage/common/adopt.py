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

from awa.statements import named_statements

# Column fragments of canonical's adoption statements (``awa.storage.canonical.adopt``; nothing
# here runs them: kept importable until canonical writes its statements out).
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
_SQL = named_statements("awa.storage.common", "sql/adopt.sql")


def staged(text: str, **names: str) -> sql.Composed:
    """``text`` with its ``{name}`` placeholders as quoted identifiers (the staging schema).

    The schema is named at run time, and an identifier cannot be a parameter, so the
    statement (whole, from a ``.sql`` file) is composed with ``sql.Identifier``."""
    return sql.SQL(text).format(**{k: sql.Identifier(v) for k, v in names.items()})


async def adopt_shared_tables(conn: psycopg.AsyncConnection[Any], staging: str,
                              next_id: int) -> None:
    """The tables both engines share (DLQ, unique claims, cron, queue_meta, descriptors)
    from the staging schema, then the id sequence past every adopted id."""
    for name in ("adopt_dlq", "adopt_unique_claims", "adopt_cron", "adopt_queue_meta",
                 "adopt_queue_descriptors", "adopt_job_kind_descriptors"):
        await conn.execute(staged(_SQL[name], stage=staging))
    if next_id > 0:
        await conn.execute(_SQL["set_sequence"], {"next_id": next_id})


async def counts(conn: psycopg.AsyncConnection[Any], count_states: str
                 ) -> tuple[dict[str, int], dict[str, int]]:
    """Jobs per state (``count_states``: the engine's own count) and the shared tables' rows."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(count_states)
        states: dict[str, int] = {}
        for r in await cur.fetchall():
            states[r["state"]] = states.get(r["state"], 0) + int(r["n"])
        await cur.execute(_SQL["count_tables"])
        row = await cur.fetchone()
    tables = {k: int(v) for k, v in (row or {}).items()}
    return dict(sorted(states.items())), tables
