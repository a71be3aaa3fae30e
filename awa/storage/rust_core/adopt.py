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

from awa.statements import named_statements
from awa.storage.common.fetch import fetch_all, fetch_one

STAGING = "awa_adopt"  # the staged jobs and the adoption's own state, until --finalize
STASH = "awa_rust_core"  # the Rust core's schema `awa`, renamed, until --finalize
RUST_VERSION = 40  # the migration version awa-pg / awa-cli 0.6.9 leave
# Advisory lock key of adoption (two `awa adopt` never interleave their phases).
ADOPT_LOCK_KEY = 0x61776164  # "awad"

# Every statement of adoption's Rust-core side, written out in ``sql/adopt.sql`` (which says
# what each does).  The schemas they name are composed in as identifiers by ``_q``.
_SQL = named_statements("awa.storage.rust_core", "sql/adopt.sql")
CREATE_STAGING = ("create_staging_schema", "create_staging_jobs", "create_staging_dlq",
                  "create_staging_skipped", "create_staging_adoption")
# The shared tables, staged whole (``stage_<table>``, counted by ``staged_count_<table>``).
STAGE_TABLES = ("unique_claims", "cron_jobs", "queue_meta", "queue_descriptors",
                "job_kind_descriptors")
# Rust-core tables with rows that have no counterpart here (reported, never moved;
# ``count_<table>``).
NOT_MOVED = {
    "runtime_instances": "runtimes of the stopped Rust-core fleet: ours register themselves",
    "batch_operations": "batch operations are not provided by awa-py",
}
RUST_ID_SEQUENCES = ("jobs_id_seq", "job_id_seq")  # ``last_value_of_<sequence>``


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


def _q(name: str, **schemas: str) -> sql.Composed:
    """The statement ``name`` with the schemas it names as identifiers: they are named at run
    time (the Rust core's queue-storage schema) or by constants here, and an identifier
    cannot be a parameter."""
    return sql.SQL(_SQL[name]).format(**{k: sql.Identifier(v) for k, v in schemas.items()})


async def _count(conn: psycopg.AsyncConnection[Any], query: Any,
                 params: dict[str, Any] | None = None) -> int:
    row = await fetch_one(conn, query, params)
    return int(row["n"] or 0) if row else 0


