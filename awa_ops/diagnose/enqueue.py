"""enqueue: producer health — enqueue_shards per queue, batch sizes and durations
from the awa.enqueue.* histograms (when a metrics endpoint is given), and
WAL-related waits sampled from pg_stat_activity.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import psycopg

from awa import config, metrics
from awa.job import AwaError
from awa_ops.diagnose._text import plural, psql
from awa_ops.findings import Finding, Severity, runbook
from awa_ops.promtext import histogram_summary
from awa_ops.replication import on_standby
from awa_ops.session import OpsSession
from awa_ops.storage import render

if TYPE_CHECKING:  # pragma: no cover
    from awa_ops.diagnose import Options
    from awa_ops.storage import DetectedEngine


NAME = "enqueue"
RUNBOOK = runbook("enqueue")
# On a hot standby this check runs on --primary-url, or names the command for the primary.
NEEDS_PRIMARY = "the enqueue sessions and the WAL position"

SHARDS = render("all_enqueue_shards")
# The guide's LWLock:WALWrite / LWLock:WALSync waits, of this database's backends
# (the waits its producers and workers feel).  IO:WALSync alone is every commit's
# normal fsync wait, so it is not counted.
WAL_WAITS = """
SELECT pid, application_name, wait_event_type, wait_event, state, left(query, 200) AS query
FROM pg_stat_activity
WHERE datname = current_database()
  AND wait_event_type = 'LWLock'
  AND wait_event IN ('WALWrite', 'WALSync', 'WALInsert', 'WALBufMapping')
