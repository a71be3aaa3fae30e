"""The engine-neutral part of enqueue: options, the batch builder, and the shared insert rules.

Every insert path (``insert``, ``insert_many``, COPY, the bridge) validates and
encodes its input into columns here (``build_batch`` -> ``EnqueueBatch``) before
anything is written; each engine then writes the batch with its own statement.
What both engines' statements share lives here too: the two row sources (``unnest``
of array parameters, or ``COPY`` into a per-session staging table), the rule for
which unique rows are kept (``KEPT_ROWS``, on the shared ``awa.job_unique_claims``),
the lost-race retry around a unique insert, and the unique-holder lookup.

Unique jobs: the statement drops rows whose key is already claimed and keeps only
the first claiming row per key within the batch; a concurrent producer that claims
the key between our check and our insert makes the statement fail with
``unique_violation`` on ``idx_awa_jobs_unique``, and the engine runs it again
(inside a savepoint when the caller holds a transaction), when the now-committed
claim is filtered out (``give_up``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, TypedDict

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from awa import config, telemetry
from awa.job import Job, JobState, SerializationError, UniqueConflict, ValidationError
from awa.serialization import derive_kind, json_default, not_an_object
from awa.statements import (
    Query,
    Rows,
    Steps,
    named_statements,
    query,
    run_async,
    run_sync,
    transaction,
)
from awa.storage.engine import EnqueueBatch, InsertOutcome, UniqueHolder
from awa.unique import UniqueOpts, key_for

UNIQUE_INDEX = "idx_awa_jobs_unique"
UNIQUE_RACE_RETRIES = 8
_INSERTED_COLUMNS = ("kind", "queue", "args", "priority", "max_attempts", "run_at", "metadata",
                     "tags", "unique_key", "unique_states")

_SQL = named_statements("awa.storage.common", "sql/enqueue.sql")
# COPY's per-session staging table (its columns: ``ord`` and ``_INSERTED_COLUMNS``, as
# ``copy_rows`` with ``with_ord`` sends them): created, emptied, filled.
CREATE_STAGING = _SQL["create_staging"]
EMPTY_STAGING = _SQL["empty_staging"]
COPY_INTO_STAGING = _SQL["copy_into_staging"]
UNIQUE_HOLDER = _SQL["unique_holder"]

# --- the two row sources -----------------------------------------------------
# Fragments of canonical's and queue storage's insert statements (those engines' own, written
# out by them; nothing here runs them: kept importable until they no longer compose them).
UNNEST_SOURCE = """unnest(%(kind)b::text[], %(queue)b::text[], %(args)b::text[]::jsonb[],
                     %(priority)b::smallint[], %(max_attempts)b::smallint[],
                     %(run_at)b::timestamptz[], %(metadata)b::text[]::jsonb[], %(tags)b::text[],
                     %(unique_key)b::bytea[], %(unique_states)b::text[])
              WITH ORDINALITY AS s(kind, queue, args, priority, max_attempts, run_at, metadata,
                                   tags, unique_key, unique_states, ord)"""
STAGING_SOURCE = "pg_temp.awa_enqueue_staging AS s"
# The rows of a batch that get written (both engines): all of them, except unique rows
# whose key is taken -- claimed already, or by an earlier row of the batch.  ``{source}``
# is the batch; defines ``kept`` (with its new ids, in batch order, ``deferred`` set for
# any explicit run_at).
KEPT_ROWS = """
WITH incoming AS MATERIALIZED (
    SELECT s.ord, s.kind, s.queue, s.args, s.priority, s.max_attempts, s.metadata,
           s.tags::text[] AS tags, s.unique_key, s.unique_states::bit(8) AS unique_states,
           COALESCE(s.run_at, now()) AS run_at,
           s.run_at IS NOT NULL AS deferred  -- any explicit run_at (awa-pg 0.6.9)
      FROM {source}
), flagged AS (
    SELECT incoming.*,
           incoming.unique_key IS NOT NULL
           AND get_bit(incoming.unique_states, awa.state_bit(
                   CASE WHEN incoming.deferred THEN 'scheduled' ELSE 'available' END
                   ::awa.job_state)) = 1
           AS claims
      FROM incoming
), ranked AS (
    SELECT flagged.*,
           row_number() OVER (PARTITION BY flagged.claims, flagged.unique_key
                              ORDER BY flagged.ord) AS nth
      FROM flagged
), kept AS MATERIALIZED (
    SELECT nextval('awa.jobs_id_seq') AS id, r.*
      FROM ranked r
     WHERE NOT r.claims
        OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.job_unique_claims c WHERE c.unique_key = r.unique_key))
     ORDER BY r.ord
)"""
# General: deferred rows go to scheduled_jobs, the rest to jobs_hot.

# --- the builder -----------------------------------------------------------
def unnest_params(batch: EnqueueBatch) -> dict[str, list[Any]]:
    """The ``unnest`` statement's array parameters."""
    return {name: getattr(batch, name) for name in _INSERTED_COLUMNS}


