"""Queue storage: the worker runtime's hot path.

Claim (``awa.qs_claim``) appends a ``lease_claims`` receipt per job and
advances the lane's claim head.  Every later write is guarded by
``(job_id, run_lease)``: an attempt is open while its receipt has no
closure evidence (``OPEN_RECEIPT``), or while it has a ``leases`` row
(materialized).  Ending a batch of attempts appends one
``lease_claim_closure_batches`` row per claim slot, the ranges of the
receipts it closes (``_close``) -- or deletes their lease rows -- then appends
each job where it goes next: ``done_entries``, ``deferred_jobs`` or
``awa.dlq_entries``.  One statement per batch.

Exactly one of two concurrent closers of an attempt wins: each claim-slot
partition of ``lease_claim_closure_batches`` has an exclusion constraint (no
two rows' receipt ranges overlap), and a closure row that would overlap one
already written (or being written) is skipped whole -- the statement then
returns a NULL id, *contested*, and ``finish`` runs the full statement again
for the attempts it missed: with a snapshot that sees the winner, it ends
only those still open.

Unique claims (``awa.job_unique_claims``) are kept by each statement itself
(there is no row whose state a trigger could watch): a move into a state of
the mask inserts the claim (a collision raises ``unique_violation`` on
``idx_awa_jobs_unique``, as on canonical), a move out of it deletes it.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from awa import lifecycle
from awa.db import placeholder_format
from awa.job import JOB_COLUMNS, Job, JobState
from awa.storage.common.claims import ClaimJsonbLoader, job_from_claim
from awa.storage.common.collisions import apply_batch_or_each
from awa.storage.common.runtime_snapshot import RuntimeSnapshotWrites
from awa.storage.engine import AppliedBatch, AttemptWrite
from awa.storage.queue_storage.schema import InSchema, in_schema

log = logging.getLogger("awa.storage")

CLAIM = "SELECT * FROM awa.qs_claim(%s, %s, %s, %s, %s)"

_PLACEHOLDER = re.compile(r"%\((\w+)\)s(?:::([a-z_.0-9]+(?:\[\])?))?")


class Procedure:
    """A hot-path statement, installed as the PL/pgSQL function ``awa.<name>``.

    Why: these statements probe ring partitions that start empty after every
    rotation and then fill.  Sent as plain SQL, a statement is either planned
    again at each call (a custom plan of these CTEs costs 2-10 ms) or runs a
    plan cached while a partition was nearly empty: a sequential scan per
    probed attempt, slower with every row the partition gains.  The function
    plans it once per session, generically, with sequential scans priced out,
    so every probe goes through its index whatever the statistics say (a plain
    index scan: each probe finds one row, which a bitmap scan costs more to
    fetch; measured 2-3 % of a claim or a completion).

    ``statement`` stays the one copy of the SQL; each ``%(name)s::type``
    placeholder becomes the parameter ``p_name type`` (every occurrence carries
    the same cast).  ``returns``: what the function returns (the statement's
    rows; where they are named, as ``TABLE (...)``, the statement's columns win
    over those names).  ``shortcut``: ``(condition, statement)``, a cheaper
    statement run instead when the condition holds (each planned once, like
    the main one).  ``ddl`` is installed with the layout
    (``schema.install_sql``); ``call`` is what the engine sends, with the same
    parameter mapping; ``ids_only``: the batch arrays it reads are ids and leases.
    """

    def __init__(self, name: str, statement: str, returns: str = "SETOF bigint",
                 shortcut: tuple[str, str] | None = None) -> None:
        self.name = name
        self.statement = statement
        types: dict[str, str] = {}
        sources = (statement, *(shortcut or ()))
        for param, type_name in _PLACEHOLDER.findall("\n".join(sources)):
            if not type_name or types.setdefault(param, type_name) != type_name:
                raise ValueError(f"{name}: every %({param})s needs one cast")
        body = f"RETURN QUERY {self._body(statement)};"
        if shortcut is not None:
            condition, short = shortcut
            body = (f"IF {self._body(condition)} THEN\n    RETURN QUERY {self._body(short)};\n"
                    f"ELSE\n    {body}\nEND IF;")
        signature = ", ".join(f"p_{p} {t}" for p, t in types.items())
        self.ddl = (f"CREATE OR REPLACE FUNCTION awa.{name}({signature}) RETURNS {returns}\n"
                    "LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan "
                    "SET enable_seqscan = off SET enable_bitmapscan = off "
                    "AS $fn$\n#variable_conflict use_column\n"
                    f"BEGIN\n    {body}\nEND $fn$;\n")
        # Reads nothing but ids and leases (see ``_params``).
        self.ids_only = "delay" not in types
        self.call = (f"SELECT * FROM awa.{name}("
                     + ", ".join(f"%({p}){placeholder_format(t)}::{t}"
                                 for p, t in types.items()) + ")")

    @staticmethod
    def _body(sql: str) -> str:
        """The SQL with each placeholder replaced by its parameter."""
        return _PLACEHOLDER.sub(lambda m: f"p_{m.group(1)}" + (f"::{m.group(2)}"
                                                               if m.group(2) else ""),
                                sql).strip()

# The one rule for "this receipt's attempt is still open" (alias ``c``: a
# ``lease_claims`` row): no closure evidence, per receipt or in a batch's ranges.
# The per-receipt table is only read: nothing here writes it since layout version 2,
# but a database laid out earlier may still hold such closures.
_NO_RECEIPT_CLOSURE = """NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                     WHERE x.claim_slot = c.claim_slot AND x.job_id = c.job_id
                       AND x.run_lease = c.run_lease)"""
OPEN_RECEIPT = f"""({_NO_RECEIPT_CLOSURE}
               AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches b
                     WHERE b.claim_slot = c.claim_slot AND b.receipt_ranges @> c.receipt_id))"""

# The same rule for a scan over many receipts (rescue, prune, depth counts, awa.jobs) is
# the view awa.qs_open_receipts (queue_storage.sql): the gaps between closed ranges, then
# only the receipts in them.


def entry_of(alias: str, job_id: str = "job_id") -> str:
    """The join from a row naming a ready entry (``alias``: a receipt, a lease or an
    attempt, with ``ready_slot``, ``ready_id`` and its job's id in ``job_id``) to that entry,
    ``r``.  By the job id too: ``ready_entries`` has an index on job_id, none on ready_id."""
    return (f"r.job_id = {alias}.{job_id} AND r.ready_slot = {alias}.ready_slot"
            f" AND r.ready_id = {alias}.ready_id")


# An attempt of ``att a`` (its ``c_open`` receipt in ``opened``) that ``_close`` closed.
_CLOSED_HERE = "(a.c_open AND a.claim_slot IN (SELECT k.claim_slot FROM closed k))"


def _close(source: str, outcome: str) -> str:
    """CTEs ``closed`` (the claim slots whose closure row was written: every receipt of
    ``source`` in that slot is now closed by this statement) and ``contested`` (one NULL
    id when a slot's row was skipped: another closer got one of its receipts first).
    ``source``: a relation of ``(claim_slot, receipt_id)`` of open receipts, each once.
    Slots in order, so two closers never wait for each other in a cycle."""
    return f"""
, closed AS (
    INSERT INTO awa.lease_claim_closure_batches (claim_slot, receipt_ranges, outcome)
    SELECT o.claim_slot, range_agg(int8range(o.receipt_id, o.receipt_id, '[]')), {outcome}
      FROM {source} o GROUP BY o.claim_slot ORDER BY o.claim_slot
    ON CONFLICT DO NOTHING
    RETURNING claim_slot
), contested AS (
    SELECT NULL::bigint AS id
     WHERE (SELECT count(DISTINCT o.claim_slot) FROM {source} o)
           > (SELECT count(*) FROM closed)
)"""


def _ending_with(statement: str) -> str:
    """A finishing statement's last write (``... RETURNING <id>``) as the statement's
    result, with ``contested``'s NULL after the ids it wrote."""
    return f"""
, fin AS ({statement.strip()})
SELECT * FROM fin UNION ALL SELECT id FROM contested"""


# The attempts a batch names (``u``: every buffered field of each write), joined to
# their receipts.  ``_IDS_ONLY`` is the same ``u`` for a batch that carries nothing
# but ids and leases (a plain completion): five fewer arrays to encode and parse.
_ALL_FIELDS = """
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(delay)s::float8[],
                         %(error)s::jsonb[], %(progress)s::jsonb[], %(meta)s::jsonb[],
                         %(reason)s::text[])
           AS u(id, lease, delay_s, error, progress, meta, reason)"""
_IDS_ONLY = """
    SELECT u.id, u.lease, 0::float8 AS delay_s, NULL::jsonb AS error, NULL::jsonb AS progress,
           NULL::jsonb AS meta, NULL::text AS reason
      FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS u(id, lease)"""
_ATTEMPTS = """
WITH u AS MATERIALIZED (__FIELDS__
), att AS MATERIALIZED (
    -- One index probe per attempt (a receipt is unique per attempt): never a hash
    -- join over the whole claim ring.
    SELECT u.*, c.claim_slot, c.receipt_id, c.attempt AS c_attempt, c.claimed_at,
           c.deadline_at AS c_deadline, c.ready_slot, c.ready_id, c.queue AS c_queue,
           c.claimed_by AS c_claimed_by, __OPEN__ AS c_open
      FROM u CROSS JOIN LATERAL (
           SELECT * FROM awa.lease_claims c
            WHERE c.job_id = u.id AND c.run_lease = u.lease LIMIT 1) c
), opened AS (
    SELECT claim_slot, receipt_id FROM att WHERE c_open
)""".replace("__OPEN__", OPEN_RECEIPT)

# Buffered progress (replaces) and metadata (merges) of the rows of ``hit``.
_UPSERT_STATE = """
, st AS (
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, metadata)
    SELECT u.id, u.lease, u.progress, COALESCE(u.meta, '{}'::jsonb)
      FROM u JOIN hit h ON h.job_id = u.id AND h.run_lease = u.lease
     WHERE u.progress IS NOT NULL OR u.meta IS NOT NULL
    ON CONFLICT (job_id, run_lease) DO UPDATE
       SET progress = COALESCE(EXCLUDED.progress, s.progress),
           metadata = s.metadata || EXCLUDED.metadata, updated_at = now()
)
SELECT job_id FROM hit"""
# A heartbeat's: with ``contested``'s NULL (a materialization another closer beat).
_UPSERT_STATE_CONTESTED = _UPSERT_STATE + " UNION ALL SELECT id FROM contested"

# The unique claims of the attempts in ``ended`` as their jobs move to %(to_state)s:
# taken where that state is in the key's mask (and running was not), given back
# where it is not.
_UNIQUE_MOVES = """
, uq_take AS (
    INSERT INTO awa.job_unique_claims (unique_key, job_id)
    SELECT e.unique_key, e.id FROM ended e
     WHERE e.unique_key IS NOT NULL
       AND COALESCE(awa.qs_in_mask(e.unique_states, %(to_state)s::awa.job_state), false)
       AND NOT awa.qs_in_mask(e.unique_states, 'running')
       AND NOT EXISTS (SELECT 1 FROM awa.job_unique_claims x
                        WHERE x.unique_key = e.unique_key AND x.job_id = e.id)
), uq_give AS (
    DELETE FROM awa.job_unique_claims x USING ended e
     WHERE e.unique_key IS NOT NULL AND x.unique_key = e.unique_key AND x.job_id = e.id
       AND NOT COALESCE(awa.qs_in_mask(e.unique_states, %(to_state)s::awa.job_state), false)
       -- probe the keys by index, never a scan of every claim held
       AND x.unique_key = ANY(ARRAY(SELECT k.unique_key FROM ended k
                                     WHERE k.unique_key IS NOT NULL))
)
"""

# End the running attempts: close the receipt (or delete the lease), then
# ``ended`` holds each one's full job row (state running) for the target.
_END_OF = _ATTEMPTS + _close("opened", "%(outcome)s::text") + """
, leased AS (
    -- Only long attempts materialize: with no lease (or attempt state) at all, as
    -- with short jobs, the per-attempt probes are skipped.
    DELETE FROM awa.leases l USING att
     WHERE (SELECT EXISTS (SELECT 1 FROM awa.leases))
       AND l.job_id = att.id AND l.run_lease = att.lease
       AND l.job_id = ANY(%(ids)s::bigint[])  -- an index scan however many leases run
       AND l.state = ANY(%(from_states)s::awa.job_state[])
    RETURNING l.*
), ended AS MATERIALIZED (
    SELECT a.id, r.kind, r.queue, r.args, r.priority, a.c_attempt AS attempt, r.max_attempts,
           r.run_at, COALESCE(l.heartbeat_at, a.claimed_at) AS heartbeat_at,
           -- a lease's own deadline (NULL once parked), else the receipt's
           CASE WHEN l.job_id IS NULL THEN a.c_deadline ELSE l.deadline_at END AS deadline_at,
           a.claimed_at AS attempted_at,
           r.created_at,
           CASE WHEN a.error IS NULL THEN r.errors
                ELSE array_append(COALESCE(r.errors, '{}'::jsonb[]), a.error) END AS errors,
           r.metadata || COALESCE(st.metadata, '{}'::jsonb) || COALESCE(a.meta, '{}'::jsonb)
               AS metadata,
           r.tags, r.unique_key, r.unique_states, l.callback_id, l.callback_timeout_at,
           l.callback_filter, l.callback_on_complete, l.callback_on_fail, l.callback_transform,
           a.lease AS run_lease, COALESCE(a.progress, st.progress, r.progress) AS progress,
           a.delay_s, a.reason, COALESCE(l.claimed_by, a.c_claimed_by) AS claimed_by
      FROM att a
      -- An index probe per attempt, whatever the statistics say (a fresh ring
      -- partition has none, and a hash join would read the whole partition).
      CROSS JOIN LATERAL (
           SELECT * FROM awa.ready_entries r
            WHERE """ + entry_of("a", "id") + """ LIMIT 1) r
      LEFT JOIN leased l ON l.job_id = a.id AND l.run_lease = a.lease
      LEFT JOIN LATERAL (
           SELECT * FROM awa.attempt_state st
            WHERE (SELECT EXISTS (SELECT 1 FROM awa.attempt_state))
              AND st.job_id = a.id AND st.run_lease = a.lease) st ON true
     WHERE l.job_id IS NOT NULL
        OR """ + _CLOSED_HERE + """
), dropped AS (
    DELETE FROM awa.attempt_state s USING ended e
     WHERE (SELECT EXISTS (SELECT 1 FROM awa.attempt_state))
       AND s.job_id = e.id AND s.run_lease = e.run_lease
       AND s.job_id = ANY(%(ids)s::bigint[])
)""" + _UNIQUE_MOVES
# Every buffered field of each write (``_END_OF`` is the template over ``u``).
_END = _END_OF.replace("__FIELDS__", _ALL_FIELDS)


def _select(overrides: dict[str, str], *, with_id: str = "id") -> str:
    """``ended``'s job columns in table order, some replaced by expressions."""
    return ", ".join(overrides.get(c, "e." + c) if c != "id" else f"e.id AS {with_id}"
                     for c in JOB_COLUMNS)


_COLUMN_LIST = ", ".join(JOB_COLUMNS)
_DEFERRED = {
    "heartbeat_at": "NULL", "deadline_at": "NULL", "finalized_at": "NULL",
    "callback_id": "NULL", "callback_timeout_at": "NULL", "callback_filter": "NULL",
    "callback_on_complete": "NULL", "callback_on_fail": "NULL", "callback_transform": "NULL",
    "run_at": "now() + e.delay_s * interval '1 second'",
}

# Completion clears the progress (awa-pg 0.6.9); failed and cancelled keep it.
CLEARED_ON_COMPLETION = ("CASE WHEN %(to_state)s::awa.job_state = 'completed' THEN NULL "
                         "ELSE e.progress END")

# Terminal in done_entries: completed, failed, cancelled (``%(state)s``).
_TO_DONE = _ending_with(f"""
INSERT INTO awa.done_entries (ready_slot, {_COLUMN_LIST}, claimed_by)
SELECT (SELECT awa.qs_slot('queue')), {_select({"state": "%(to_state)s::awa.job_state",
                                       "finalized_at": "now()",
                                       "progress": CLEARED_ON_COMPLETION})}, e.claimed_by
  FROM ended e
RETURNING id""")
FINALIZE = Procedure("qs_finalize", _END + _TO_DONE)

# The short job's completion: no lease, no attempt state and no per-receipt closure
# at all, so only the receipt and the ready entry are read -- not ``_END_OF``'s lease
# and state joins, nor its closure probes: a receipt closed already makes the closure
# row contested, and ``finish`` runs the full statement for those attempts.  The
# terminal row is _TO_DONE's.  Each emptiness test first asks whether the table holds
# anything (one probe per partition) before probing every id.
_NOTHING_MATERIALIZED = """
(NOT EXISTS (SELECT 1 FROM awa.leases)
 OR NOT EXISTS (SELECT 1 FROM awa.leases l WHERE l.job_id = ANY(%(ids)s::bigint[])))
AND (NOT EXISTS (SELECT 1 FROM awa.attempt_state)
     OR NOT EXISTS (SELECT 1 FROM awa.attempt_state s WHERE s.job_id = ANY(%(ids)s::bigint[])))
AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures)"""
_SHORT_TO_DONE = """
WITH att AS MATERIALIZED (
    SELECT c.claim_slot, c.receipt_id, c.job_id, c.run_lease, c.attempt, c.claimed_at,
           c.deadline_at, c.ready_slot, c.ready_id, c.claimed_by
      FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS u(id, lease)
      CROSS JOIN LATERAL (
           SELECT * FROM awa.lease_claims c
            WHERE c.job_id = u.id AND c.run_lease = u.lease LIMIT 1) c
)""" + _close("att", "%(outcome)s::text") + """
, ended AS MATERIALIZED (
    -- The columns of _END_OF's ``ended``, as they are for an attempt that never
    -- materialized (no lease: heartbeat and deadline are the receipt's, no callback).
    SELECT a.job_id AS id, r.kind, r.queue, r.args, r.priority, a.attempt, r.max_attempts,
           r.run_at, a.claimed_at AS heartbeat_at, a.deadline_at,
           a.claimed_at AS attempted_at, r.created_at, r.errors, r.metadata, r.tags,
           r.unique_key, r.unique_states, NULL::uuid AS callback_id,
           NULL::timestamptz AS callback_timeout_at, NULL::text AS callback_filter,
           NULL::text AS callback_on_complete, NULL::text AS callback_on_fail,
           NULL::text AS callback_transform, a.run_lease, r.progress, a.claimed_by
      FROM closed k JOIN att a ON a.claim_slot = k.claim_slot
      CROSS JOIN LATERAL (
           SELECT * FROM awa.ready_entries r
            WHERE """ + entry_of("a") + """ LIMIT 1) r
)""" + _UNIQUE_MOVES + _TO_DONE
# The common completion: nothing buffered, so only ids and leases are sent.
FINALIZE_PLAIN = Procedure("qs_finalize_plain", _END_OF.replace("__FIELDS__", _IDS_ONLY) + _TO_DONE,
                           shortcut=(_NOTHING_MATERIALIZED, _SHORT_TO_DONE))

# Retryable: finalized_at is when the attempt ended (as awa-pg 0.6.9).
RETRY = Procedure("qs_retry", _END + _ending_with(f"""
INSERT INTO awa.deferred_jobs ({_COLUMN_LIST})
SELECT {_select({**_DEFERRED, "state": "'retryable'::awa.job_state",
                 "finalized_at": "now()"})}
  FROM ended e
RETURNING id"""))

SNOOZE = Procedure("qs_snooze", _END + _ending_with(f"""
INSERT INTO awa.deferred_jobs ({_COLUMN_LIST})
SELECT {_select({**_DEFERRED, "state": "'scheduled'::awa.job_state",
                 "attempt": "greatest(e.attempt - 1, 0)"})}
  FROM ended e
RETURNING id"""))

DEAD_LETTER = Procedure("qs_dead_letter", _END + _ending_with(f"""
INSERT INTO awa.dlq_entries ({", ".join("job_id" if c == "id" else c for c in JOB_COLUMNS)},
                             dlq_reason, dlq_at, original_run_lease)
SELECT {_select({"state": "'failed'::awa.job_state", "finalized_at": "now()"},
                with_id="job_id")},
       e.reason, now(), e.run_lease
  FROM ended e
RETURNING job_id"""))

PARK = Procedure("qs_park", """
WITH u AS MATERIALIZED (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(callback_ids)s::uuid[],
                         %(progress)s::jsonb[], %(meta)s::jsonb[])
           AS u(id, lease, callback_id, progress, meta)
), hit AS (
    UPDATE awa.leases l SET state = 'waiting_external', deadline_at = NULL  -- timeout applies
      FROM u
     WHERE l.job_id = u.id AND l.run_lease = u.lease AND l.state = 'running'
       AND l.callback_id = u.callback_id
    RETURNING l.job_id, l.run_lease
)""" + _UPSERT_STATE)

# A heartbeat materializes an open receipt into a lease (closing the receipt
# 'materialized') or refreshes the lease it already has.
HEARTBEAT = Procedure("qs_heartbeat", _ATTEMPTS.replace("__FIELDS__", _ALL_FIELDS)
                     + _close("opened", "'materialized'") + """
, fresh AS (
    INSERT INTO awa.leases (lease_slot, job_id, run_lease, queue, state, attempt, claim_slot,
                            receipt_id, ready_slot, ready_id, claimed_at, heartbeat_at,
                            deadline_at, claimed_by)
    SELECT (SELECT awa.qs_slot('lease')), a.id, a.lease, a.c_queue, 'running', a.c_attempt,
           a.claim_slot,
           a.receipt_id, a.ready_slot, a.ready_id, a.claimed_at, now(), a.c_deadline,
           a.c_claimed_by
      FROM att a
     WHERE """ + _CLOSED_HERE + """
    RETURNING job_id, run_lease
), beat AS (
    UPDATE awa.leases l SET heartbeat_at = now()
      FROM att a
     WHERE l.job_id = a.id AND l.run_lease = a.lease
       AND l.state IN ('running', 'waiting_external')
    RETURNING l.job_id, l.run_lease
), hit AS (
    SELECT job_id, run_lease FROM fresh UNION ALL SELECT job_id, run_lease FROM beat
)""" + _UPSERT_STATE_CONTESTED)

FLUSH_PROGRESS = Procedure("qs_flush_progress",
                           _ATTEMPTS.replace("__FIELDS__", _ALL_FIELDS) + """
, hit AS (
    SELECT a.id AS job_id, a.lease AS run_lease FROM att a WHERE a.c_open
    UNION ALL
    SELECT l.job_id, l.run_lease FROM awa.leases l JOIN att a
        ON l.job_id = a.id AND l.run_lease = a.lease
     WHERE l.state IN ('running', 'waiting_external')
)""" + _UPSERT_STATE)

# Installed with the layout (``schema.install_sql``).
PROCEDURES = (FINALIZE, FINALIZE_PLAIN, RETRY, SNOOZE, DEAD_LETTER, PARK, HEARTBEAT,
              FLUSH_PROGRESS)

AVAILABLE_COUNTS = """
SELECT r.queue, count(*) FROM awa.qs_ready_live r
 WHERE r.queue = ANY(%s::text[])
 GROUP BY r.queue"""


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _params(attempts: Sequence[AttemptWrite], outcome: str, to_state: str | None,
            from_states: Sequence[str] = ("running",), *,
            ids_only: bool = False) -> dict[str, Any]:
    """The batch arrays; ``from_states``: which materialized attempts may end (running).
    ``ids_only``: just ids and leases (a statement built on ``_IDS_ONLY``)."""
    params: dict[str, Any] = {
        "from_states": list(from_states), "outcome": outcome, "to_state": to_state,
        "ids": [a.id for a in attempts], "leases": [a.run_lease for a in attempts]}
    if not ids_only:
        params.update({
            "delay": [a.delay_s for a in attempts], "error": [_jsonb(a.error) for a in attempts],
            "progress": [_jsonb(a.progress) for a in attempts],
            "meta": [_jsonb(a.metadata) for a in attempts],
            "reason": [a.reason for a in attempts]})
    return params


def _nothing_buffered(attempts: Sequence[AttemptWrite]) -> bool:
    return all(a.progress is None and a.metadata is None and a.error is None
               for a in attempts)


Statement = LiteralString | Procedure


async def _run(conn: psycopg.AsyncConnection[Any], schema: str, query: Statement,
               params: dict[str, Any]) -> tuple[list[int], bool]:
    """The ids a statement returns, and whether it was contested (a NULL among them)."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(in_schema(query.call if isinstance(query, Procedure) else query, schema),
                      params)
    rows = await cur.fetchall()
    ids = [row[0] for row in rows if row[0] is not None]
    return ids, len(ids) < len(rows)


def _reads_ids_only(statement: Statement) -> bool:
    return isinstance(statement, Procedure) and statement.ids_only


async def _ids(conn: psycopg.AsyncConnection[Any], schema: str, query: Statement,
               params: dict[str, Any]) -> list[int]:
    return (await _run(conn, schema, query, params))[0]


async def finish(conn: psycopg.AsyncConnection[Any], schema: str, statement: Statement,
                 attempts: Sequence[AttemptWrite], outcome: str, to_state: str | None,
                 from_states: Sequence[str] = ("running",), *,
                 fallback: Statement | None = None) -> list[int]:
    """Run an attempt-closing statement; while it is contested, run ``fallback`` (the
    full statement; default ``statement`` itself) for the attempts it missed.

    Contested: another closer -- a heartbeat materializing the attempt, a rescue, a
    cancel, a second delivery of this very batch -- closed one of the batch's receipts
    first, so this statement's closure row for that claim slot was skipped whole.  The
    next statement's snapshot sees the winner: it ends what is still open (a lease the
    heartbeat created included) and skips the rest.  Each contested round waited for a
    winner, so the rounds end; a stale write is simply missed.  Each attempt is sent
    once, however often the batch names it.
    """
    distinct = list({(a.id, a.run_lease): a for a in attempts}.values())
    ids, contested = await _run(conn, schema, statement, _params(
        distinct, outcome, to_state, from_states, ids_only=_reads_ids_only(statement)))
    again = fallback or statement
    pending = distinct
    while contested:
        got = set(ids)
        pending = [a for a in pending if a.id not in got]
        if not pending:
            break
        more, contested = await _run(conn, schema, again, _params(
            pending, outcome, to_state, from_states, ids_only=_reads_ids_only(again)))
        ids += more
    return ids


class QueueStorageExecution(InSchema, RuntimeSnapshotWrites):
    """The execution group of the Engine protocol on queue storage."""

    async def claim_batch(self, conn: psycopg.AsyncConnection[Any], queue: str, limit: int,
                          deadline_ms: int, instance_id: uuid.UUID | None = None,
                          aging_interval_ms: int = 0) -> list[Job[Any]]:
        cur = conn.cursor(row_factory=tuple_row)
        cur.adapters.register_loader("jsonb", ClaimJsonbLoader)
        await cur.execute(self.sql(CLAIM),
                          (queue, limit, deadline_ms, instance_id, aging_interval_ms))
        return [job_from_claim(row) for row in await cur.fetchall()]

    async def warm_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # qs_claim with a limit of 0 runs (so plans) its statements on no lane; the plain
        # completion of no attempt plans its short path.
        await conn.execute(self.sql(CLAIM), ("", 0, 0, None, 0))
        await _ids(conn, self.schema, FINALIZE_PLAIN,
                   _params([], "completed", "completed", ids_only=True))

    async def complete_batch(self, conn: psycopg.AsyncConnection[Any],
                             attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        if _nothing_buffered(attempts):
            return AppliedBatch(await finish(conn, self.schema, FINALIZE_PLAIN, attempts,
                                             "completed", "completed", fallback=FINALIZE))
        return AppliedBatch(await finish(conn, self.schema, FINALIZE, attempts, "completed",
                                         "completed"))

    async def retry_batch(self, conn: psycopg.AsyncConnection[Any],
                          attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, RETRY, attempts, "retry", "retryable")

    async def snooze_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, SNOOZE, attempts, "snooze", "scheduled")

    async def dead_letter_batch(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        return await self._move(conn, DEAD_LETTER, attempts, "dead-letter", None)

    async def cancel_batch(self, conn: psycopg.AsyncConnection[Any],
                           attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        return AppliedBatch(await finish(conn, self.schema, FINALIZE, attempts, "cancelled",
                                         "cancelled"))

    async def fail_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        return AppliedBatch(await finish(conn, self.schema, FINALIZE, attempts, "failed",
                                         "failed"))

    async def park_batch(self, conn: psycopg.AsyncConnection[Any],
                         attempts: Sequence[AttemptWrite]) -> AppliedBatch:
        if not attempts:
            return AppliedBatch()
        return AppliedBatch(await _ids(conn, self.schema, PARK, {
            "ids": [a.id for a in attempts], "leases": [a.run_lease for a in attempts],
            "callback_ids": [a.callback_id for a in attempts],
            "progress": [_jsonb(a.progress) for a in attempts],
            "meta": [_jsonb(a.metadata) for a in attempts]}))

    async def cancel_superseded(self, conn: psycopg.AsyncConnection[Any],
                                attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        marked = [AttemptWrite(a.id, a.run_lease,
                               error=lifecycle.error_entry(lifecycle.RESCUED_AS_DUPLICATE,
                                                           a.attempt))
                  for a in attempts]
        return await finish(conn, self.schema, FINALIZE, marked, "superseded", "cancelled")

    async def heartbeat_batch(self, conn: psycopg.AsyncConnection[Any],
                              attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        return await finish(conn, self.schema, HEARTBEAT, attempts, "materialized", None)

    async def flush_progress_batch(self, conn: psycopg.AsyncConnection[Any],
                                   attempts: Sequence[AttemptWrite]) -> list[int]:
        if not attempts:
            return []
        return await _ids(conn, self.schema, FLUSH_PROGRESS, _params(attempts, "progress", None))

    async def available_counts(self, conn: psycopg.AsyncConnection[Any],
                               queues: Sequence[str]) -> dict[str, int]:
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(self.sql(AVAILABLE_COUNTS), (list(queues),))
        return {queue: int(n) for queue, n in await cur.fetchall()}

    async def _move(self, conn: psycopg.AsyncConnection[Any], statement: Procedure,
                    attempts: Sequence[AttemptWrite], what: str,
                    to_state: str | None) -> AppliedBatch:
        """Retry, snooze, dead-letter: one statement; on a unique collision the shared
        fallback (row by row, the superseded attempt cancelled)."""
        if not attempts:
            return AppliedBatch()
        outcome_name = to_state or "dead_lettered"
        if conn.autocommit:
            try:
                return AppliedBatch(await finish(conn, self.schema, statement, attempts,
                                                 outcome_name, to_state))
            except psycopg.errors.UniqueViolation:
                pass

        async def batch(items: Sequence[AttemptWrite]) -> list[int]:
            return await finish(conn, self.schema, statement, items, outcome_name, to_state)

        async def supersede(item: AttemptWrite) -> list[int]:
            return await self.cancel_superseded(conn, [item])

        outcome = await apply_batch_or_each(conn, attempts, batch=batch, on_collision=supersede,
                                            what=f"{what} of {len(attempts)} job(s)")
        for job_id in outcome.superseded:
            log.info("job %s: %s collided with a newer unique job; cancelled", job_id, what)
        return AppliedBatch(outcome.applied, outcome.superseded)


__all__ = ["QueueStorageExecution", "JobState"]
