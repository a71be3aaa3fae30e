"""The client's insert paths: insert, insert_many, COPY, and transactions.

Every path validates and encodes all rows first (``build_batch``), so bad
input fails with one line before anything is written, then writes each batch
of up to ``config.ENQUEUE_BATCH_SIZE`` rows with one statement.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Unpack, cast

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa import config, db, recording
from awa.job import AwaError, DatabaseError, Job, Timestamp, ValidationError
from awa.storage.common import enqueue
from awa.storage.common.enqueue import InsertKeywords, InsertOptions, insert_options
from awa.storage.engine import Engine, EnqueueBatch, InsertOutcome

log = logging.getLogger("awa.producer")


class PayloadTooLarge(ValidationError):
    """A job's args and metadata are bigger than ``config.ENQUEUE_MAX_BYTES``."""


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def check_payload_sizes(batch: EnqueueBatch) -> None:
    """Refuse a batch holding a job past ``config.ENQUEUE_MAX_BYTES`` (args + metadata as
    stored), one line; log one line for those past ``config.ENQUEUE_WARN_BYTES``."""
    warn_at, max_at = config.ENQUEUE_WARN_BYTES, config.ENQUEUE_MAX_BYTES
    big: list[tuple[int, int]] = []
    for i, (args, metadata) in enumerate(zip(batch.args, batch.metadata, strict=False)):
        if 4 * (len(args) + len(metadata)) <= warn_at:  # at most 4 bytes a character
            continue
        size = len(args.encode()) + len(metadata.encode())
        if size > max_at:
            which = f"job {i + 1} of {len(batch.args)}" if len(batch.args) > 1 else "the job"
            raise PayloadTooLarge(
                f"insert refused: {which} (kind {batch.kind[i]!r}) has {_mib(size)} of args "
                f"and metadata, over the {_mib(max_at)} limit (awa.config.ENQUEUE_MAX_BYTES); "
                f"store the data elsewhere and pass a reference to it")
        if size > warn_at:
            big.append((i, size))
    if big:
        i, size = max(big, key=lambda b: b[1])
        log.warning("awa: inserting %d job(s) over %s of args and metadata (largest: kind %r, "
                    "%s); big payloads slow every read of the job (config.ENQUEUE_WARN_BYTES)",
                    len(big), _mib(warn_at), batch.kind[i], _mib(size))


def build_batch(jobs: Sequence[Any], options: InsertOptions, *,
                opts: Sequence[dict[str, Any] | None] | None = None) -> EnqueueBatch:
    """``enqueue.build_batch`` (validate and encode every row), then the size limits."""
    batch = enqueue.build_batch(jobs, options, opts=opts)
    check_payload_sizes(batch)
    return batch


class InsertedJobs(list[Any]):
    """The inserted jobs; ``skipped`` counts unique duplicates left out."""

    skipped: int = 0

    def __init__(self, jobs: Sequence[Job[Any]] = (), skipped: int = 0) -> None:
        super().__init__(jobs)
        self.skipped = skipped


class EnqueueCount(int):
    """How many rows were written; ``skipped`` counts unique duplicates left out."""

    skipped: int

    def __new__(cls, inserted: int, skipped: int = 0) -> EnqueueCount:
        value = super().__new__(cls, inserted)
        value.skipped = skipped
        return value


async def raise_if_unique_skipped(engine: Engine, conn: psycopg.AsyncConnection[Any],
                                  batch: EnqueueBatch, outcome: InsertOutcome) -> None:
    """A single insert that was skipped as a duplicate is a ``UniqueConflict``."""
    if outcome.skipped and batch.unique_key[0] is not None:
        holder = await engine.unique_holder(conn, batch.unique_key[0])
        raise enqueue.unique_conflict(batch.kind[0], holder)


def as_stored(batch: EnqueueBatch, jobs: Sequence[Job[Any]]) -> None:
    """Give each inserted job the args as stored -- the JSON object, decoded to a ``dict`` --
    in place of the caller's object, as awa-pg 0.6.9's ``insert()`` returned them
    (``job.args["to"]`` after an insert of a dataclass or pydantic model).

    The storage layer hands back the caller's objects (``batch.originals``); a row's
    encoding depends on its object only, so each is found by identity.
    """
    if not jobs:
        return
    stored = {id(obj): text for obj, text in zip(batch.originals, batch.args)}
    for job in jobs:
        job.args = json.loads(stored[id(job.args)])