async def schema_exists(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    row = await fetch_one(conn, _SQL["schema_exists"], {"name": name})
    return bool(row and row["present"])


async def relation_exists(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    row = await fetch_one(conn, _SQL["relation_exists"], {"name": name})
    return bool(row and row["present"])


async def lock(conn: psycopg.AsyncConnection[Any]) -> None:
    """The adoption lock, for the current transaction."""
    await conn.execute(_SQL["lock"], {"key": ADOPT_LOCK_KEY})


async def live_runtimes(conn: psycopg.AsyncConnection[Any],
                        intervals: float) -> list[dict[str, Any]]:
    """Rust-core runtimes whose snapshot is younger than ``intervals`` of their own interval."""
    return await fetch_all(conn, _SQL["live_runtimes"], {"intervals": intervals})


async def lock_rust_tables(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(_SQL["lock_timeout"])
    await conn.execute(_SQL["lock_rust_tables"])


async def rust_queue_storage_schema(conn: psycopg.AsyncConnection[Any]) -> str | None:
    row = await fetch_one(conn, _SQL["rust_qs_schema"])
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
    for name in CREATE_STAGING:
        await conn.execute(_q(name, stage=STAGING))
    if has_dlq:
        view, shown = _q("stage_view", stage=STAGING, dlq=dlq), _q("count_view", dlq=dlq)
    else:
        view, shown = _q("stage_view_without_dlq", stage=STAGING), _q("count_view_without_dlq")
    before = await _count(conn, shown)
    cur = await conn.execute(view, {"queue_storage": qs is not None})
    staged = cur.rowcount
    if before > staged:
        await conn.execute(_q("skip", stage=STAGING), {
            "state": "any", "source": "awa.jobs", "n": before - staged,
            "reason": "an older row of a job shown twice by the Rust core's view "
                      "(the job's newest row is moved)"})
    if qs:
        await conn.execute(_q("stage_canonical_rows", stage=STAGING))
        # Open receipt and compact claims: staged, and those whose entry is gone counted.
        for source, statement in (("lease_claims", "stage_receipts"),
                                  ("lease_claim_batches", "stage_compact")):
            lost = await _count(conn, _q(statement, stage=STAGING, s=qs))
            if lost:
                await conn.execute(_q("skip", stage=STAGING), {
                    "state": "running", "source": source, "n": lost,
                    "reason": "the claim's ready entry was already pruned: its kind and "
                              "args are gone"})
    if has_dlq:
        await conn.execute(_q("stage_dlq", stage=STAGING, dlq=dlq))
    await conn.execute(_q("skip_old_completed", stage=STAGING),
                       {"retention_s": retention_s, "reason": retention_reason})
    for table in STAGE_TABLES:
        await conn.execute(_q(f"stage_{table}", stage=STAGING))
    left = await _count(conn, _q("unique_claims_left", stage=STAGING))
    if left:
        await conn.execute(_q("skip", stage=STAGING), {
            "state": "-", "source": "job_unique_claims", "n": left,
            "reason": "held by a job that is not moved"})
    for table, reason in NOT_MOVED.items():
        if await relation_exists(conn, f"awa.{table}"):
            n = await _count(conn, _SQL[f"count_{table}"])
            if n:
                await conn.execute(_q("skip", stage=STAGING), {
                    "state": "-", "source": table, "n": n, "reason": reason})
    floor = 0
    for seq in RUST_ID_SEQUENCES:
        if await relation_exists(conn, f"awa.{seq}"):
            floor = max(floor, await _count(conn, _SQL[f"last_value_of_{seq}"]))
    next_id = await _count(conn, _q("max_staged_id", stage=STAGING), {"floor": floor})
    counts = await staged_counts(conn)
    counts.next_id = next_id
    return counts


async def record(conn: psycopg.AsyncConnection[Any], *, engine: str, next_id: int) -> None:
    """Remember the staged adoption (phase ``staged``) and rename the Rust schema to ``STASH``."""
    qs = await rust_queue_storage_schema(conn)
    await conn.execute(_q("record", stage=STAGING), {
        "stash": STASH, "qs": None if qs in (None, "awa") else qs, "engine": engine,
        "next_id": next_id})
    await conn.execute(_q("stash_schema", stash=STASH))


async def staged_counts(conn: psycopg.AsyncConnection[Any]) -> StagedCounts:
    counts = StagedCounts()
    for r in await fetch_all(conn, _q("staged_by_state", stage=STAGING)):
        counts.moves.append((r["state"], r["source"], int(r["n"])))
    for table in STAGE_TABLES:
        counts.tables[table] = await _count(conn, _q(f"staged_count_{table}", stage=STAGING))
    for r in await fetch_all(conn, _q("skipped", stage=STAGING)):
        counts.cannot.append((r["state"], r["source"], int(r["n"]), r["reason"]))
    return counts


async def adoption(conn: psycopg.AsyncConnection[Any]) -> dict[str, Any] | None:
    """The recorded adoption (phase, stash, engine, next_id, report), None when there is none."""
    if not await relation_exists(conn, f"{STAGING}.adoption"):
        return None
    return await fetch_one(conn, _q("adoption", stage=STAGING))


async def set_phase(conn: psycopg.AsyncConnection[Any], phase: str,
                    report: str | None = None) -> None:
    await conn.execute(_q("set_phase", stage=STAGING), {"phase": phase, "report": report})


async def restore(conn: psycopg.AsyncConnection[Any], *, ours_present: bool) -> None:
    """Drop our layout and give schema ``awa`` back to the Rust core (caller's transaction)."""
    if ours_present:
        await conn.execute(_SQL["drop_ours"])
    await conn.execute(_q("restore_stash", stash=STASH))
    await conn.execute(_q("drop_schema", schema=STAGING))


async def drop(conn: psycopg.AsyncConnection[Any], rust_queue_storage_schema: str | None,
               stash_present: bool) -> None:
    """``--finalize``: drop the stashed Rust schema (and its own queue-storage schema)."""
    if stash_present:
        await conn.execute(_q("drop_schema", schema=STASH))
    if rust_queue_storage_schema and await schema_exists(conn, rust_queue_storage_schema):
        await conn.execute(_q("drop_schema", schema=rust_queue_storage_schema))
    await conn.execute(_q("drop_schema", schema=STAGING))