def copy_rows(batch: EnqueueBatch, with_ord: bool) -> Iterator[tuple[Any, ...]]:
    """COPY rows: every inserted column after its ordinal (staging), or only jobs_hot's."""
    if with_ord:
        cols = [getattr(batch, name) for name in _INSERTED_COLUMNS]
        return zip(range(1, len(batch) + 1), *cols)
    return zip(batch.kind, batch.queue, batch.args, batch.priority, batch.max_attempts,
               batch.metadata, batch.tags)


@dataclass(frozen=True, slots=True)
class InsertOptions:
    """An insert call's options, as the caller gave them: they apply to every row of the
    call (``build_batch``'s ``opts`` overrides some of them per row).  Built once per call by
    each insert path (``insert``, ``insert_many``, COPY, transactions, the bridge) and
    validated by ``build_batch``, so the defaults are written here only."""

    kind: str | None = None
    queue: str = config.DEFAULT_QUEUE
    priority: int = config.DEFAULT_PRIORITY
    max_attempts: int = config.DEFAULT_MAX_ATTEMPTS
    tags: Sequence[str] | None = None
    metadata: dict[str, Any] | None = None
    run_at: Any = None
    unique_opts: Any = None
    ordering_key: bytes | str | None = None


class InsertKeywords(TypedDict, total=False):
    """The keywords of every public insert call (awa-pg 0.6.9's names and types), declared
    once for the signatures (``**options: Unpack[InsertKeywords]``); what is not given
    takes ``InsertOptions``' default."""

    kind: str | None
    queue: str
    priority: int
    max_attempts: int
    tags: list[str] | None
    metadata: dict[str, Any] | None
    run_at: Any
    """A datetime (naive = UTC), an ISO-8601 string, a delay (timedelta), or None: now."""
    unique_opts: dict[str, Any] | None
    ordering_key: bytes | str | None


DEFAULT_OPTIONS = InsertOptions()
# What ``opts`` may override per row: every option.
_PER_ROW_OPTIONS = frozenset(f.name for f in dataclasses.fields(InsertOptions))


def insert_options(call: str, given: InsertKeywords) -> InsertOptions:
    """The options of one insert call; an unknown keyword is refused with the call's name,
    as a Python signature would refuse it."""
    unknown = given.keys() - _PER_ROW_OPTIONS
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {min(unknown)!r}")
    return InsertOptions(**given)


@dataclass(frozen=True)
class _Defaults:
    """Options shared by every row of a call, validated once."""

    kind: str | None
    queue: str
    priority: int
    max_attempts: int
    tags_literal: str
    tags: list[str]
    metadata: dict[str, Any]
    metadata_json: str
    run_at: datetime | None
    unique: UniqueOpts | None