async def insert_one(engine: Engine, conn: psycopg.AsyncConnection[Any],
                     batch: EnqueueBatch) -> Job[Any]:
    """Write a one-row batch; a unique duplicate raises ``UniqueConflict``."""
    outcome = await engine.insert_batch(conn, batch)
    await raise_if_unique_skipped(engine, conn, batch, outcome)
    as_stored(batch, outcome.jobs)
    return outcome.jobs[0]


def inserted_jobs(batch: EnqueueBatch, outcomes: Sequence[InsertOutcome]) -> InsertedJobs:
    """The jobs of every written chunk, in order (args as stored), with the duplicates
    skipped counted."""
    jobs = InsertedJobs([job for o in outcomes for job in o.jobs],
                        sum(o.skipped for o in outcomes))
    as_stored(batch, jobs)
    return jobs


class ProducerMixin:
    """Insert paths of the client (``self._get_pool()`` comes from AsyncClient)."""

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        raise NotImplementedError  # provided by AsyncClient

    async def _get_engine(self) -> Engine:
        raise NotImplementedError  # provided by AsyncClient

    async def insert(self, args: Any, **options: Unpack[InsertKeywords]) -> Job[Any]:
        batch = build_batch([args], insert_options("insert", options))
        pool = await self._get_pool()
        engine = await self._get_engine()
        async with pool.connection() as conn:
            started = time.perf_counter()
            job = await insert_one(engine, conn, batch)
        recording.record_enqueue(1, started)
        recording.record_inserted_jobs((job,))
        return job

    async def insert_many(self, jobs: Sequence[Any], *,
                          opts: list[dict[str, Any] | None] | None = None,
                          **options: Unpack[InsertKeywords]) -> InsertedJobs:
        """Insert with ``unnest`` arrays, one statement per batch, all in one transaction."""
        batch = build_batch(jobs, insert_options("insert_many", options), opts=opts)
        return cast(InsertedJobs, await self._write(batch, copy=False))

    async def insert_many_copy(self, jobs: Sequence[Any], *,
                               opts: list[dict[str, Any] | None] | None = None,
                               **options: Unpack[InsertKeywords]) -> InsertedJobs:
        """The bulk path, returning the jobs: canonical COPYs into a staging table, then
        appends with one INSERT ... SELECT; queue storage writes each batch with one
        statement (``Engine.copy_batch``)."""
        batch = build_batch(jobs, insert_options("insert_many_copy", options), opts=opts)
        return cast(InsertedJobs, await self._write(batch, copy=True))

    async def enqueue_many_copy(self, jobs: Sequence[Any], *,
                                opts: list[dict[str, Any] | None] | None = None,
                                queue_storage_queue_stripe_count: int = 1,
                                **options: Unpack[InsertKeywords]) -> EnqueueCount:
        """The bulk path, a count only: canonical COPYs a plain batch straight into
        awa.jobs_hot; queue storage writes each batch with one statement, one round trip
        (``Engine.copy_batch``).

        ``queue_storage_queue_stripe_count`` belongs to the queue-storage
        engine and is accepted for compatibility only.
        """
        batch = build_batch(jobs, insert_options("enqueue_many_copy", options), opts=opts)
        return cast(EnqueueCount, await self._write(batch, copy=True, returning=False))

    async def _write(self, batch: EnqueueBatch, *, copy: bool,
                     returning: bool = True) -> Any:
        if not len(batch):
            return InsertedJobs() if returning else EnqueueCount(0)
        pool = await self._get_pool()
        engine = await self._get_engine()
        chunks = batch.chunks(config.ENQUEUE_BATCH_SIZE)
        outcomes: list[InsertOutcome] = []
        async with pool.connection() as conn:
            if len(chunks) > 1:
                async with conn.transaction():
                    for chunk in chunks:
                        outcomes.append(await self._write_chunk(engine, conn, chunk, copy,
                                                                returning))
            else:
                outcomes.append(await self._write_chunk(engine, conn, batch, copy, returning))
        for chunk, outcome in zip(chunks, outcomes):  # after the commit: exactly the rows written
            recording.record_inserted(chunk, outcome)
        if not returning:
            return EnqueueCount(sum(o.inserted for o in outcomes),
                                sum(o.skipped for o in outcomes))
        return inserted_jobs(batch, outcomes)

    @staticmethod
    async def _write_chunk(engine: Engine, conn: psycopg.AsyncConnection[Any],
                           chunk: EnqueueBatch, copy: bool, returning: bool) -> InsertOutcome:
        started = time.perf_counter()
        if copy:
            outcome = await engine.copy_batch(conn, chunk, returning)
        else:
            outcome = await engine.insert_batch(conn, chunk, returning)
        recording.record_enqueue(len(chunk), started)
        return outcome

    async def transaction(self) -> Transaction:
        """A transaction on one pooled connection.

        ``async with await client.transaction() as tx``.
        """
        pool = await self._get_pool()
        engine = await self._get_engine()
        conn = await pool.getconn()
        try:
            await conn.execute("BEGIN")
        except BaseException:
            await pool.putconn(conn)
            raise
        return Transaction(pool, conn, engine)


