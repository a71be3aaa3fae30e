"""Queue storage: ring rotation and prune, run by the maintenance leader.

Each ring (queue: ready entries, tombstones, terminal history; claim:
receipts and closures; lease: materialized attempts) writes into its current
slot.  ``rotate`` moves a ring to its next slot once that slot is empty;
``prune`` reclaims a sealed slot with ``TRUNCATE`` -- never a row DELETE --
once it proves the slot holds nothing live:

* queue slot: no ready entry still claimable (at or past its lane's claim
  head, not tombstoned, not claimed), no open receipt or lease whose payload
  lives there, and no terminal row younger than its retention (failed rows
  inside the failed-retention floor are carried forward to the current slot);
* claim slot: no open receipt, no lease naming one of its receipts, and no
  claimable-looking ready entry whose claim evidence is one of its receipts;
* lease slot: no lease row left.

The proof runs again after the ``ACCESS EXCLUSIVE`` lock is taken, under a
short ``lock_timeout``: a reader or writer holding the partition makes prune
skip this round (``busy``) instead of queueing claims behind it.

For metrics (``awa.maintenance.rotate.*`` / ``prune.*``, ``awa.ring.*``) the
report also names what held each slot it could not reclaim (its *blocker*:
the first live condition found, in the order the proofs list them), times
each ring's prune and rotation, and reads each ring's position and occupied
slots after the tick.
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from awa.storage.engine import (
    PRUNE_BLOCKER_LOCK,
    PRUNE_BLOCKERS,
    PruneReport,
    RingPass,
    RingState,
)
from awa.storage.queue_storage.procedures import named, read
from awa.storage.queue_storage.schema import DEFAULT_SCHEMA, in_schema

Ring = Literal["queue", "claim", "lease"]
RINGS: tuple[Ring, ...] = ("queue", "claim", "lease")
# Each ring's tables, as layout.sql's partition loop pairs them (``('<table>', '<ring>')``):
# the one list of what a ring holds.
_RING_TABLE = re.compile(r"\('(\w+)', '(queue|claim|lease)'\)")
_TABLES: dict[str, tuple[str, ...]] = {
    ring: tuple(t for t, r in _RING_TABLE.findall(read("layout.sql")) if r == ring)
    for ring in RINGS}
DEFAULT_LOCK_TIMEOUT_MS = 50

RING_STATE = named("rings.sql", "ring_state")
LOCK_RING = named("rings.sql", "lock_ring")
ADVANCE = named("rings.sql", "advance")
SETTLE_CLAIM_HEADS = named("rings.sql", "settle_claim_heads")
SET_LOCK_TIMEOUT = named("rings.sql", "set_lock_timeout")
# What keeps a slot alive: each answers with the first live condition (a blocker name) or
# NULL when nothing does.
QUEUE_SLOT_LIVE = named("rings.sql", "queue_slot_live")
CARRY_FAILED = named("rings.sql", "carry_failed")
CLAIM_SLOT_LIVE = named("rings.sql", "claim_slot_live")
LEASE_SLOT_LIVE = named("rings.sql", "lease_slot_live")
# The statements on one partition name it (an identifier, composed here).
SLOT_EMPTY = "SELECT NOT EXISTS (SELECT 1 FROM {table}) AS empty"
# Which slots of a ring hold any row: one EXISTS probe per partition, one statement.
OCCUPIED_SLOT = "CASE WHEN {probes} THEN {slot} END"
OCCUPIED = "SELECT array_remove(ARRAY[{slots}]::int[], NULL) AS occupied"


def _partition(table: str, slot: int, schema: str) -> sql.Identifier:
    return sql.Identifier(schema, f"{table}_{int(slot)}")


async def _one(conn: psycopg.AsyncConnection[Any], query: str | sql.Composed, schema: str,
               params: dict[str, Any] | None = None) -> dict[str, Any]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(in_schema(query, schema) if isinstance(query, str) else query, params)
        row = await cur.fetchone()
        assert row is not None
        return row


async def ring_state(conn: psycopg.AsyncConnection[Any], *,
                     schema: str = DEFAULT_SCHEMA) -> dict[str, dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(in_schema(RING_STATE, schema))
        return {r["ring"]: r for r in await cur.fetchall()}


async def _slot_empty(conn: psycopg.AsyncConnection[Any], ring: str, slot: int,
                      schema: str) -> bool:
    for table in _TABLES[ring]:
        row = await _one(conn, sql.SQL(SLOT_EMPTY).format(table=_partition(table, slot, schema)),
                         schema)
        if not row["empty"]:
            return False
    return True


async def rotate(conn: psycopg.AsyncConnection[Any], ring: Ring, min_age_s: float = 0.0, *,
                 schema: str = DEFAULT_SCHEMA) -> bool | None:
    """Move ``ring`` to its next slot when that slot is empty and the current one has been
    written for ``min_age_s``.  True: it moved; False: it was due but the next slot still
    held rows (wrap pressure); None: not due yet, which is no attempt at all."""
    async with conn.transaction():
        state = await _one(conn, LOCK_RING, schema, {"ring": ring})
        current, count = int(state["current_slot"]), int(state["slot_count"])
        if float(state["age_s"]) < min_age_s:
            return None
        following = (current + 1) % count
        if not await _slot_empty(conn, ring, following, schema):
            return False
        await conn.execute(in_schema(ADVANCE, schema),
                           {"ring": ring, "next": following, "current": current})
    return True


async def _blocker(conn: psycopg.AsyncConnection[Any], ring: str, slot: int,
                   completed_s: float, schema: str) -> str | None:
    """What keeps ``slot`` of ``ring`` alive (``PRUNE_BLOCKERS``), or None: it can go."""
    if ring == "queue":
        query = QUEUE_SLOT_LIVE
    elif ring == "claim":
        query = CLAIM_SLOT_LIVE
    else:
        query = LEASE_SLOT_LIVE
    row = await _one(conn, query, schema, {"slot": slot, "completed_s": completed_s})
    blocker = row["blocker"]
    if blocker is None:
        return None
    # The statements spell the names out (sql/rings.sql): one that is not PRUNE_BLOCKERS' is
    # a slip there, never a reason to keep a slot silently.
    if blocker not in PRUNE_BLOCKERS:
        raise ValueError(f"sql/rings.sql: unknown prune blocker {blocker!r}")
    return str(blocker)


async def occupied_slots(conn: psycopg.AsyncConnection[Any], ring: str, slot_count: int, *,
                         schema: str = DEFAULT_SCHEMA) -> tuple[int, ...]:
    """The slots of ``ring`` that hold any row (index-free ``EXISTS`` probes, no count)."""
    slots = [sql.SQL(OCCUPIED_SLOT).format(
        probes=sql.SQL(" OR ").join(
            sql.SQL("EXISTS (SELECT 1 FROM {})").format(_partition(table, slot, schema))
            for table in _TABLES[ring]),
        slot=sql.Literal(slot)) for slot in range(slot_count)]
    row = await _one(conn, sql.SQL(OCCUPIED).format(slots=sql.SQL(", ").join(slots)), schema)
    return tuple(row["occupied"])


async def ring_states(conn: psycopg.AsyncConnection[Any], *,
                      schema: str = DEFAULT_SCHEMA) -> list[RingState]:
    """Every ring's position and its occupied slots, in ring order (the ops read side)."""
    states = await ring_state(conn, schema=schema)
    out = []
    for ring in RINGS:
        st = states[ring]
        count = int(st["slot_count"])
        out.append(RingState(ring, int(st["current_slot"]), count, int(st["generation"]),
                             float(st["rotated_age_s"]),
                             await occupied_slots(conn, ring, count, schema=schema)))
    return out