"""
# One backend waiting is a flush in progress; contention means a queue behind it.
WAL_CONTENDED = 2


async def sample_wal_waits(session: OpsSession) -> tuple[int, list[dict[str, Any]]]:
    """How many of a few quick samples saw a backend waiting on WAL, and who."""
    hits, seen = 0, []
    for i in range(config.OPS_WAL_SAMPLES):
        rows = await session.fetch_all(WAL_WAITS)
        if len(rows) >= WAL_CONTENDED:
            hits += 1
            seen.extend(rows)
        if i + 1 < config.OPS_WAL_SAMPLES:
            await asyncio.sleep(config.OPS_WAL_SAMPLE_INTERVAL_MS / 1000)
    return hits, seen


# Where start_sampling leaves the samples' task for the check (in the session's cache).
WAL_SAMPLER = "enqueue.wal_samples"


async def start_sampling(session: OpsSession) -> Callable[[], Awaitable[None]] | None:
    """Take the WAL samples on a connection of their own while the other checks of a
    ``diagnose all`` run, for this check to collect: their pauses (OPS_WAL_SAMPLES x
    OPS_WAL_SAMPLE_INTERVAL_MS, 200 ms) then cost no wall time.  Returns what stops them
    (call it when the checks are done), or None: the check then samples itself."""
    try:
        if await on_standby(session):  # the check runs on the primary, or not at all
            return None
        sampler = await OpsSession.open(
            session.url, application_name=session.conn.info.parameter_status(
                "application_name") or config.APP_NAME_OPS,
            read_only=session.read_only, statement_timeout_ms=session.statement_timeout_ms,
            lock_timeout_ms=session.lock_timeout_ms)
    except (psycopg.Error, AwaError, OSError):
        return None
    task = asyncio.create_task(sample_wal_waits(sampler))
    session.cache[WAL_SAMPLER] = task

    async def stop() -> None:
        session.cache.pop(WAL_SAMPLER, None)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await sampler.close()
    return stop


async def collect_wal_waits(session: OpsSession) -> tuple[int, list[dict[str, Any]]]:
    """The samples start_sampling took for this session, else samples taken now (also when
    its connection failed: this session's own trouble is what the check reports)."""
    started: asyncio.Task[tuple[int, list[dict[str, Any]]]] | None = \
        session.cache.pop(WAL_SAMPLER, None)
    if started is not None:
        try:
            return await started
        except (psycopg.Error, OSError):
            pass
    return await sample_wal_waits(session)


async def check(session: OpsSession, engine: DetectedEngine, options: Options) -> list[Finding]:
    shards = await session.fetch_all(SHARDS)
    if options.queue:
        shards = [s for s in shards if s["queue"] == options.queue] or \
            [{"queue": options.queue, "enqueue_shards": 1, "paused": False}]
    hits, waiting = await collect_wal_waits(session)
    findings: list[Finding] = []
    if hits * 2 > config.OPS_WAL_SAMPLES:
        findings.append(Finding(
            Severity.WARNING,
            f"backends queued on the WAL locks (LWLock:WALWrite/WALInsert) in {hits} of "
            f"{config.OPS_WAL_SAMPLES} samples",
            "commit pressure: every enqueue and completion commits through WAL; the database "
            "may be undersized for the offered rate",
            "check disk latency and wal_buffers / synchronous_commit; compare the offered rate "
            "with the sizing reference", waiting[:options.evidence_limit], RUNBOOK))
    if options.metrics_url:
        findings.extend(await _histograms(options))
    single = [s["queue"] for s in shards if s["enqueue_shards"] == 1]
    queue = options.queue or (single[0] if single else "<queue>")
    upsert = render("enqueue_shards_upsert", literals={"queue": queue})
    note = ("a queue without a queue_meta row runs with enqueue_shards = 1; if several producers "
            "contend on one queue, raise it")
    if not findings:
        findings.append(Finding(
            Severity.OK,
            f"no WAL lock contention in {config.OPS_WAL_SAMPLES} samples; "
            f"{plural(len(shards), 'queue')} with queue_meta rows"
            + ("" if options.metrics_url
               else " (pass --metrics-url for batch sizes and durations)"),
            note, psql(" ".join(upsert.split())), shards[:options.evidence_limit], RUNBOOK))
    return findings


async def _histograms(options: Options) -> list[Finding]:
    url = options.metrics_url
    assert url is not None  # check() asks only when --metrics-url is given
    # Imported here: httpx costs every `awa-ops diagnose` process ~130 ms of CPU to import,
    # and only --metrics-url needs it.
    import httpx

    try:
        async with httpx.AsyncClient(timeout=5) as http:
            response = await http.get(url)
            response.raise_for_status()
    except httpx.HTTPError as exc:
        return [Finding(Severity.WARNING, f"could not read {options.metrics_url}: {exc}",
                        "without the producer histograms batch size and duration are unknown",
                        "check --metrics-url points at a worker's /metrics", runbook=RUNBOOK)]
    text = response.text
    size = histogram_summary(text, metrics.by_name("awa.enqueue.batch_size").prometheus)
    duration = histogram_summary(text, metrics.by_name("awa.enqueue.duration").prometheus)
    if size is None or duration is None:
        return [Finding(Severity.OK, "the metrics endpoint has no awa.enqueue.* samples yet "
                                     "(no COPY enqueue since it started)", runbook=RUNBOOK)]
    evidence = [{"histogram": "batch_size", **size}, {"histogram": "duration_seconds", **duration}]
    if size["p50"] is not None and size["p50"] < config.OPS_ENQUEUE_TINY_BATCH:
        return [Finding(Severity.WARNING,
                        f"enqueue batches are tiny: p50 {size['p50']:.0f} rows over "
                        f"{size['count']:.0f} batches",
                        "throughput is bounded by the per-batch round trip, not by COPY",
                        "increase the chunk size, or batch on the upstream side", evidence,
                        RUNBOOK)]
    if duration["p99"] is not None and duration["p99"] > 1.0:
        return [Finding(Severity.WARNING,
                        f"enqueue batches are slow: p99 {duration['p99']:.2f}s at p50 "
                        f"{size['p50']:.0f} rows",
                        "COPY itself is contended on the database side (shards, WAL)",
                        psql("SELECT queue, enqueue_shards FROM awa.queue_meta"), evidence,
                        RUNBOOK)]
    return [Finding(Severity.OK, f"enqueue batches p50 {size['p50']:.0f} rows, p99 "
                                 f"{duration['p99']:.3f}s", evidence=evidence, runbook=RUNBOOK)]
