"""``awa adopt``: bring a database run by the Rust-core awa 0.6.9 into our layout, in place.

Phases, one transaction each, resumable (``awa adopt`` again continues from
the phase recorded in ``awa_adopt.adoption``):

1. **stage** (under the adoption lock): refuse while a Rust-core runtime is
   live (its ``awa.runtime_instances`` row seen within
   ``config.ADOPT_LIVE_SNAPSHOT_INTERVALS`` of its own snapshot interval)
   unless ``force``; lock the tables a starting 0.6.9 runtime writes; stage
   every job and table (``awa.storage.adopt``, the Rust side); rename the Rust
   schema ``awa`` to ``awa_rust_core``, untouched.
2. **layout**: our ``awa migrate`` for the target engine.
3. **copy**: the engine writes the staged rows (``adopt_staged``); its counts
   per state must equal the staged ones, or the phase rolls back.

``dry_run`` runs phase 1's staging in a transaction it rolls back: the report
is the one the real run ends with.  ``abort`` gives schema ``awa`` back to the
Rust core (0.6.9 workers run on it again); ``finalize`` drops what adoption
kept.  Nothing here runs SQL on job tables itself: the Rust side and the
target engine do, reached through ``awa.storage.adopt`` only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from awa import config, db, storage
from awa.job import AwaError, ValidationError
from awa.storage import CANONICAL, QUEUE_STORAGE, RUST_CORE, describe_layout
from awa.storage import adopt as store

STAGED, LAID_OUT, ADOPTED = "staged", "laid_out", "adopted"
ENGINE_TARGETS = (QUEUE_STORAGE, CANONICAL)  # engines that can take staged rows (AdoptTarget)
TABLE_TARGETS = {
    CANONICAL: {"scheduled": "scheduled_jobs", "retryable": "scheduled_jobs",
                "dlq": "dlq_entries"},
    QUEUE_STORAGE: {"available": "ready_entries", "scheduled": "deferred_jobs",
                    "retryable": "deferred_jobs", "running": "lease_claims",
                    "waiting_external": "leases", "completed": "done_entries",
                    "failed": "done_entries", "cancelled": "done_entries",
                    "dlq": "dlq_entries"}}


class AdoptRefused(AwaError):
    """Adoption cannot start or continue (a live Rust-core runtime, a wrong layout, ...)."""


@dataclass
class AdoptReport:
    """What adoption moves (or moved): per state and source table, per table, what it cannot."""

    engine: str
    moves: list[tuple[str, str, str, int]] = field(default_factory=list)  # state, from, to, n
    tables: dict[str, int] = field(default_factory=dict)
    cannot: list[tuple[str, str, int, str]] = field(default_factory=list)
    states: dict[str, int] = field(default_factory=dict)
    next_id: int = 0
    live: list[str] = field(default_factory=list)  # live Rust runtimes (dry run only)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "states": self.states, "tables": self.tables,
                "moves": [{"state": s, "from": f, "to": t, "jobs": n}
                          for s, f, t, n in self.moves],
                "cannot": [{"state": s, "from": f, "count": n, "reason": r}
                           for s, f, n, r in self.cannot],
                "next_id_after": self.next_id, "live_runtimes": self.live}

    def states_line(self) -> str:
        return "per state: " + (" ".join(f"{k}={v}" for k, v in self.states.items())
                                or "no jobs")


def _target(engine: str, state: str) -> str:
    return TABLE_TARGETS.get(engine, {}).get(state, "jobs_hot")


def _report(engine: str, counts: store.StagedCounts) -> AdoptReport:
    return AdoptReport(engine, [(s, f, _target(engine, s), n) for s, f, n in counts.moves],
                       dict(counts.tables), list(counts.cannot), counts.states, counts.next_id)


def _check_engine(engine: str) -> None:
    if engine not in ENGINE_TARGETS:
        raise ValidationError(f"unknown storage engine {engine!r}: choose one of "
                              f"{', '.join(ENGINE_TARGETS)}")


def _retention_reason() -> str:
    return (f"completed more than {config.COMPLETED_RETENTION_HOURS:g} h ago: past the "
            f"completed-job retention, the first cleanup would delete it")


async def _check_rust_layout(conn: psycopg.AsyncConnection[Any]) -> None:
    layout = await describe_layout(conn)
    if not (layout.foreign and layout.distribution == RUST_CORE):
        what = layout.describe() if layout.installed else "no awa schema"
        raise AdoptRefused(f"nothing to adopt: this database is not laid out by the Rust-core "
                           f"awa 0.6 ({what}, {layout.distribution or 'nobody'}); nothing "
                           f"changed")
    if layout.schema_version != store.RUST_VERSION:
        raise AdoptRefused(f"the Rust-core layout is at migration version "
                           f"{layout.schema_version}; awa adopt takes version "
                           f"{store.RUST_VERSION} (awa 0.6.9): run 0.6.9's `awa migrate` first; "
                           f"nothing changed")


async def _refuse_if_live(conn: psycopg.AsyncConnection[Any], force: bool) -> list[str]:
    live = await store.live_runtimes(conn, config.ADOPT_LIVE_SNAPSHOT_INTERVALS)
    names = [f"{r['hostname'] + ' ' if r['hostname'] else ''}pid {r['pid']} "
             f"({'shutting down, ' if r['shutting_down'] else ''}"
             f"seen {r['seen_s_ago']:.0f} s ago)" for r in live]
    if live and not force:
        wait = max(r["gone_in_s"] for r in live)
        raise AdoptRefused(
            f"{len(live)} Rust-core runtime(s) still live ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}): stop the 0.6.9 fleet and run awa adopt "
            f"again (a stopped runtime counts as gone {wait:.0f} s from now, "
            f"{config.ADOPT_LIVE_SNAPSHOT_INTERVALS} snapshot intervals after its last), or "
            f"--force if they are gone; nothing changed")
    return names


async def _connect(url: str) -> psycopg.AsyncConnection[Any]:
    return await db.connect(url, config.APP_NAME_CLI)


async def dry_run(url: str, engine: str = config.DEFAULT_STORAGE_ENGINE) -> AdoptReport:
    """What ``adopt`` would move and what it cannot, changing nothing."""
    _check_engine(engine)
    conn = await _connect(url)
    try:
        recorded = await store.adoption(conn)
        if recorded is not None:
            raise AdoptRefused(f"an adoption is already under way (phase {recorded['phase']}): "
                               f"run `awa adopt` to finish it, `awa adopt --abort` to undo it "
                               f"or `awa adopt --finalize`")
        await _check_rust_layout(conn)
        await conn.execute("BEGIN")
        try:
            live = await _refuse_if_live(conn, force=True)
            counts = await store.stage(conn, retention_s=config.COMPLETED_RETENTION_HOURS * 3600,
                                      retention_reason=_retention_reason())
        finally:
            await conn.execute("ROLLBACK")
        report = _report(engine, counts)
        report.live = live
        return report
    finally:
        await conn.close()


async def adopt(url: str, engine: str = config.DEFAULT_STORAGE_ENGINE, *,
                force: bool = False, until: str | None = None) -> AdoptReport | None:
    """Run (or resume) the adoption; the report of what the target engine now holds.

    ``until`` (``STAGED`` or ``LAID_OUT``) stops after that phase and returns None:
    a step-by-step run, each step resumable and abortable.
    """
    _check_engine(engine)
    if until not in (None, STAGED, LAID_OUT):
        raise ValidationError(f"until: {STAGED!r} or {LAID_OUT!r}, not {until!r}")
    conn = await _connect(url)
    try:
        recorded = await store.adoption(conn)
        if recorded is None:
            await _check_rust_layout(conn)
            async with conn.transaction():
                await store.lock(conn)
                await _refuse_if_live(conn, force)
                try:
                    await store.lock_rust_tables(conn)
                except psycopg.errors.LockNotAvailable as exc:
                    raise AdoptRefused("the Rust-core tables are in use (a 0.6.9 runtime or "
                                       "tool is connected): stop it and run awa adopt again; "
                                       "nothing changed") from exc
                counts = await store.stage(
                    conn, retention_s=config.COMPLETED_RETENTION_HOURS * 3600,
                    retention_reason=_retention_reason())
                await store.record(conn, engine=engine, next_id=counts.next_id)
            recorded = await store.adoption(conn)
            assert recorded is not None  # just written
        if until == recorded["phase"]:
            return None
        engine = recorded["engine"]
        _check_engine(engine)
        if recorded["phase"] == STAGED:
            await storage.migrate(conn, engine)
            async with conn.transaction():
                await store.set_phase(conn, LAID_OUT)
            recorded["phase"] = LAID_OUT
            if until == LAID_OUT:
                return None
        if recorded["phase"] == LAID_OUT:
            async with conn.transaction():
                await store.lock(conn)
                target = store.target(await storage.open_engine(conn))
                await target.adopt_staged(conn, store.STAGING, int(recorded["next_id"]))
                staged = _report(engine, await store.staged_counts(conn))
                staged.next_id = int(recorded["next_id"])
                states, tables = await target.adopted_counts(conn)
                if states != staged.states:
                    raise AdoptRefused(f"adopted counts per state {states} differ from the "
                                       f"staged ones {staged.states}: rolled back this phase; "
                                       f"`awa adopt --abort` restores the Rust-core layout")
                staged.tables = {k: tables.get(k, 0) for k in staged.tables}
                await store.set_phase(conn, ADOPTED, json.dumps(staged.as_dict()))
            return staged
        done = AdoptReport(engine, states=(recorded["report"] or {}).get("states") or {})
        raise AdoptRefused(f"already adopted ({done.states_line()}): "
                           f"run `awa adopt --finalize` to drop the Rust-core tables, or "
                           f"`awa adopt --abort` to go back to 0.6.9")
    finally:
        await conn.close()


@asynccontextmanager
async def _locked(url: str) -> AsyncIterator[tuple[psycopg.AsyncConnection[Any],
                                                    dict[str, Any] | None]]:
    """A transaction holding the adoption lock, and the adoption recorded (None: none)."""
    conn = await _connect(url)
    try:
        async with conn.transaction():
            await store.lock(conn)
            yield conn, await store.adoption(conn)
    finally:
        await conn.close()


async def abort(url: str) -> str:
    """Give schema ``awa`` back to the Rust core: 0.6.9 workers run on it again."""
    async with _locked(url) as (conn, recorded):
        if recorded is None or not await store.schema_exists(conn, store.STASH):
            raise AdoptRefused("no adoption to abort (or it was finalized): nothing changed")
        ours = await store.schema_exists(conn, "awa")
        await store.restore(conn, ours_present=ours)
    return (f"aborted: schema awa is the Rust-core awa 0.6.9's again (from "
            f"{store.STASH}); awa-py's layout{' dropped' if ours else ' was not created'}")


async def finalize(url: str) -> str:
    """Drop the stashed Rust-core tables; the adoption cannot be aborted afterwards."""
    async with _locked(url) as (conn, recorded):
        if recorded is None:
            raise AdoptRefused("no adoption to finalize: nothing changed")
        if recorded["phase"] != ADOPTED:
            raise AdoptRefused(f"the adoption is not finished (phase {recorded['phase']}): "
                               f"run `awa adopt` (or `awa adopt --abort`); nothing changed")
        await store.drop(conn, recorded["rust_queue_storage_schema"],
                        await store.schema_exists(conn, store.STASH))
    return f"finalized: dropped the Rust-core tables ({store.STASH}) and {store.STAGING}"
