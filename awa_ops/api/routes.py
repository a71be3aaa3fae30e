"""The routes of the REST API (mounted under ``/api``).

Reads go through ``ApiReads`` (the ops read model); every write goes through
the admin layer (``Actions``: awa.admin, awa.cron, awa.callbacks), after the
read-only gate.  Five reads are served from the TTL cache (``--cache-ttl``);
an action that changed something drops it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request
from starlette.exceptions import HTTPException as StarletteHTTPException

from awa import callback_contract, config
from awa.admin import wrong_state
from awa.callbacks import parse_callback_id
from awa.job import CallbackNotFound, JobNotFound, ValidationError
from awa.storage.engine import DlqFilter
from awa_ops.api import shapes
from awa_ops.api.reads import queue_runtime, runtime_overview
from awa_ops.api.shapes import NO_NUL, Name, QueryInt, QueueName, Timestamp
from awa_ops.api.state import JSON, ApiError, ApiState, allowed_methods, state_of
from awa_ops.console import operator_name

router = APIRouter()

JobStateName = Literal["scheduled", "available", "running", "completed", "retryable", "failed",
                       "cancelled", "waiting_external"]
BatchStateName = Literal["pending", "scanning", "running", "cancelling", "completed",
                         "cancelled", "failed"]
Responses = dict[int | str, dict[str, Any]]

# Every status a route can answer is in the document, with the {"error"} model.
WHY: dict[int, str] = {
    400: "bad input: a value out of the documented bounds, or a rule they cannot state "
         "(`validation error: ...`)",
    401: "the bearer token (a server started with --token-file), or a callback signature, "
         "is missing or wrong",
    403: "refused: the Host or, for a change, the Origin is not this server's",
    404: "not found (a job, queue or schedule; a job in the wrong state says why)",
    409: "unique conflict: another live job holds the unique key",
    413: f"request body larger than {config.SERVE_MAX_BODY_BYTES} bytes",
    422: "a body of the wrong shape (a missing field, a wrong type)",
    503: "the database is unavailable, or (a change) the server is read-only",
}


def answers(*statuses: int) -> Responses:
    """The error responses of a route: ``statuses`` plus 401, 403 and 503, which any may
    answer; a route with a body also 413 and 422."""
    codes = sorted({*statuses, 401, 403, 503})
    return {code: {"model": shapes.Error, "description": WHY[code]} for code in codes}


READ = answers()
QUERY = answers(400)
BODY = (400, 413, 422)
JobIdPath = Annotated[QueryInt, Path(description="A job id; past the bounds stated: 404")]
Limit = Annotated[QueryInt, Query(description="Clamped to 1..1000")]
Filter = Annotated[Name | None, Query()]
QueueFilter = Annotated[QueueName | None, Query()]
QueuePath = Annotated[str, Path(min_length=1, max_length=config.MAX_QUEUE_NAME_BYTES,
                                pattern=NO_NUL, description=shapes.QUEUE_DOC)]
CronName = Annotated[str, Path(min_length=1, pattern=NO_NUL)]


def _limit(limit: int) -> int:
    return max(1, min(int(limit), config.SERVE_JOBS_MAX_LIMIT))


def _job_not_found(job_id: int) -> ApiError:
    return ApiError(404, f"job not found: {job_id}")


async def _cached(st: ApiState, key: str, load: Any) -> Any:
    return await st.cache.get(key, load)


def _capped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [shapes.capped_args(r) for r in rows]


# --- jobs ---------------------------------------------------------------------------------

@router.get("/jobs", response_model=list[shapes.JobResponse], tags=["jobs"], responses=QUERY)
async def list_jobs(request: Request, state: JobStateName | None = None,
                    kind: Filter = None, queue: QueueFilter = None, tag: Filter = None,
                    before_id: Annotated[QueryInt | None, Query()] = None,
                    limit: Limit = config.SERVE_JOBS_LIMIT) -> JSON:
    """Newest first (id descending); ``before_id`` pages on (ids below it).  ``limit`` is
    clamped to 1..1000 on both engines.  ``args`` over 64 KiB of JSON are replaced by
    ``{"_awa_args_capped": {"bytes", "cap", "whole"}}``: ``whole`` is the route
    (``/api/jobs/{id}``) that returns them whole."""
    st = state_of(request)
    return JSON(_capped(await st.reads.jobs(state=state, kind=kind, queue=queue, tag=tag,
                                            before_id=before_id, limit=_limit(limit))))


RETRYABLE = shapes.RETRYABLE
CANCELLABLE = shapes.CANCELLABLE
RETRYABLE_TEXT = "failed, cancelled or waiting_external"


async def _preview(request: Request, body: shapes.RetryFilterBody | shapes.CancelFilterBody,
                   allowed: tuple[str, ...], action: str) -> JSON:
    st = state_of(request)
    if not (body.state or body.kind or body.queue or body.tag):
        raise ApiError(400, f"validation error: bulk {action} by filter needs at least one "
                            "of state, kind, queue or tag")
    cap = config.SERVE_BULK_PREVIEW_MAX
    ids = await st.reads.matching_ids((body.state,) if body.state else allowed, kind=body.kind,
                                      queue=body.queue, tag=body.tag, cap=cap + 1)
    return JSON({"total": min(len(ids), cap), "ids": ids[:cap], "truncated": len(ids) > cap})


@router.post("/jobs/bulk-retry/preview", response_model=shapes.FilterPreview, tags=["jobs"],
             responses=answers(*BODY))
async def bulk_retry_preview(request: Request, body: shapes.RetryFilterBody) -> JSON:
    """Addition: which jobs a filter-wide retry would touch (failed, cancelled or
    waiting_external; at most 10,000 ids).  Confirm by posting exactly these ``ids`` to
    ``/api/jobs/bulk-retry``: jobs that match only later are not swept in."""
    return await _preview(request, body, RETRYABLE, "retry")


@router.post("/jobs/bulk-cancel/preview", response_model=shapes.FilterPreview, tags=["jobs"],
             responses=answers(*BODY))
async def bulk_cancel_preview(request: Request, body: shapes.CancelFilterBody) -> JSON:
    """Addition: which unfinished jobs a filter-wide cancel would touch (at most 10,000
    ids); confirm with ``/api/jobs/bulk-cancel`` and these ``ids``."""
    return await _preview(request, body, CANCELLABLE, "cancel")


@router.post("/jobs/bulk-retry", response_model=list[shapes.JobResponse], tags=["jobs"],
             responses=answers(*BODY, 409))
async def bulk_retry(request: Request, body: shapes.IdsBody) -> JSON:
    """Retry each failed, cancelled or waiting_external job of ``ids``; others are skipped."""
    st = state_of(request)
    return await _each(request, body.ids, st.actions._retry_job)


@router.post("/jobs/bulk-cancel", response_model=list[shapes.JobResponse], tags=["jobs"],
             responses=answers(*BODY))
async def bulk_cancel(request: Request, body: shapes.IdsBody) -> JSON:
    """Cancel each unfinished job of ``ids``; finished ones are skipped."""
    st = state_of(request)
    return await _each(request, body.ids, st.actions._cancel_job)


async def _each(request: Request, ids: list[int],
                act: Callable[[int], Awaitable[Any]]) -> JSON:
    """``act`` on each distinct id (writable servers only); the jobs it changed, as
    responses (None from ``act``: skipped)."""
    st = state_of(request)
    st.require_writable()
    done = [job for job in [await act(job_id) for job_id in dict.fromkeys(ids)]
            if job is not None]
    if done:
        st.cache.clear()
    return JSON(_capped(await st.reads.responses(done)))


@router.get("/jobs/{job_id}", response_model=shapes.JobResponse, tags=["jobs"],
            responses=answers(400, 404))
async def get_job(request: Request, job_id: JobIdPath) -> JSON:
    """The job (live or in the DLQ: then ``dlq`` says why and when), its args whole."""
    found = await state_of(request).reads.job(job_id)
    if found is None:
        raise _job_not_found(job_id)
    return JSON(found)


async def _why_not(st: ApiState, job_id: int, allowed: str, action: str) -> ApiError:
    """A cancel or retry that applied to nothing: 404 (the reference's status), saying why
    in the CLI's words when the job exists."""
    found = await st.reads.job(job_id)
    if found is None:
        return _job_not_found(job_id)
    if found.get("dlq"):
        return ApiError(404, f"job {job_id} is in the DLQ; retry it with POST "
                             f"/api/dlq/{job_id}/retry")
    return ApiError(404, wrong_state(job_id, found["state"], allowed, action))


@router.post("/jobs/{job_id}/retry", response_model=shapes.JobResponse, tags=["jobs"],
             responses=answers(400, 404, 409))
async def retry_job(request: Request, job_id: JobIdPath) -> JSON:
    """A failed, cancelled or waiting_external job runs again (attempt 0); else 404, whose
    message says the job's state (``job 7 is completed; only failed, cancelled or
    waiting_external jobs can be retried``) or that there is no such job."""
    st = state_of(request)
    st.require_writable()
    job = await st.actions._retry_job(job_id)
    if job is None:
        raise await _why_not(st, job_id, RETRYABLE_TEXT, "retried")
    st.cache.clear()
    return JSON((await st.reads.responses([job]))[0])


@router.post("/jobs/{job_id}/cancel", response_model=shapes.JobResponse, tags=["jobs"],
             responses=answers(400, 404))
async def cancel_job(request: Request, job_id: JobIdPath) -> JSON:
    """An unfinished job is cancelled (a running attempt is told); else 404, whose message
    says the job's state (``job 7 is completed; only unfinished jobs can be cancelled``) or
    that there is no such job."""
    st = state_of(request)
    st.require_writable()
    job = await st.actions._cancel_job(job_id)
    if job is None:
        raise await _why_not(st, job_id, "unfinished", "cancelled")
    st.cache.clear()
    return JSON((await st.reads.responses([job]))[0])


# --- batch operations (durable, run by the maintenance leader) ---------------------------

@router.get("/batch-ops", response_model=list[shapes.BatchOperation], tags=["batch-ops"],
            responses=QUERY)
async def list_batch_ops(request: Request, state: BatchStateName | None = None,
                         limit: Limit = config.SERVE_JOBS_LIMIT) -> JSON:
    """Newest first; ``limit`` clamped to 1..1000."""
    st = state_of(request)
    ops = await st.actions.list_batch_operations(state=state, limit=_limit(limit))
    return JSON([op.to_dict() for op in ops])


@router.post("/batch-ops/preview", response_model=shapes.BatchPreview, tags=["batch-ops"],
             responses=answers(*BODY))
async def preview_batch_op(request: Request, body: shapes.BatchPreviewBody) -> JSON:
    """How many available/scheduled jobs the operation would change now, and the 10 lowest
    ids of them.  Advisory: nothing is locked or stored."""
    st = state_of(request)
    st.require_writable()
    total, sample = await st.actions.preview_batch_operation(
        body.op_kind, body.filter.as_dict(), body.spec.model_dump())
    return JSON({"total_matched": total,
                 "sample": _capped([shapes.job_row(j) for j in sample])})


@router.post("/batch-ops", response_model=shapes.BatchOperation, tags=["batch-ops"],
             responses=answers(*BODY))
async def submit_batch_op(request: Request, body: shapes.BatchSubmitBody) -> JSON:
    """Store the operation (``pending``); an empty filter needs ``all: true``.  A
    ``move_queue`` target obeys the queue-name rule (at most 59 bytes)."""
    st = state_of(request)
    st.require_writable()
    op = await st.actions.submit_batch_operation(body.op_kind, body.filter.as_dict(),
                                                 body.spec.model_dump(),
                                                 submitted_by=body.submitted_by,
                                                 allow_all=body.all)
    st.cache.clear()
    return JSON(op.to_dict())


@router.get("/batch-ops/{op_id}", response_model=shapes.BatchOperation, tags=["batch-ops"],
            responses=QUERY)
async def get_batch_op(request: Request, op_id: uuid.UUID) -> JSON:
    """Unknown id: 400 (as the reference)."""
    return JSON((await state_of(request).actions.get_batch_operation(op_id)).to_dict())


@router.patch("/batch-ops/{op_id}", response_model=shapes.BatchOperation, tags=["batch-ops"],
              responses=answers(*BODY))
async def patch_batch_op(request: Request, op_id: uuid.UUID, body: shapes.BatchPatch) -> JSON:
    """``{"state": "cancelling"}`` cancels a pending, scanning or running operation (another
    state, or an unknown id: 400, as the reference)."""
    st = state_of(request)
    st.require_writable()
    if body.state != "cancelling":
        raise ApiError(400, "validation error: only state=cancelling is supported for batch "
                            "operation PATCH")
    return JSON((await st.actions.cancel_batch_operation(op_id)).to_dict())


# --- queues -------------------------------------------------------------------------------

@router.get("/queues", response_model=list[shapes.QueueOverview], tags=["queues"],
            responses=READ)
async def list_queues(request: Request) -> JSON:
    """Every known queue (jobs, descriptors, queue_meta, runtimes), by name.  Cached."""
    st = state_of(request)
    return JSON(await _cached(st, "queues", st.reads.queues))


@router.get("/queues/runtime", response_model=list[shapes.QueueRuntimeSummary],
            tags=["queues", "runtime"], responses=READ)
async def queues_runtime(request: Request) -> JSON:
    """Per queue: the runtimes serving it, in flight, their config.  Cached."""
    st = state_of(request)

    async def load() -> Any:
        return queue_runtime(await st.reads.runtime_instances())
    return JSON(await _cached(st, "queues_runtime", load))


@router.get("/queues/{queue}", response_model=shapes.QueueOverview, tags=["queues"],
            responses=answers(400, 404))
async def get_queue(request: Request, queue: QueuePath) -> JSON:
    for q in await state_of(request).reads.queues():
        if q["queue"] == queue:
            return JSON(q)
    raise ApiError(404, f"queue '{queue}' not found")


@router.post("/queues/{queue}/pause", response_model=shapes.Ok, tags=["queues"],
             responses=answers(*BODY))
async def pause_queue(request: Request, queue: QueuePath,
                      body: Annotated[shapes.PausedBy, Body()]) -> JSON:
    """Dispatchers stop claiming from it (works for a queue with no jobs yet)."""
    st = state_of(request)
    st.require_writable()
    await st.actions.pause_queue(queue, body.paused_by or operator_name())
    st.cache.clear()
    return JSON({"ok": True})


@router.post("/queues/{queue}/resume", response_model=shapes.Ok, tags=["queues"],
             responses=QUERY)
async def resume_queue(request: Request, queue: QueuePath) -> JSON:
    st = state_of(request)
    st.require_writable()
    await st.actions.resume_queue(queue)
    st.cache.clear()
    return JSON({"ok": True})


@router.post("/queues/{queue}/drain", response_model=shapes.Drained, tags=["queues"],
             responses=QUERY)
async def drain_queue(request: Request, queue: QueuePath) -> JSON:
    """Cancel every waiting job of the queue (available, scheduled, retryable,
    waiting_external); running ones finish."""
    st = state_of(request)
    st.require_writable()
    drained = await st.actions.drain_queue(queue)
    st.cache.clear()
    return JSON({"drained": drained})


# --- kinds, cron ------------------------------------------------------------------------------

@router.get("/kinds", response_model=list[shapes.JobKindOverview], tags=["kinds"],
            responses=READ)
async def list_kinds(request: Request) -> JSON:
    """Every kind with jobs or a descriptor; its counts read by index, each part of the
    layout up to ``config.SERVE_SUMMARY_CAP`` rows (``capped``: lower bounds)."""
    return JSON(await state_of(request).reads.kinds())


@router.get("/cron", response_model=list[shapes.CronJobResponse], tags=["cron"],
            responses=READ)
async def list_cron(request: Request) -> JSON:
    return JSON(await state_of(request).reads.cron())


@router.post("/cron/{name}/trigger", response_model=shapes.JobRow, tags=["cron"],
             responses=QUERY)
async def trigger_cron(request: Request, name: CronName) -> JSON:
    """Enqueue one available run of the schedule now (allowed while paused)."""
    st = state_of(request)
    st.require_writable()
    try:
        job = await st.actions.trigger_cron_job(name)
    except ValidationError:
        raise ApiError(400, f"validation error: cron job not found: {name}") from None
    st.cache.clear()
    return JSON(shapes.job_row(job))


@router.post("/cron/{name}/pause", response_model=shapes.Ok, tags=["cron"],
             responses=answers(*BODY, 404))
async def pause_cron(request: Request, name: CronName,
                     body: Annotated[shapes.PausedBy | None, Body()] = None) -> JSON:
    st = state_of(request)
    st.require_writable()
    paused_by = (body.paused_by if body else None) or operator_name()
    try:
        await st.actions.pause_cron_job(name, paused_by)
    except ValidationError:
        raise ApiError(404, f"cron schedule '{name}' not found") from None
    st.cache.clear()
    return JSON({"ok": True})


@router.post("/cron/{name}/resume", response_model=shapes.Ok, tags=["cron"],
             responses=answers(400, 404))
async def resume_cron(request: Request, name: CronName) -> JSON:
    st = state_of(request)
    st.require_writable()
    try:
        await st.actions.resume_cron_job(name)
    except ValidationError:
        raise ApiError(404, f"cron schedule '{name}' not found") from None
    st.cache.clear()
    return JSON({"ok": True})


# --- stats, capabilities ---------------------------------------------------------------------

@router.get("/stats", response_model=dict[str, int], tags=["stats"], responses=READ)
async def stats(request: Request) -> JSON:
    """Jobs per state (all eight; DLQ entries count as failed).  Cached."""
    st = state_of(request)
    return JSON(await _cached(st, "stats", st.reads.stats))


@router.get("/stats/timeseries", response_model=list[shapes.TimeseriesPoint], tags=["stats"],
            responses=QUERY)
async def timeseries(request: Request,
                     minutes: Annotated[int, Query(ge=1, le=config.SERVE_TIMESERIES_MAX_MINUTES)]
                     = config.SERVE_TIMESERIES_MINUTES) -> JSON:
    """Jobs created per minute over the last ``minutes``, by current state, oldest first;
    of the newest jobs up to ``config.SERVE_SUMMARY_CAP`` (``capped`` on the oldest minute
    when the window holds more)."""
    return JSON(await state_of(request).reads.timeseries(minutes))


@router.get("/stats/kinds", response_model=list[str], tags=["stats"], responses=READ)
async def stats_kinds(request: Request) -> JSON:
    return JSON(sorted(k["kind"] for k in await state_of(request).reads.kinds()
                       if k["job_count"]))


@router.get("/stats/queues", response_model=list[str], tags=["stats"], responses=READ)
async def stats_queues(request: Request) -> JSON:
    st = state_of(request)
    return JSON(sorted(q["queue"] for q in await _cached(st, "queues", st.reads.queues)))


@router.get("/capabilities", response_model=shapes.Capabilities, tags=["capabilities"],
            responses=READ)
async def capabilities(request: Request) -> JSON:
    """What this server allows; no database access."""
    st = state_of(request)
    return JSON({"read_only": st.read_only, "poll_interval_ms": st.poll_interval_ms,
                 "instance_name": st.settings.instance_name, "instance_color": None,
                 "peers": [], "auth": st.settings.token is not None,
                 "engine": st.engine_name})


# --- DLQ ----------------------------------------------------------------------------------------

@router.get("/dlq", response_model=list[shapes.DlqRow], tags=["dlq"], responses=QUERY)
async def list_dlq(request: Request, kind: Filter = None, queue: QueueFilter = None,
                   tag: Filter = None, before_id: Annotated[QueryInt | None, Query()] = None,
                   before_dlq_at: Annotated[Timestamp | None, Query()] = None,
                   limit: Limit = config.SERVE_JOBS_LIMIT) -> JSON:
    """Newest first (``dlq_at``, then id); page on with ``before_dlq_at`` + ``before_id``.
    ``args`` over 64 KiB are capped as in ``/api/jobs``."""
    where = DlqFilter(kind, queue, tag, before_id, before_dlq_at)
    return JSON(_capped(await state_of(request).reads.dlq(where, _limit(limit))))


@router.get("/dlq/depth", response_model=shapes.DlqDepthDoc, tags=["dlq"], responses=READ)
async def dlq_depth(request: Request) -> JSON:
    return JSON(await state_of(request).reads.dlq_depth())


@router.get("/dlq/causes", response_model=list[shapes.ErrorGroupDoc], tags=["dlq"],
            responses=QUERY)
async def dlq_causes(request: Request, limit: Limit = config.SERVE_JOBS_MAX_LIMIT) -> JSON:
    """Addition: the newest ``limit`` DLQ entries grouped by error fingerprint
    (awa.fingerprint), biggest group first."""
    return JSON(await state_of(request).reads.dlq_causes(_limit(limit)))


@router.post("/dlq/bulk-retry", response_model=shapes.Count, tags=["dlq"],
             responses=answers(*BODY, 409))
async def dlq_bulk_retry(request: Request, body: shapes.DlqBulkBody) -> JSON:
    st = state_of(request)
    st.require_writable()
    if not (body.kind or body.queue or body.tag or body.all):
        raise ApiError(400, "validation error: bulk_retry_from_dlq requires at least one of "
                            "kind, queue, or tag (or allow_all=true)")
    count = await st.actions.bulk_retry_from_dlq(kind=body.kind, queue=body.queue,
                                                 tag=body.tag, allow_all=body.all)
    return JSON({"count": count})


@router.post("/dlq/bulk-purge", response_model=shapes.Count, tags=["dlq"],
             responses=answers(*BODY))
async def dlq_bulk_purge(request: Request, body: shapes.DlqBulkBody) -> JSON:
    st = state_of(request)
    st.require_writable()
    if not (body.kind or body.queue or body.tag or body.all):
        raise ApiError(400, "validation error: purge_dlq requires at least one of kind, "
                            "queue, or tag (or allow_all=true)")
    count = await st.actions.purge_dlq(kind=body.kind, queue=body.queue, tag=body.tag,
                                       allow_all=body.all)
    return JSON({"count": count})


@router.post("/dlq/bulk-move", response_model=shapes.Count, tags=["dlq"],
             responses=answers(*BODY))
async def dlq_bulk_move(request: Request, body: shapes.DlqMoveBody) -> JSON:
    """Move failed jobs (of a kind and/or queue) into the DLQ."""
    st = state_of(request)
    st.require_writable()
    if not (body.kind or body.queue or body.all):
        raise ApiError(400, "validation error: bulk_move_failed_to_dlq requires at least one "
                            "of kind or queue (or allow_all=true)")
    count = await st.actions.bulk_move_failed_to_dlq(kind=body.kind, queue=body.queue,
                                                     reason=body.reason, allow_all=body.all)
    return JSON({"count": count})


@router.get("/dlq/{job_id}", response_model=shapes.DlqRow | None, tags=["dlq"],
            responses=answers(400, 404))
async def get_dlq(request: Request, job_id: JobIdPath) -> JSON:
    """The DLQ entry, or ``null`` when the id is not in the DLQ (as the reference)."""
    entry = await state_of(request).reads.dlq_entry(job_id)
    return JSON(None if entry is None else shapes.dlq_row(entry))


@router.delete("/dlq/{job_id}", response_model=shapes.Count, tags=["dlq"],
               responses=answers(400, 404))
async def purge_dlq_job(request: Request, job_id: JobIdPath) -> JSON:
    st = state_of(request)
    st.require_writable()
    return JSON({"count": 1 if await st.actions.purge_dlq_job(job_id) else 0})


@router.post("/dlq/{job_id}/retry", response_model=shapes.JobRow | None, tags=["dlq"],
             responses=answers(*BODY, 404, 409))
async def retry_dlq_job(request: Request, job_id: JobIdPath,
                        body: Annotated[shapes.DlqRetryBody | None, Body()] = None) -> JSON:
    """Back to live storage (scheduled at ``run_at`` if future, else available now);
    ``null`` when the id is not in the DLQ."""
    st = state_of(request)
    st.require_writable()
    body = body or shapes.DlqRetryBody()
    job = await st.actions.retry_from_dlq(job_id, run_at=body.run_at, priority=body.priority,
                                          queue=body.queue)
    return JSON(None if job is None else shapes.job_row(job))


# --- runtime, storage, diagnostics -------------------------------------------------------------

@router.get("/runtime", response_model=shapes.RuntimeOverview, tags=["runtime"],
            responses=READ)
async def runtime(request: Request) -> JSON:
    """The runtime registry: live, stale, healthy and leading instances.  Cached."""
    st = state_of(request)

    async def load() -> Any:
        return runtime_overview(await st.reads.runtime_instances())
    return JSON(await _cached(st, "runtime", load))


@router.get("/storage", response_model=shapes.StorageStatusReport, tags=["storage"],
            responses=QUERY)
async def storage(request: Request, history: bool = False) -> JSON:
    """The storage engine's status (awa-pg 0.6.9's storage_status document).  Cached."""
    st = state_of(request)

    async def load() -> Any:
        return json.loads(await st.actions.storage_status())
    report = dict(await _cached(st, "storage", load))
    if history:
        report["history"] = []
    return JSON(report)


@router.get("/diagnose", response_model=list[dict[str, Any]], tags=["diagnostics"],
            responses=READ)
async def diagnose(request: Request) -> JSON:
    """Addition: every ``awa-ops diagnose`` check (the troubleshooting guide's queries)."""
    from awa_ops import diagnose as checks
    from awa_ops.session import OpsSession

    st = state_of(request)
    async with st.pool.connection() as conn:
        session = OpsSession(conn, st.settings.database_url, read_only=True,
                             cache=st.reads.cache)
        results = await checks.run_all(session, checks.Options())
    return JSON([r.to_dict() for r in results])


# --- callbacks ---------------------------------------------------------------------------------

def _check_signature(st: ApiState, request: Request, callback_id: str) -> None:
    secret = st.settings.callback_secret
    if secret is None:
        return
    presented = request.headers.get("x-awa-signature")
    if presented is None:
        raise ApiError(401, "missing X-Awa-Signature header")
    if not presented.isascii():
        raise ApiError(401, "invalid X-Awa-Signature header")
    if not callback_contract.verify(secret, callback_id, presented):
        raise ApiError(401, "invalid callback signature")


def _callback_uuid(callback_id: str) -> str:
    try:
        return str(parse_callback_id(callback_id))
    except (ValidationError, CallbackNotFound, ValueError):
        raise ApiError(400, f"invalid callback id: {callback_id}") from None


async def _callback(request: Request, callback_id: str, action: Any, state: str) -> JSON:
    st = state_of(request)
    st.require_writable()
    _check_signature(st, request, callback_id)
    cid = _callback_uuid(callback_id)
    try:
        job = await action(st, cid)
    except (CallbackNotFound, JobNotFound) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ApiError(404, f"callback not found: {cid}") from None
    if state != "WaitingExternal":
        st.cache.clear()
    return JSON({"id": job.id, "state": state})


CallbackId = Annotated[str, Path(description="The callback UUID the job registered (another "
                                             "text: 400)", json_schema_extra={"format": "uuid"})]
CALLBACK = answers(*BODY, 404)


@router.post("/callbacks/{callback_id}/complete", response_model=shapes.CallbackResult,
             tags=["callbacks"], responses=CALLBACK)
async def callback_complete(request: Request, callback_id: CallbackId,
                            body: shapes.CompleteBody) -> JSON:
    async def act(st: ApiState, cid: str) -> Any:
        return await st.actions.complete_external(cid, body.payload)
    return await _callback(request, callback_id, act, "Completed")


@router.post("/callbacks/{callback_id}/fail", response_model=shapes.CallbackResult,
             tags=["callbacks"], responses=CALLBACK)
async def callback_fail(request: Request, callback_id: CallbackId,
                        body: shapes.FailBody) -> JSON:
    async def act(st: ApiState, cid: str) -> Any:
        return await st.actions.fail_external(cid, body.error)
    return await _callback(request, callback_id, act, "Failed")


@router.post("/callbacks/{callback_id}/heartbeat", response_model=shapes.CallbackResult,
             tags=["callbacks"], responses=CALLBACK)
async def callback_heartbeat(request: Request, callback_id: CallbackId,
                             body: shapes.HeartbeatBody) -> JSON:
    async def act(st: ApiState, cid: str) -> Any:
        return await st.actions.heartbeat_callback(cid, body.timeout_seconds)
    return await _callback(request, callback_id, act, "WaitingExternal")


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                  include_in_schema=False)
async def unknown(request: Request, rest: str) -> JSON:
    """A path the document declares, with another method: 405 and ``Allow``; an unknown
    ``/api`` path: 404 JSON (the reference falls through to its HTML page)."""
    if allowed_methods(request.app, request.url.path):
        raise StarletteHTTPException(405)
    raise ApiError(404, f"no route {request.method} /api/{rest}")