async def prune(conn: psycopg.AsyncConnection[Any], *, completed_retention_s: float,
                failed_retention_s: float,
                lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
                schema: str = DEFAULT_SCHEMA) -> PruneReport:
    """Truncate every sealed slot proven free of live rows (rechecked under the lock)."""
    report = PruneReport()
    states = await ring_state(conn, schema=schema)
    for ring in RINGS:
        started = time.perf_counter()
        current, count = int(states[ring]["current_slot"]), int(states[ring]["slot_count"])
        # Oldest sealed first: the slot after the current one was written longest ago.
        for step in range(1, count):
            slot = (current + step) % count
            if await _slot_empty(conn, ring, slot, schema):
                continue
            report.attempted.append((ring, slot))
            blocker = await _blocker(conn, ring, slot, completed_retention_s, schema)
            if blocker is not None:
                report.live.append((ring, slot))
                report.blockers[(ring, slot)] = blocker
                continue
            try:
                async with conn.transaction():
                    await conn.execute(SET_LOCK_TIMEOUT, {"ms": str(lock_timeout_ms)})
                    for table in _TABLES[ring]:
                        await conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE")
                                           .format(_partition(table, slot, schema)))
                    # Under the lock nothing can write or read the slot: prove it again.
                    blocker = await _blocker(conn, ring, slot, completed_retention_s, schema)
                    if blocker is not None:
                        report.live.append((ring, slot))
                        report.blockers[(ring, slot)] = blocker
                        continue
                    if ring == "queue":
                        async with conn.cursor() as cur:
                            await cur.execute(in_schema(CARRY_FAILED, schema), {"slot": slot,
                                                             "failed_s": failed_retention_s})
                            report.carried_failed += max(cur.rowcount, 0)
                    await conn.execute(sql.SQL("TRUNCATE {}").format(
                        sql.SQL(", ").join(_partition(t, slot, schema) for t in _TABLES[ring])))
                report.truncated.append((ring, slot))
            except psycopg.errors.LockNotAvailable:
                report.busy.append((ring, slot))
                report.blockers[(ring, slot)] = PRUNE_BLOCKER_LOCK
        report.rings.append(RingPass(ring, current, count, int(states[ring]["generation"]),
                                     prune_s=time.perf_counter() - started))
    return report


