"""Runs handlers and maps what they return (or raise) to an outcome (docs/architecture.md §4).

Async handlers run as tasks on the loop; plain ``def`` handlers run in a
bounded thread pool so a blocking handler never stalls heartbeats, claims
or other handlers.  The outcome goes to the completion batcher; the slot is
given back the moment the handler returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER

from awa import lifecycle, recording, telemetry
from awa.job import (
    Cancel,
    Job,
    RetryAfter,
    SerializationError,
    Snooze,
    TerminalError,
    WaitForCallback,
)
from awa.outcome import Outcome
from awa.runtime.context import AttemptIO, JobContext
from awa.runtime.events import EventHooks
from awa.runtime.outcome import Finished
from awa.serialization import ArgsDecoder

log = logging.getLogger("awa.runtime.executor")

TRACEBACK_TAIL_LINES = 12
HANDLER_THREAD_PREFIX = "awa-handler"
ERROR_TEXT_MAX_CHARS = 4_000


@dataclass(frozen=True)
class HandlerSpec:
    """A registered handler: its kind, args type, queue and the function; ``decoder``: how
    its args type reads a claimed job's stored args (made from ``args_type``)."""

    kind: str
    args_type: Any
    queue: str
    fn: Callable[[Job[Any]], Any]
    is_async: bool
    decoder: ArgsDecoder = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "decoder", ArgsDecoder(self.args_type))  # frozen: set once


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:ERROR_TEXT_MAX_CHARS]


_OWN_FRAMES = (os.path.dirname(__file__), os.path.dirname(concurrent.futures.__file__),
               os.path.dirname(asyncio.__file__))


def _traceback_tail(exc: BaseException) -> str:
    """The last lines of the handler's traceback, without the runtime's own frames."""
    tb = traceback.TracebackException.from_exception(exc)
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if not f.filename.startswith(_OWN_FRAMES)])
    tail = "".join(tb.format()).splitlines()[-TRACEBACK_TAIL_LINES:]
    return "\n".join(tail)[-ERROR_TEXT_MAX_CHARS:]


# Whether the environment names a tracer provider for OpenTelemetry to load on first use.
_PROVIDER_FROM_ENV = OTEL_PYTHON_TRACER_PROVIDER in os.environ


def _tracing_installed() -> bool:
    """Spans only cost something to build: skip them until a real provider is set.

    Asked once per job: ``get_tracer_provider()`` looks ``os.environ`` up on every call
    until a provider is set (a key encoded and a mapping probed, per job), so while none
    is set in code (``_TRACER_PROVIDER``, OpenTelemetry's global) nor named in the
    environment at start, the answer is no without asking it."""
    if otel_trace._TRACER_PROVIDER is None and not _PROVIDER_FROM_ENV:  # noqa: SLF001 - the global set_tracer_provider sets; read, never written
        return False
    return not isinstance(otel_trace.get_tracer_provider(),
                          (otel_trace.ProxyTracerProvider, otel_trace.NoOpTracerProvider))