def storable_text(value: str, what: str) -> str:
    """``value`` unless it holds a NUL, which PostgreSQL text cannot store.

    The NUL is rejected before any write."""
    if "\x00" in value:
        raise ValidationError(f"{what} contains a NUL character (\\x00), which PostgreSQL "
                              f"cannot store: remove it")
    return value


# A JSON text encodes a NUL in a string as \u0000, which jsonb rejects; an odd
# run of backslashes before "u0000" is that escape (an even run is a literal
# backslash followed by the characters u0000).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _storable_json(text: str, what: str) -> str:
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise ValidationError(f"{what} contains a NUL character (\\u0000), which PostgreSQL "
                              f"cannot store in jsonb: remove it")
    return text


def validate_queue(queue: Any) -> str:
    if not isinstance(queue, str) or not queue:
        raise ValidationError(f"queue name must be a non-empty string, got {queue!r}")
    storable_text(queue, "queue name")
    size = len(queue.encode())
    if size > config.MAX_QUEUE_NAME_BYTES:
        raise ValidationError(
            f"queue name {queue[:20]!r}... is {size} bytes; at most "
            f"{config.MAX_QUEUE_NAME_BYTES} fit the LISTEN channel "
            f"\"{config.NOTIFY_CHANNEL_PREFIX}<queue>\" (63 bytes): use a shorter name")
    return queue


def _int_in_range(value: Any, name: str, low: int, high: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name} must be an integer from {low} to {high}{hint}, "
                              f"got {value!r}")
    return value


def validate_priority(priority: Any) -> int:
    return _int_in_range(priority, "priority", config.MIN_PRIORITY, config.MAX_PRIORITY,
                         " (1 = most urgent)")


def validate_max_attempts(max_attempts: Any) -> int:
    return _int_in_range(max_attempts, "max_attempts", config.MIN_MAX_ATTEMPTS,
                         config.MAX_MAX_ATTEMPTS)


def _validate_kind(kind: Any) -> str:
    if not isinstance(kind, str) or not kind.strip():
        raise ValidationError(f"kind must be a non-empty string, got {kind!r}")
    return storable_text(kind, "kind")


def normalize_run_at(run_at: Any) -> datetime | None:
    """``None``, an aware/naive (= UTC) datetime, an ISO string or a delay (timedelta)."""
    if run_at is None:
        return None
    if isinstance(run_at, timedelta):
        return datetime.now(UTC) + run_at
    if isinstance(run_at, str):
        try:
            run_at = datetime.fromisoformat(run_at)
        except ValueError:
            raise ValidationError(f"run_at {run_at!r} is not an ISO 8601 timestamp") from None
    if not isinstance(run_at, datetime):
        raise ValidationError(f"run_at must be a datetime, ISO string or timedelta, "
                              f"got {type(run_at).__name__}")
    return run_at if run_at.tzinfo else run_at.replace(tzinfo=UTC)


def _tags_literal(tags: Any) -> str:
    """A ``text[]`` literal: quoting every element keeps commas and braces safe."""
    if tags is None:
        return "{}"
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise ValidationError(f"tags must be a list of strings, got {tags!r}")
    for tag in tags:
        storable_text(tag, "tag")
    quoted = ('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in tags)
    return "{" + ",".join(quoted) + "}"


def _metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValidationError(f"metadata must be a dict, got {type(metadata).__name__}")
    return dict(metadata)


def _dumps(value: Any, what: str) -> str:
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: "
                                 f"{' '.join(str(exc).split())}") from None
    # Outside the try: its ValidationError is also a ValueError (awa-pg compatibility).
    return _storable_json(text, what)


# One encoder for every row: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=json_default)


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@cache
def _kind_of(cls: type) -> str:
    return derive_kind(cls)