def queue_slot_span_s(completed_retention_s: float, slot_count: int) -> float:
    """How long the queue ring writes one slot: retention / (slots - 2), so the slot next
    in line was sealed (slots - 1) spans ago -- past retention by a whole span, truncated
    whole by an earlier prune -- when its turn comes, and rows never outlive their
    retention in the slot being written (which only row deletes could reclaim)."""
    return completed_retention_s / max(slot_count - 2, 1)


async def rotate_and_prune(conn: psycopg.AsyncConnection[Any], *, completed_retention_s: float,
                           failed_retention_s: float,
                           lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
                           schema: str = DEFAULT_SCHEMA) -> PruneReport:
    """One maintenance tick of the rings: settle idle claim heads (their lag keeps
    receipts alive), prune what is sealed, then rotate every ring."""
    async with conn.transaction():
        await conn.execute(in_schema(SETTLE_CLAIM_HEADS, schema))
    report = await prune(conn, completed_retention_s=completed_retention_s,
                         failed_retention_s=failed_retention_s, lock_timeout_ms=lock_timeout_ms,
                         schema=schema)
    passes = {p.ring: p for p in report.rings}
    for ring in RINGS:
        started = time.perf_counter()
        outcome = await rotate(conn, ring, queue_slot_span_s(
            completed_retention_s, passes[ring].slot_count) if ring == "queue" else 0.0,
            schema=schema)
        passes[ring].due = outcome is not None
        passes[ring].rotated = bool(outcome)
        passes[ring].rotate_s = time.perf_counter() - started
    # Where each ring stands after the tick (reporting only).
    states = await ring_state(conn, schema=schema)
    for ring in RINGS:
        done, st = passes[ring], states[ring]
        done.current_slot, done.generation = int(st["current_slot"]), int(st["generation"])
        done.occupied = await occupied_slots(conn, ring, done.slot_count, schema=schema)
    return report