_DOLLAR_PARAM = re.compile(r"\$(\d+)")


def translate_query(query: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """Accept ``$1``-style placeholders (as the Rust-core SDK did) as well as ``%s``."""
    if args and _DOLLAR_PARAM.search(query):
        query = _DOLLAR_PARAM.sub(lambda m: f"%(p{m.group(1)})s", query.replace("%", "%%"))
        return query, {f"p{i}": value for i, value in enumerate(args, start=1)}
    return query, (args or None)


@db.database_errors_raise_awa
class Transaction:
    """Inserts and queries that commit or roll back together with the caller's work."""

    def __init__(self, pool: AsyncConnectionPool, conn: psycopg.AsyncConnection[Any],
                 engine: Engine) -> None:
        self._pool = pool
        self._conn: psycopg.AsyncConnection[Any] | None = conn
        self._engine = engine

    @property
    def connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            raise AwaError("this transaction has already been committed or rolled back")
        return self._conn

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, exc_type: Any, _exc_val: Any, _exc_tb: Any) -> None:
        if self._conn is None:
            return
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()

    async def _finish(self, statement: str) -> None:
        conn = self.connection
        self._conn = None
        try:
            await conn.execute(statement)
        finally:
            await self._pool.putconn(conn)

    async def commit(self) -> None:
        await self._finish("COMMIT")
        recording.record_transaction_end(self, committed=True)

    async def rollback(self) -> None:
        recording.record_transaction_end(self, committed=False)
        await self._finish("ROLLBACK")

    async def execute(self, query: str, *args: Any) -> int:
        sql, params = translate_query(query, args)
        async with self.connection.cursor() as cur:
            await cur.execute(sql, params)
            return cur.rowcount

    async def fetch_all(self, query: str, *args: Any) -> list[dict[str, Any]]:
        sql, params = translate_query(query, args)
        async with self.connection.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return [_timestamps_as_text(row) for row in await cur.fetchall()]

    async def fetch_optional(self, query: str, *args: Any) -> dict[str, Any] | None:
        sql, params = translate_query(query, args)
        async with self.connection.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            row = await cur.fetchone()
            return None if row is None else _timestamps_as_text(row)

    async def fetch_one(self, query: str, *args: Any) -> dict[str, Any]:
        row = await self.fetch_optional(query, *args)
        if row is None:
            raise DatabaseError("fetch_one: the query returned no row")
        return row

    async def insert(self, args: Any, **options: Unpack[InsertKeywords]) -> Job[Any]:
        batch = build_batch([args], insert_options("insert", options))
        job = await insert_one(self._engine, self.connection, batch)
        recording.record_inserted_pending(self, (job,))
        return job

    async def insert_many(self, jobs: Sequence[Any], *,
                          opts: list[dict[str, Any] | None] | None = None,
                          **options: Unpack[InsertKeywords]) -> InsertedJobs:
        batch = build_batch(jobs, insert_options("insert_many", options), opts=opts)
        conn = self.connection
        jobs = inserted_jobs(batch, [await self._engine.insert_batch(conn, chunk)
                                     for chunk in batch.chunks(config.ENQUEUE_BATCH_SIZE)])
        recording.record_inserted_pending(self, jobs)
        return jobs

    def __repr__(self) -> str:
        return f"Transaction({'open' if self._conn is not None else 'finished'})"


# The synchronous client hands out its transactions through a blocking proxy;
# the name the Rust-core SDK used for that object.
SyncTransaction = Transaction


def _timestamps_as_text(row: dict[str, Any]) -> dict[str, Any]:
    """timestamptz values as ISO-8601 ``Timestamp`` strings, as awa-pg 0.6.9's fetches
    returned them (still comparable and subtractable as datetimes)."""
    for key, value in row.items():
        if isinstance(value, datetime) and value.tzinfo is not None:
            row[key] = Timestamp(value)
    return row