def _encode_args(args: Any) -> str:
    """The args' JSON text, exactly as stored."""
    cls = type(args)
    if dataclasses.is_dataclass(cls):
        plain = {name: getattr(args, name) for name in _field_names(cls)}
    elif isinstance(args, dict):
        plain = args
    elif callable(getattr(args, "model_dump", None)):
        plain = args.model_dump(mode="json")
    else:
        raise not_an_object()
    text = _dumps(plain, f"job args of {cls.__name__}")
    if not text.startswith("{"):
        raise SerializationError(f"job args of {cls.__name__} must serialise to a JSON object")
    return text


def _row_kind(args: Any, kind: str | None) -> str:
    if kind is not None:
        return _validate_kind(kind)
    if isinstance(args, dict):
        raise ValidationError("dict args need an explicit kind= (there is no class to derive "
                              "the kind from)")
    cls: type = type(args)
    return _kind_of(cls)


def _defaults(o: InsertOptions) -> _Defaults:
    """The call's options, validated and encoded once for every row."""
    meta = _metadata(o.metadata)
    if o.ordering_key is not None:
        meta["ordering_key"] = (o.ordering_key.hex() if isinstance(o.ordering_key, bytes)
                                else str(o.ordering_key))
    traceparent = telemetry.current_traceparent()
    if traceparent:
        meta.setdefault(telemetry.TRACEPARENT_KEY, traceparent)
    return _Defaults(
        kind=None if o.kind is None else _validate_kind(o.kind),
        queue=validate_queue(o.queue),
        priority=validate_priority(o.priority),
        max_attempts=validate_max_attempts(o.max_attempts),
        tags_literal=_tags_literal(o.tags),
        tags=list(o.tags or ()),
        metadata=meta,
        metadata_json=_dumps(meta, "metadata"),
        run_at=normalize_run_at(o.run_at),
        unique=UniqueOpts.parse(o.unique_opts),
    )


def build_batch(jobs: Sequence[Any], options: InsertOptions = DEFAULT_OPTIONS, *,
                opts: Sequence[dict[str, Any] | None] | None = None) -> EnqueueBatch:
    """Validate and encode every row before anything is written."""
    if isinstance(jobs, (str, bytes, dict)) or not isinstance(jobs, Sequence):
        jobs = list(jobs) if not isinstance(jobs, (str, bytes, dict)) else [jobs]
    if opts is not None and len(opts) != len(jobs):
        raise ValidationError(f"opts has {len(opts)} entries for {len(jobs)} jobs; "
                              f"pass one (or None) per job")
    shared = _defaults(options)
    now = time.time()
    if opts is None or not any(opts):
        return _uniform_batch(jobs, shared, now)
    batch = EnqueueBatch()
    for index, args in enumerate(jobs):
        row_opts = opts[index] if opts is not None else None
        d = shared if not row_opts else _override(shared, row_opts, index)
        args_json = _encode_args(args)
        row_kind = _row_kind(args, d.kind)
        batch.kind.append(row_kind)
        batch.queue.append(d.queue)
        batch.args.append(args_json)
        batch.priority.append(d.priority)
        batch.max_attempts.append(d.max_attempts)
        batch.run_at.append(d.run_at)
        batch.metadata.append(d.metadata_json)
        batch.metadata_dicts.append(d.metadata)
        batch.tags.append(d.tags_literal)
        batch.tag_lists.append(d.tags)
        if d.unique is None:
            batch.unique_key.append(None)
            batch.unique_states.append(None)
        else:
            batch.unique_key.append(key_for(d.unique, row_kind, d.queue, json.loads(args_json),
                                            now))
            batch.unique_states.append(d.unique.states_mask)
        batch.originals.append(args)
    return batch


