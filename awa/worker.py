"""The worker role of the client: handler registration, start, shutdown, health.

``@client.task(ArgsType, queue=..., kind=...)`` (alias ``@client.worker``)
registers an ``async def`` handler (run on the loop) or a plain ``def``
(run in a bounded thread pool).  ``start()`` validates the configuration
in full before anything connects, then runs the runtime
(``awa.runtime.runtime.Runtime``) in the background until ``shutdown()``.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, cast

from psycopg_pool import AsyncConnectionPool

from awa import config, descriptors
from awa.config import QueueConfig, RateLimit, RuntimeSettings
from awa.job import AwaError, ValidationError
from awa.runtime.events import EVENT_NAMES, EventHooks, JobEvent
from awa.runtime.executor import HandlerSpec
from awa.serialization import derive_kind
from awa.storage import check_queue_storage_schema
from awa.storage.engine import Engine

T = TypeVar("T")
# A job handler as registered: sync or async, taking the job (and a context when it asks).
Handler = Callable[..., Any]

# The kind 0.6.9 registered for a handler whose args type is not a class.
UNKNOWN_KIND = "unknown"
NO_WORKERS_ERROR = "register at least one worker before starting the runtime"
UNCONFIGURED_QUEUES_ERROR = ("start() must configure the worker queues declared via "
                             "@client.worker(..., queue=...)")
WEIGHTED_NEEDS_QUEUES_ERROR = ("weighted mode requires explicit queue configs "
                               "(global_max_workers set but queues=None)")

_QUEUE_KEYS = {"name", "queue", "max_workers", "min_workers", "weight", "rate_limit",
               "deadline_duration_ms", "claim_batch_size", "poll_interval_ms", "dlq_enabled",
               "priority_aging_interval_ms", "retention", "claimers"}


@dataclass(frozen=True)
class QueueHealth:
    in_flight: int
    available: int
    max_workers: int | None = None
    min_workers: int | None = None
    weight: int | None = None
    overflow_held: int | None = None
    capacity: int = 0


@dataclass(frozen=True)
class HealthCheck:
    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    shutting_down: bool
    leader: bool
    queues: dict[str, QueueHealth] = field(default_factory=dict)


# -- configuration parsing (all errors are one-line ValidationErrors) ---------------
# What awa-pg 0.6.9 refused, it is refused with its wording and (ValidationError being a
# ValueError, a TypeError and an AwaError; OutOfRange also an OverflowError) its class.
class OutOfRange(ValidationError, OverflowError):
    """A negative or too large count where awa-pg 0.6.9 raised ``OverflowError``."""


_U32 = 2 ** 32 - 1
_U64 = 2 ** 64 - 1
TUPLE_CONFIG_ERROR = "queue config must be a (name, max_workers) tuple or a dict"
RATE_LIMIT_ERROR = "rate_limit must be a (max_rate: float, burst: int) tuple or None"


def _count(value: Any, *, bits: int = 32) -> int:
    """A non-negative integer as 0.6.9 extracted one (u32 counts, u64 milliseconds)."""
    if not isinstance(value, int):
        raise ValidationError(f"'{type(value).__name__}' object cannot be interpreted as an "
                              f"integer")
    if value < 0:
        raise OutOfRange("out of range integral type conversion attempted" if bits == 32
                         else "can't convert negative int to unsigned")
    if value > (_U32 if bits == 32 else _U64):
        raise OutOfRange("out of range integral type conversion attempted" if bits == 32
                         else "int too big to convert")
    return int(value)


def _positive_int(value: Any, what: str) -> int:
    """A count that must be at least 1 (0.6.9: ``<what> must be > 0``)."""
    n = _count(value)
    if n < 1:
        raise ValidationError(f"{what} must be > 0")
    return n


def _workers(value: Any, name: str) -> int:
    """max_workers: 0.6.9 started a queue of 0 workers, which never runs a job; refused."""
    n = _count(value)
    if n < 1:
        raise ValidationError(f"queue {name!r} max_workers must be a positive integer, got "
                              f"{value!r}")
    return n


def _interval_ms(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValidationError(f"{what} must be a positive number of milliseconds, got {value!r}")
    return int(value)


def _rate_limit(value: Any, queue: str) -> RateLimit | None:
    """``(max_rate, burst)`` as 0.6.9 took it; burst 0 means a burst of ``ceil(max_rate)``."""
    if value is None or isinstance(value, RateLimit):
        return value
    if not (isinstance(value, tuple) and len(value) == 2
            and isinstance(value[0], (int, float)) and isinstance(value[1], int)
            and value[1] >= 0):
        raise ValidationError(RATE_LIMIT_ERROR)
    max_rate, burst = float(value[0]), int(value[1])
    if not max_rate > 0.0:
        raise ValidationError("rate_limit max_rate must be > 0.0")
    return RateLimit(max_rate, burst or max(1, math.ceil(max_rate)))


def _queue_name(name: Any) -> str:
    if not isinstance(name, str):
        raise ValidationError(f"'{type(name).__name__}' object is not an instance of 'str'")
    if not name:
        raise ValidationError(f"queue name must be a non-empty string, got {name!r}")
    if len(name.encode()) > config.MAX_QUEUE_NAME_BYTES:
        raise ValidationError(f"queue name {name[:20]!r}... is longer than "
                              f"{config.MAX_QUEUE_NAME_BYTES} bytes (Postgres channel limit)")
    return name


STORAGE_TRANSITION_ROLES = ("auto", "canonical_drain", "queue_storage_target")


def parse_queue_configs(queues: Any, weighted: bool,
                        registered: list[str]) -> dict[str, QueueConfig]:
    """``queues`` as start() takes it -> validated QueueConfigs by name."""
    if queues is None:
        if weighted:
            raise ValidationError(WEIGHTED_NEEDS_QUEUES_ERROR)
        return {q: QueueConfig(q, max_workers=config.DEFAULT_MAX_WORKERS) for q in registered}
    if isinstance(queues, (str, bytes)) or not hasattr(queues, "__iter__"):
        raise ValidationError(f"Can't extract `{type(queues).__name__}` to `Vec`")
    out: dict[str, QueueConfig] = {}
    for item in queues:
        if isinstance(item, QueueConfig):
            cfg = item
        elif isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], str) or not isinstance(
                    item[1], int) or not 0 <= item[1] <= _U32:
                raise ValidationError(TUPLE_CONFIG_ERROR)
            if weighted:
                raise ValidationError("tuple queue config is not supported with "
                                      "global_max_workers; use dict form with min_workers/weight")
            name = _queue_name(item[0])
            cfg = QueueConfig(name, max_workers=_workers(item[1], name))
        elif isinstance(item, dict):
            cfg = _queue_from_dict(item, weighted)
        else:
            raise ValidationError(TUPLE_CONFIG_ERROR)
        if cfg.name in out:
            raise ValidationError(f"queue {cfg.name!r} configured more than once")
        out[cfg.name] = cfg
    if not out:
        raise ValidationError(f"{UNCONFIGURED_QUEUES_ERROR}: {', '.join(registered)}")
    return out


def _queue_from_dict(item: dict[str, Any], weighted: bool) -> QueueConfig:
    if "name" not in item and "queue" not in item:
        raise ValidationError("queue config dict must have 'name' key")
    unknown = set(item) - _QUEUE_KEYS
    name = _queue_name(item.get("name", item.get("queue")))
    if unknown:
        raise ValidationError(f"queue {name!r}: unknown option(s) {', '.join(sorted(unknown))}; "
                              f"use {', '.join(sorted(_QUEUE_KEYS - {'queue'}))}")
    max_workers = item.get("max_workers")
    min_workers = item.get("min_workers")
    if max_workers is not None:
        max_workers = _count(max_workers)
    if min_workers is not None:
        min_workers = _count(min_workers)
    if max_workers is not None and min_workers is not None:
        raise ValidationError("use max_workers for hard-reserved mode or min_workers for "
                              "weighted mode, not both")
    weight = _positive_int(item["weight"], "weight") if item.get("weight") is not None else 1
    kwargs: dict[str, Any] = {"weight": weight}
    # As in 0.6.9, each mode ignores the other's options: weighted mode runs on
    # min_workers and weight (max_workers is not a cap there), hard mode on max_workers.
    if weighted:
        kwargs["min_workers"] = min_workers or 0
    else:
        kwargs["max_workers"] = _workers(config.DEFAULT_MAX_WORKERS if max_workers is None
                                         else max_workers, name)
    kwargs["rate_limit"] = _rate_limit(item.get("rate_limit"), name)
    if item.get("deadline_duration_ms") is not None:
        # 0: no attempt deadline (0.6.9's compact claims); heartbeats alone rescue.
        kwargs["deadline_duration_ms"] = _count(item["deadline_duration_ms"], bits=64)
    if item.get("claim_batch_size") is not None:
        kwargs["claim_batch_size"] = _positive_int(item["claim_batch_size"], "claim_batch_size")
    if item.get("poll_interval_ms") is not None:
        kwargs["poll_interval_ms"] = _interval_ms(item["poll_interval_ms"],
                                                  f"queue {name!r} poll_interval_ms")
    if item.get("priority_aging_interval_ms") is not None:
        # 0: no escalation on this queue (as in 0.6.9).
        kwargs["priority_aging_interval_ms"] = _count(item["priority_aging_interval_ms"],
                                                      bits=64)
    if item.get("dlq_enabled") is not None:
        if not isinstance(item["dlq_enabled"], bool):
            raise ValidationError(f"queue {name!r}: dlq_enabled must be true or false")
        kwargs["dlq_enabled"] = item["dlq_enabled"]
    if item.get("retention") is not None:
        kwargs["retention"] = item["retention"]
    if item.get("claimers") is not None:
        kwargs["extra"] = {"claimers": _positive_int(item["claimers"], "claimers")}
    return QueueConfig(name, **kwargs)


# start() arguments that map 1:1 onto RuntimeSettings fields (ms intervals).
_INTERVAL_ARGS = ("heartbeat_interval_ms", "heartbeat_staleness_ms",
                  "heartbeat_rescue_interval_ms", "deadline_rescue_interval_ms",
                  "callback_rescue_interval_ms", "leader_election_interval_ms",
                  "promote_interval_ms", "cleanup_interval_ms", "snapshot_interval_ms",
                  "cron_eval_interval_ms", "deadline_drop_grace_ms")
_POSITIVE_NUMBER_ARGS = ("completed_retention_hours", "failed_retention_hours",
                         "descriptor_retention_days", "dlq_retention_days",
                         "runtime_retention_hours")
_BATCH_ARGS = ("cleanup_batch_size", "promote_batch_size", "rescue_batch_size",
               "sync_handler_threads")


class _ClientMembers(Protocol):
    """What ``start()`` hands the runtime of the ``AsyncClient`` this mixin is part of."""

    application_name: str

    @property
    def database_url(self) -> str: ...

    @property
    def direct_database_url(self) -> str | None: ...

    async def sync_cron_jobs(self, pool: AsyncConnectionPool | None = None) -> int: ...


class WorkerMixin:
    """Worker role of the client (composed into ``AsyncClient``)."""

    def __init__(self) -> None:
        self._runtime: Any = None
        self._handlers: dict[str, HandlerSpec] = {}
        self._events = EventHooks()

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        raise NotImplementedError  # provided by AsyncClient

    async def _get_engine(self) -> Engine:
        raise NotImplementedError  # provided by AsyncClient

    # -- registration --------------------------------------------------------
    def task(self, args_type: type[T], *, kind: str | None = None,
             queue: str = config.DEFAULT_QUEUE) -> Callable[[Handler], Handler]:
        """Register the decorated function as the handler of ``kind``
        (default: the snake_case of ``args_type``'s name) on ``queue``.

        An ``args_type`` that is not a class registers as 0.6.9 did (kind
        ``unknown`` unless ``kind`` is given); its handler gets the args as a dict.
        """
        if kind is not None and (not isinstance(kind, str) or not kind):
            raise ValidationError(f"kind must be a non-empty string, got {kind!r}")
        is_class = isinstance(args_type, type) or args_type is Any
        job_kind = kind or (derive_kind(args_type) if is_class else UNKNOWN_KIND)
        queue_name = _queue_name(queue)

        def register(fn: Handler) -> Handler:
            if not callable(fn):
                raise ValidationError(f"@task must decorate a function, got {fn!r}")
            if job_kind in self._handlers and self._handlers[job_kind].fn is not fn:
                raise ValidationError(f"kind {job_kind!r} already has a handler "
                                      f"({self._handlers[job_kind].fn.__name__})")
            self._handlers[job_kind] = HandlerSpec(
                kind=job_kind, args_type=args_type, queue=queue_name, fn=fn,
                is_async=inspect.iscoroutinefunction(fn))
            return fn

        return register

    def worker(self, args_type: type[T], *, kind: str | None = None,
               queue: str = config.DEFAULT_QUEUE) -> Callable[[Handler], Handler]:
        """Deprecated spelling of ``task()`` (awa-pg 0.6.9 warned too)."""
        import warnings
        warnings.warn("client.worker() is deprecated, use client.task() instead",
                      DeprecationWarning, stacklevel=2)
        return self.task(args_type, kind=kind, queue=queue)

    def on_event(self, callback: Callable[[JobEvent], Any], kind: str | None = None,
                 events: list[str] | None = None) -> Callable[[JobEvent], Any]:
        """Call ``callback(JobEvent)`` when a handler starts and after each committed
        outcome (optionally only for one ``kind`` / some ``events``)."""
        if not callable(callback):
            raise ValidationError(f"on_event() needs a callable, got {callback!r}")
        if events is not None:
            bad = set(events) - set(EVENT_NAMES)
            if bad:
                raise ValidationError(f"unknown event(s) {', '.join(sorted(bad))}; "
                                      f"use {', '.join(EVENT_NAMES)}")
        self._events.add(callback, kind, frozenset(events) if events is not None else None)
        return callback

    # -- start / shutdown ----------------------------------------------------
    async def start(self, queues: list[tuple[str, int]] | list[dict[str, Any]] | None = None,
                    *, poll_interval_ms: int = config.POLL_INTERVAL_MS,
                    global_max_workers: int | None = None,
                    completed_retention_hours: float | None = None,
                    failed_retention_hours: float | None = None,
                    descriptor_retention_days: float | None = None,
                    cleanup_batch_size: int | None = None,
                    leader_election_interval_ms: int | None = None,
                    heartbeat_interval_ms: int | None = None,
                    promote_interval_ms: int | None = None,
                    heartbeat_rescue_interval_ms: int | None = None,
                    heartbeat_staleness_ms: int | None = None,
                    deadline_rescue_interval_ms: int | None = None,
                    callback_rescue_interval_ms: int | None = None,
                    terminal_count_rollup_interval_ms: int | None = None,
                    queue_storage_schema: str | None = None,
                    queue_storage_queue_slot_count: int = 16,
                    queue_storage_lease_slot_count: int = 8,
                    queue_storage_claim_slot_count: int = 8,
                    queue_storage_queue_stripe_count: int = 1,
                    queue_storage_queue_rotate_interval_ms: int = 1000,
                    queue_storage_lease_rotate_interval_ms: int = 250,
                    queue_storage_claim_rotate_interval_ms: int | None = None,
                    storage_transition_role: Literal["auto", "canonical_drain",
                                                     "queue_storage_target"] = "auto",
                    dlq_enabled_by_default: bool = False,
                    metrics_addr: str | None = None,
                    only_these_queues: bool = False,
                    **more: Any) -> None:
        """Start the runtime in the background; returns once it is claiming.

        ``queue_storage_schema``, when given on a queue-storage database, must
        name the schema its layout is in (``awa migrate --queue-storage-schema``);
        ``storage_transition_role`` picks the engines this runtime claims from while a live
        switch of engines has both hold jobs (``auto``: both, canonical first;
        ``canonical_drain``; ``queue_storage_target``; docs/production.md); the other
        ``queue_storage_*`` arguments and
        ``terminal_count_rollup_interval_ms`` are accepted and ignored (the
        rings keep the sizes and cadences the maintenance leader gives them).
        Further RuntimeSettings fields (``cleanup_interval_ms``,
        ``snapshot_interval_ms``, ``sync_handler_threads``, ``run_maintenance``,
        ...) may be passed by name.  ``queues`` must include every queue a handler
        names, as in 0.6.9, unless ``only_these_queues`` (``awa worker --queue``: a
        process dedicated to some of the application's queues).
        """
        if self._runtime is not None:
            raise AwaError("the runtime is already started; call shutdown() first")
        if storage_transition_role not in STORAGE_TRANSITION_ROLES:
            raise ValidationError(f"storage_transition_role must be one of "
                                  f"{', '.join(STORAGE_TRANSITION_ROLES)}, "
                                  f"got {storage_transition_role!r}")
        settings = build_settings(
            poll_interval_ms=poll_interval_ms, global_max_workers=global_max_workers,
            completed_retention_hours=completed_retention_hours,
            failed_retention_hours=failed_retention_hours,
            descriptor_retention_days=descriptor_retention_days,
            cleanup_batch_size=cleanup_batch_size,
            leader_election_interval_ms=leader_election_interval_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            promote_interval_ms=promote_interval_ms,
            heartbeat_rescue_interval_ms=heartbeat_rescue_interval_ms,
            heartbeat_staleness_ms=heartbeat_staleness_ms,
            deadline_rescue_interval_ms=deadline_rescue_interval_ms,
            callback_rescue_interval_ms=callback_rescue_interval_ms,
            dlq_enabled_by_default=dlq_enabled_by_default, metrics_addr=metrics_addr, **more)
        if not self._handlers:
            raise ValidationError(NO_WORKERS_ERROR)
        registered = sorted({h.queue for h in self._handlers.values()})
        queue_configs = parse_queue_configs(queues, settings.global_max_workers is not None,
                                            registered)
        not_run = [q for q in registered if q not in queue_configs]
        if not_run and not only_these_queues:
            raise ValidationError(f"{UNCONFIGURED_QUEUES_ERROR}: {', '.join(not_run)}")
        declared_queues = getattr(self, "_queue_descriptors", {})
        undeclared = descriptors.undeclared_queue_error(declared_queues, queue_configs)
        if undeclared is not None:
            raise undeclared
        descriptors.check_limits(*descriptors.catalogue(self, queue_configs))
        if settings.global_max_workers is not None:
            reserved = sum(q.min_workers or 0 for q in queue_configs.values())
            if reserved > settings.global_max_workers:
                raise ValidationError(f"sum of min_workers ({reserved}) exceeds "
                                      f"global_max_workers ({settings.global_max_workers})")
        if queue_storage_schema is not None:
            await self._check_queue_storage_schema(queue_storage_schema)
        from awa.runtime.runtime import Runtime

        # The pool and engine first: the schema check and the foreign-layout refusal happen
        # before any part of the runtime exists.
        pool = await self._get_pool()
        engine = await self._get_engine()
        client = cast(_ClientMembers, self)  # WorkerMixin is only ever mixed into AsyncClient
        runtime = Runtime(settings, queue_configs, self._handlers, self._events,
                          pool=pool, engine=engine,
                          database_url=client.database_url,  # may be the embedded server's
                          direct_database_url=client.direct_database_url,
                          application_name=client.application_name,
                          sync_cron=client.sync_cron_jobs,
                          catalogue=lambda: descriptors.catalogue(self, queue_configs))
        # During a live switch of engines (awa.storage.transition) the role picks which engine
        # this runtime claims from; on a database in none, the engine has no such member.
        set_role = getattr(runtime.engine, "set_transition_role", None)
        if set_role is not None:
            set_role(storage_transition_role)
        self._runtime = runtime
        try:
            await runtime.start()
            # Catalogued before start() returns, as awa-pg 0.6.9 did (then every snapshot tick).
            from awa.runtime.maintenance.descriptors import sync_descriptors
            await sync_descriptors(runtime.pool, runtime.catalogue(), runtime.instance_id,
                                   engine=runtime.engine,
                                   sync_interval_ms=settings.snapshot_interval_ms)
        except BaseException:
            self._runtime = None
            try:
                await runtime.shutdown(0)
            except Exception:  # the start error is the one to report
                pass
            raise

    async def shutdown(self, timeout_ms: int = config.SHUTDOWN_TIMEOUT_MS) -> None:
        """Stop claiming, wait up to ``timeout_ms`` for running handlers, write
        their outcomes; whatever still runs is left to rescue."""
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            await runtime.shutdown(timeout_ms)

    async def _close_runtime(self) -> None:
        await self.shutdown()

    @property
    def runtime(self) -> Any:
        """The running ``Runtime`` (None when not started)."""
        return self._runtime

    def health_listener_addr(self) -> tuple[str, int] | None:
        """Where ``/healthz`` and ``/readyz`` listen (``health_addr`` / ``AWA_HEALTH_ADDR``;
        port 0 resolved), or None when not started or not configured."""
        server = getattr(self._runtime, "health_server", None)
        return None if server is None else server.address

    async def _check_queue_storage_schema(self, schema: str) -> None:
        """A worker told its queue-storage schema must find the database's layout there."""
        check_queue_storage_schema(schema)
        engine = await self._get_engine()
        serving = getattr(engine, "schema", None) if engine.name == "queue_storage" else None
        if serving is not None and serving != schema:
            raise ValidationError(f"queue_storage_schema={schema!r}, but this database's queue "
                                  f"storage is in schema {serving!r}: pass {serving!r} or leave "
                                  f"it out")

    async def _postgres_reachable(self) -> bool:
        try:
            await self._get_engine()
            return True
        except Exception:  # any failure to reach the database means: not connected
            return False

    async def health_check(self) -> HealthCheck:
        runtime = self._runtime
        if runtime is None:
            # No runtime: only the database can be asked about (awa-pg 0.6.9 did the same).
            return HealthCheck(healthy=False, postgres_connected=await self._postgres_reachable(),
                               poll_loop_alive=False,
                               heartbeat_alive=False, shutting_down=False, leader=False)
        h = runtime.health
        h.refresh()
        try:
            available = await runtime.available_counts()
            h.postgres_connected = True
        except Exception:  # any failure to ask the database means: not connected
            available = {}
            h.postgres_connected = False
        # Handlers running now, per queue: not the permits in use, which also count the
        # slots a claim statement still out has reserved (two in flight with nothing running).
        running = Counter(ctx.job.queue for ctx in list(runtime.in_flight.values()))
        queues = {}
        for name, q in runtime.queues.items():
            p = runtime.permits[name]
            weighted = p.pool is not None
            queues[name] = QueueHealth(
                in_flight=running[name], available=available.get(name, 0),
                max_workers=q.max_workers, min_workers=q.min_workers if weighted else None,
                weight=q.weight if weighted else None,
                overflow_held=p.overflow_held if weighted else None, capacity=p.capacity)
        return HealthCheck(healthy=h.healthy, postgres_connected=h.postgres_connected,
                           poll_loop_alive=h.poll_loop_alive, heartbeat_alive=h.heartbeat_alive,
                           shutting_down=h.shutting_down, leader=h.leader, queues=queues)


def build_settings(**kwargs: Any) -> RuntimeSettings:
    """RuntimeSettings from start()'s keyword arguments; None keeps the default."""
    known = set(RuntimeSettings.__dataclass_fields__)
    unknown = set(kwargs) - known
    if unknown:
        raise ValidationError(f"start() got unknown option(s) {', '.join(sorted(unknown))}")
    values = {k: v for k, v in kwargs.items() if v is not None}
    for name in _INTERVAL_ARGS + ("poll_interval_ms",):
        if name in values:
            values[name] = _interval_ms(values[name], name)
    for name in _POSITIVE_NUMBER_ARGS:
        # descriptor_retention_days=0 disables descriptor retention (0.6.9's documented use).
        floor_ok = name == "descriptor_retention_days" and values.get(name) == 0
        if name in values and not floor_ok and (isinstance(values[name], bool)
                                                or not isinstance(values[name], (int, float))
                                                or values[name] <= 0):
            raise ValidationError(f"{name} must be a positive number, got {values[name]!r}")
    for name in _BATCH_ARGS:
        if name in values:
            _positive_int(values[name], name)
    if "global_max_workers" in values:
        _positive_int(values["global_max_workers"], "global_max_workers")
    pace = values.get("batch_operations_pace", 0)
    if (isinstance(pace, bool) or not isinstance(pace, (int, float)) or not math.isfinite(pace)
            or pace < 0):
        raise ValidationError(f"batch_operations_pace must be a number >= 0 (0: no rest "
                              f"between a batch operation's steps), got {pace!r}")
    if "metrics_addr" in values:
        from awa.telemetry import parse_listen_address
        parse_listen_address(values["metrics_addr"])
    return RuntimeSettings(**values)