class Executor:
    """Runs ``handlers`` for the jobs ``start_job`` gets; each running attempt is in
    ``in_flight`` until its handler ends, and its outcome goes to ``submit`` (the completion
    batcher).  ``io``: where an attempt's own writes go (``AttemptIO``); ``dlq_enabled``:
    whether a queue's exhausted or terminal attempts go to the DLQ."""

    def __init__(self, *, handlers: dict[str, HandlerSpec], threads: int,
                 in_flight: dict[tuple[int, int], JobContext], io: AttemptIO,
                 submit: Callable[[Finished], None], events: EventHooks,
                 dlq_enabled: Callable[[str], bool]) -> None:
        self.handlers = handlers
        self.in_flight = in_flight
        self.io = io
        self.submit = submit
        self.events = events
        self.dlq_enabled = dlq_enabled
        self.threads = ThreadPoolExecutor(max_workers=threads,
                                          thread_name_prefix=HANDLER_THREAD_PREFIX)

    def start_job(self, job: Job[Any], permits: Any, deadline_monotonic: float) -> JobContext:
        ctx = JobContext(job, self.io, permits, deadline_monotonic)
        self.in_flight[(job.id, job.run_lease)] = ctx
        ctx.task = asyncio.get_running_loop().create_task(self._run(ctx))
        return ctx

    async def _run(self, ctx: JobContext) -> None:
        job = ctx.job
        finished: Finished | None = None
        try:
            finished = await self._execute(ctx)
        except asyncio.CancelledError:
            # Dropped (deadline passed or shutdown timed out): no outcome is
            # written; the attempt is left to rescue.
            if not ctx.dropped:
                raise
        except BaseException:  # an error in our own code: leave the job to rescue
            log.exception("job %s: executor error; the attempt is left for rescue", job.id)
        finally:
            self.in_flight.pop((job.id, job.run_lease), None)
            ctx.permits.release(1)
            recording.handler_finished(job.kind, job.queue, time.monotonic() - ctx.started)
            if finished is not None:
                self.submit(finished)

    async def _execute(self, ctx: JobContext) -> Finished:
        job = ctx.job
        spec = self.handlers.get(job.kind)
        if spec is None:
            message = lifecycle.UNKNOWN_KIND_ERROR.format(kind=job.kind)
            return self._terminal(ctx, message)
        try:
            spec.decoder.check(job)  # args that do not fit fail now; parsing waits for a read
        except SerializationError as exc:
            return self._terminal(ctx, str(exc))
        self.events.emit("started", job, None)
        if not _tracing_installed():
            return await self._outcome_of_call(spec, ctx)
        with telemetry.handler_span(job) as span:
            finished = await self._outcome_of_call(spec, ctx)
            telemetry.set_outcome(span, finished.outcome.event)
        return finished

    async def _outcome_of_call(self, spec: HandlerSpec, ctx: JobContext) -> Finished:
        try:
            result = await self._call(spec, ctx)
        except asyncio.CancelledError:
            raise
        except TerminalError as exc:
            return self._terminal(ctx, _error_text(exc), traceback=_traceback_tail(exc),
                                  result=exc)
        except Exception as exc:
            return self._failed_attempt(ctx, _error_text(exc), _traceback_tail(exc), exc)
        return self._map_result(ctx, result)

    async def _call(self, spec: HandlerSpec, ctx: JobContext) -> Any:
        if spec.is_async:
            return await spec.fn(ctx.job)
        ctx.is_async = False
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.threads, spec.fn, ctx.job)
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            result = await result
        return result

    # -- outcome mapping (docs/architecture.md §4) ----------------------------------------------
    def _map_result(self, ctx: JobContext, result: Any) -> Finished:
        job = ctx.job
        if isinstance(result, RetryAfter):
            if job.attempt >= job.max_attempts:
                message = (f"retry after {result.seconds}s requested on the last attempt "
                           f"({job.attempt}/{job.max_attempts})")
                return self._exhausted(ctx, lifecycle.error_entry(message, job.attempt), result)
            return Finished(ctx, Outcome.RETRY, delay_s=max(float(result.seconds), 0.0),
                            result=result)
        if isinstance(result, Snooze):
            return Finished(ctx, Outcome.SNOOZE, delay_s=max(float(result.seconds), 0.0),
                            result=result)
        if isinstance(result, Cancel):
            entry = lifecycle.error_entry(f"cancelled by handler: {result.reason}", job.attempt,
                                          cancelled=True)
            return Finished(ctx, Outcome.CANCEL, error=entry, result=result)
        if isinstance(result, WaitForCallback):
            return Finished(ctx, Outcome.WAIT, callback_id=result.callback_id, result=result)
        return Finished(ctx, Outcome.COMPLETED, result=result)

    def _failed_attempt(self, ctx: JobContext, message: str, tb: str,
                        exc: BaseException) -> Finished:
        job = ctx.job
        entry = lifecycle.error_entry(message, job.attempt, traceback=tb)
        if job.attempt >= job.max_attempts:
            return self._exhausted(ctx, entry, exc)
        return Finished(ctx, Outcome.RETRY, delay_s=lifecycle.backoff_seconds(job.attempt),
                        error=entry, result=exc)

    def _exhausted(self, ctx: JobContext, entry: dict[str, Any], result: Any) -> Finished:
        if self.dlq_enabled(ctx.job.queue):
            return Finished(ctx, Outcome.DLQ, error=entry, reason=lifecycle.DLQ_MAX_ATTEMPTS,
                            result=result)
        return Finished(ctx, Outcome.FAIL, error=entry, result=result)

    def _terminal(self, ctx: JobContext, message: str, *, traceback: str | None = None,
                  result: Any = None) -> Finished:
        entry = lifecycle.error_entry(message, ctx.job.attempt, terminal=True)
        if traceback:
            entry["traceback"] = traceback
        if self.dlq_enabled(ctx.job.queue):
            return Finished(ctx, Outcome.DLQ, error=entry, reason=lifecycle.DLQ_TERMINAL_ERROR,
                            result=result)
        return Finished(ctx, Outcome.FAIL, error=entry, result=result)

    # -- deadline drop ----------------------------------------------------------
    def drop_overdue(self, grace_s: float) -> int:
        """Drop handlers still running ``grace_s`` after their deadline: flag set,
        async tasks cancelled (their slot freed); the attempt is left to rescue."""
        now = time.monotonic()
        dropped = 0
        for ctx in list(self.in_flight.values()):
            if ctx.dropped or ctx.waiting or now < ctx.deadline_monotonic + grace_s:
                continue
            ctx.cancel("deadline exceeded")
            if ctx.is_async and ctx.task is not None:
                ctx.dropped = True
                ctx.task.cancel()
                dropped += 1
                log.warning("job %s (%s): still running %.1fs past its deadline; dropped",
                            ctx.job.id, ctx.job.kind, grace_s)
        return dropped

    def shutdown(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)