def _uniform_batch(jobs: Sequence[Any], d: _Defaults, now: float) -> EnqueueBatch:
    """Every row shares the call's options: only args and kinds vary per row."""
    n = len(jobs)
    encoded = [_encode_args(args) for args in jobs]
    kinds = [_row_kind(args, d.kind) for args in jobs]
    if d.unique is None:
        keys: list[bytes | None] = [None] * n
        masks: list[str | None] = [None] * n
    else:
        # Hash the args as stored, so the key does not depend on the Python type.
        keys = [key_for(d.unique, k, d.queue, json.loads(text), now)
                for k, text in zip(kinds, encoded)]
        masks = [d.unique.states_mask] * n
    return EnqueueBatch(
        kind=kinds, queue=[d.queue] * n, args=encoded,
        priority=[d.priority] * n, max_attempts=[d.max_attempts] * n, run_at=[d.run_at] * n,
        metadata=[d.metadata_json] * n, tags=[d.tags_literal] * n, unique_key=keys,
        unique_states=masks, originals=list(jobs), metadata_dicts=[d.metadata] * n,
        tag_lists=[d.tags] * n)


def _override(shared: _Defaults, row: dict[str, Any], index: int) -> _Defaults:
    if not isinstance(row, dict):
        raise ValidationError(f"opts[{index}] must be a dict or None")
    unknown = sorted(set(row) - _PER_ROW_OPTIONS)
    if unknown:
        raise ValidationError(f"opts[{index}] has unknown key(s) {', '.join(unknown)}; "
                              f"expected some of {', '.join(sorted(_PER_ROW_OPTIONS))}")
    merged_meta = {**shared.metadata, **_metadata(row.get("metadata"))}
    if row.get("ordering_key") is not None:
        key = row["ordering_key"]
        merged_meta["ordering_key"] = key.hex() if isinstance(key, bytes) else str(key)
    return _Defaults(
        kind=_validate_kind(row["kind"]) if row.get("kind") is not None else shared.kind,
        queue=validate_queue(row["queue"]) if "queue" in row else shared.queue,
        priority=validate_priority(row["priority"]) if "priority" in row else shared.priority,
        max_attempts=(validate_max_attempts(row["max_attempts"]) if "max_attempts" in row
                      else shared.max_attempts),
        tags_literal=_tags_literal(row["tags"]) if "tags" in row else shared.tags_literal,
        tags=list(row["tags"] or ()) if "tags" in row else shared.tags,
        metadata=merged_meta,
        metadata_json=_dumps(merged_meta, f"opts[{index}] metadata"),
        run_at=normalize_run_at(row["run_at"]) if "run_at" in row else shared.run_at,
        unique=UniqueOpts.parse(row["unique_opts"]) if "unique_opts" in row else shared.unique,
    )


def jobs_from(batch: EnqueueBatch, rows: list[dict[str, Any]]) -> list[Job[Any]]:
    """Jobs for the returned rows: the database's id/state/times, the rest from the input."""
    jobs = []
    for position, row in enumerate(rows):
        i = row["ord"] - 1 if "ord" in row else position
        jobs.append(Job(
            id=row["id"], kind=batch.kind[i], queue=batch.queue[i], args=batch.originals[i],
            state=JobState(row["state"]), priority=batch.priority[i],
            max_attempts=batch.max_attempts[i], run_at=row["run_at"],
            created_at=row["created_at"], metadata=dict(batch.metadata_dicts[i]),
            tags=list(batch.tag_lists[i]), unique_key=batch.unique_key[i],
            unique_states=batch.unique_states[i]))
    return jobs


# --- executing -------------------------------------------------------------
def _is_unique_race(exc: BaseException) -> bool:
    diag = getattr(exc, "diag", None)
    return (isinstance(exc, pg_errors.UniqueViolation)
            and getattr(diag, "constraint_name", None) == UNIQUE_INDEX)


def unique_error(exc: BaseException, what: str) -> UniqueConflict | None:
    """The operator's error for a move that collided with a live job's unique claim."""
    if getattr(getattr(exc, "diag", None), "constraint_name", None) == UNIQUE_INDEX:
        return UniqueConflict(f"cannot {what}: another live job holds its unique key "
                              f"(cancel or finish that job first)")
    return None


def returned(batch: EnqueueBatch, rows: list[dict[str, Any]]) -> InsertOutcome:
    return InsertOutcome(jobs_from(batch, rows), len(rows), len(batch) - len(rows))


def counted(batch: EnqueueBatch, inserted: int) -> InsertOutcome:
    return InsertOutcome([], inserted, len(batch) - inserted)


def in_transaction(conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> bool:
    return conn.info.transaction_status != TransactionStatus.IDLE


def give_up(exc: BaseException, attempt: int, unguarded_in_transaction: bool = False) -> bool:
    """Retry only a lost unique race, while attempts remain and a savepoint can undo it
    (``unguarded_in_transaction``: the statement ran in the caller's transaction with no
    savepoint of its own, so the transaction is lost)."""
    return (not _is_unique_race(exc) or attempt == UNIQUE_RACE_RETRIES - 1
            or unguarded_in_transaction)


def insert_steps(sql: str, params: Any, *, has_unique: bool,
                 in_transaction_now: Callable[[], bool]) -> Steps[Rows]:
    """An engine's batch insert, written once for async and blocking connections: ``sql``,
    inside a savepoint when a unique batch runs in the caller's transaction, run again
    after a lost unique race while attempts remain.  Its rows (with ``rowcount``).
    ``in_transaction_now``: the connection's transaction state, asked before the insert and
    after a failure (a blocking connection that is not autocommit opens one implicitly)."""
    guard = has_unique and in_transaction_now()
    for attempt in range(UNIQUE_RACE_RETRIES):
        try:
            one = query(sql, params)
            return (yield from (transaction(one) if guard else one))
        except pg_errors.UniqueViolation as exc:
            if give_up(exc, attempt, in_transaction_now() and not guard):
                raise conflict_from(exc) from None
    raise AssertionError("unreachable")


def insert_outcome(batch: EnqueueBatch, rows: Rows, returning: bool) -> InsertOutcome:
    """What a batch insert wrote: its rows (``returning``), else its count -- the count row
    a general statement ends with, or the rows a plain one touched (``rowcount``)."""
    if returning:
        return returned(batch, rows)
    if batch.needs_general:
        return counted(batch, int(rows[0]["inserted"]) if rows else 0)
    return counted(batch, rows.rowcount)


def conflict_from(exc: BaseException) -> UniqueConflict:
    return UniqueConflict(f"unique job conflict on {UNIQUE_INDEX}: "
                          f"{' '.join(str(exc).split())}")


def _holder(row: dict[str, Any] | None) -> UniqueHolder | None:
    if row is None:
        return None
    return UniqueHolder(row["job_id"], None if row["state"] is None else JobState(row["state"]))


def unique_conflict(kind: str, holder: UniqueHolder | None) -> UniqueConflict:
    """A single insert skipped as a duplicate: who holds the key, when anybody still does."""
    if holder is None:
        return UniqueConflict(f"a unique {kind} job with the same key already exists")
    state = "None" if holder.state is None else holder.state.value
    return UniqueConflict(f"a unique {kind} job with the same key already exists: "
                          f"job {holder.job_id} ({state}) holds the claim")


class UniqueHolders:
    """The unique-holder lookup of the Engine protocol's enqueue group, on the shared
    tables (the claim and the ``awa.jobs`` view): the same on every engine."""

    async def unique_holder(self, conn: psycopg.AsyncConnection[Any],
                            key: bytes) -> UniqueHolder | None:
        """The one unique-claim-holder lookup (insert conflicts and admin's cancel by key)."""
        return await run_async(conn, _unique_holder_steps(key))

    def unique_holder_sync(self, conn: psycopg.Connection[Any],
                           key: bytes) -> UniqueHolder | None:
        return run_sync(conn, _unique_holder_steps(key))


def _unique_holder_steps(key: bytes) -> Steps[UniqueHolder | None]:
    rows: Rows = yield Query(UNIQUE_HOLDER, (key,))
    return _holder(rows[0] if rows else None)
