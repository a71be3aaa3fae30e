"""The worker role of the client: handler registration, start, shutdown, health.

``@client.task(ArgsType, queue=..., kind=...)`` (alias ``@client.worker``)
registers an ``async def`` handler (run on the loop) or a plain ``def``
(run in a bounded thread pool).  ``start()`` validates the configuration
in full before anything connects, then runs the runtime
(``awa.runtime.runtime.Runtime``) in the background until ``shutdown()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from awa import config
from awa.config import QueueConfig, RateLimit, RuntimeSettings
from awa.job import AwaError, ValidationError
from awa.runtime.events import EVENT_NAMES, EventHooks, JobEvent
from awa.runtime.executor import HandlerSpec
from awa.serialization import derive_kind

if TYPE_CHECKING:
    from awa.client import AsyncClient

T = TypeVar("T")

NO_WORKERS_ERROR = "register at least one worker before starting the runtime"
WEIGHTED_NEEDS_QUEUES_ERROR = "weighted mode requires explicit queue configs"

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
def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{what} must be a positive integer, got {value!r}")
    return value


def _interval_ms(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValidationError(f"{what} must be a positive number of milliseconds, got {value!r}")
    return int(value)


def _rate_limit(value: Any, queue: str) -> RateLimit | None:
    if value is None or isinstance(value, RateLimit):
        return value
    if isinstance(value, dict):
        value = (value.get("max_rate"), value.get("burst", 1))
    if (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            and value[0] > 0 and value[1] >= 1):
        return RateLimit(float(value[0]), int(value[1]))
    raise ValidationError(f"queue {queue!r}: rate_limit must be (max_rate > 0, burst >= 1), "
                          f"got {value!r}")


def _queue_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
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
        raise ValidationError("queues must be a list of (name, max_workers) tuples or dicts")
    out: dict[str, QueueConfig] = {}
    for item in queues:
        if isinstance(item, QueueConfig):
            cfg = item
        elif isinstance(item, (tuple, list)):
            if len(item) != 2:
                raise ValidationError(f"queue tuple must be (name, max_workers), got {item!r}")
            name = _queue_name(item[0])
            if weighted:
                raise ValidationError(f"queue {name!r}: weighted mode (global_max_workers) "
                                      "needs dict configs with min_workers and weight")
            cfg = QueueConfig(name, max_workers=_positive_int(item[1], f"queue {name!r} "
                                                                    "max_workers"))
        elif isinstance(item, dict):
            cfg = _queue_from_dict(item, weighted)
        else:
            raise ValidationError(f"queue config must be a tuple or dict, got {item!r}")
        if cfg.name in out:
            raise ValidationError(f"queue {cfg.name!r} is configured twice")
        out[cfg.name] = cfg
    if not out:
        raise ValidationError("queues is empty: give at least one queue to work on")
    return out


def _queue_from_dict(item: dict[str, Any], weighted: bool) -> QueueConfig:
    unknown = set(item) - _QUEUE_KEYS
    name = _queue_name(item.get("name", item.get("queue")))
    if unknown:
        raise ValidationError(f"queue {name!r}: unknown option(s) {', '.join(sorted(unknown))}; "
                              f"use {', '.join(sorted(_QUEUE_KEYS - {'queue'}))}")
    kwargs: dict[str, Any] = {}
    if weighted:
        if item.get("max_workers") is not None and item.get("min_workers") is None:
            raise ValidationError(f"queue {name!r}: weighted mode (global_max_workers) uses "
                                  "min_workers and weight, not max_workers")
        kwargs["min_workers"] = (0 if item.get("min_workers") in (None, 0)
                                 else _positive_int(item["min_workers"],
                                                    f"queue {name!r} min_workers"))
        kwargs["weight"] = _positive_int(item.get("weight", 1), f"queue {name!r} weight")
    else:
        if item.get("min_workers") is not None or item.get("weight") is not None:
            raise ValidationError(f"queue {name!r}: min_workers/weight need global_max_workers "
                                  "(weighted mode); otherwise give max_workers")
        kwargs["max_workers"] = _positive_int(item.get("max_workers",
                                                       config.DEFAULT_MAX_WORKERS),
                                              f"queue {name!r} max_workers")
    kwargs["rate_limit"] = _rate_limit(item.get("rate_limit"), name)
    if item.get("deadline_duration_ms") is not None:
        kwargs["deadline_duration_ms"] = _interval_ms(item["deadline_duration_ms"],
                                                      f"queue {name!r} deadline_duration_ms")
    if item.get("claim_batch_size") is not None:
        kwargs["claim_batch_size"] = _positive_int(item["claim_batch_size"],
                                                   f"queue {name!r} claim_batch_size")
    if item.get("poll_interval_ms") is not None:
        kwargs["poll_interval_ms"] = _interval_ms(item["poll_interval_ms"],
                                                  f"queue {name!r} poll_interval_ms")
    if item.get("priority_aging_interval_ms") is not None:
        kwargs["priority_aging_interval_ms"] = _interval_ms(
            item["priority_aging_interval_ms"], f"queue {name!r} priority_aging_interval_ms")
    if item.get("dlq_enabled") is not None:
        if not isinstance(item["dlq_enabled"], bool):
            raise ValidationError(f"queue {name!r}: dlq_enabled must be true or false")
        kwargs["dlq_enabled"] = item["dlq_enabled"]
    if item.get("retention") is not None:
        kwargs["retention"] = item["retention"]
    if item.get("claimers") is not None:
        kwargs["extra"] = {"claimers": _positive_int(item["claimers"],
                                                     f"queue {name!r} claimers")}
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


class WorkerMixin:
    """Worker role of the client (composed into ``AsyncClient``)."""

    def __init__(self) -> None:
        self._runtime: Any = None
        self._handlers: dict[str, HandlerSpec] = {}
        self._events = EventHooks()

    # -- registration --------------------------------------------------------
    def task(self, args_type: type[T], *, kind: str | None = None,
             queue: str = config.DEFAULT_QUEUE) -> Callable[[Callable], Callable]:
        """Register the decorated function as the handler of ``kind``
        (default: the snake_case of ``args_type``'s name) on ``queue``."""
        if args_type is None or not (isinstance(args_type, type) or args_type is Any):
            raise ValidationError(f"task() needs the args class first, got {args_type!r}")
        if kind is not None and (not isinstance(kind, str) or not kind):
            raise ValidationError(f"kind must be a non-empty string, got {kind!r}")
        job_kind = kind or derive_kind(args_type)
        queue_name = _queue_name(queue)

        def register(fn: Callable) -> Callable:
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
               queue: str = config.DEFAULT_QUEUE) -> Callable[[Callable], Callable]:
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
                    **more: Any) -> None:
        """Start the runtime in the background; returns once it is claiming.

        ``queue_storage_schema``, when given on a queue-storage database, must
        name the schema its layout is in (``awa migrate --queue-storage-schema``);
        the other ``queue_storage_*`` arguments, ``storage_transition_role`` and
        ``terminal_count_rollup_interval_ms`` are accepted and ignored (the
        rings keep the sizes and cadences the maintenance leader gives them).
        Further RuntimeSettings fields (``cleanup_interval_ms``,
        ``snapshot_interval_ms``, ``sync_handler_threads``, ``run_maintenance``,
        ...) may be passed by name.
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
        undeclared = sorted(set(getattr(self, "_queue_descriptors", {})) - set(queue_configs))
        if undeclared:
            raise ValidationError(f"queue_descriptor() for {', '.join(map(repr, undeclared))}, "
                                  f"which start() does not run: describe only queues this "
                                  f"client works on")
        if settings.global_max_workers is not None:
            reserved = sum(q.min_workers or 0 for q in queue_configs.values())
            if reserved > settings.global_max_workers:
                raise ValidationError(f"the queues' min_workers add up to {reserved}, more than "
                                      f"global_max_workers={settings.global_max_workers}")
        if queue_storage_schema is not None:
            await self._check_queue_storage_schema(queue_storage_schema)
        from awa.runtime.runtime import Runtime

        # WorkerMixin is only ever mixed into AsyncClient.
        runtime = Runtime(cast("AsyncClient", self), settings, queue_configs, self._handlers,
                          self._events)
        self._runtime = runtime
        try:
            await runtime.start()
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

    async def _check_queue_storage_schema(self, schema: str) -> None:
        """A worker told its queue-storage schema must find the database's layout there."""
        from awa.storage.queue_storage.schema import check_schema  # engines load on use

        check_schema(schema)
        engine = await self._get_engine()  # type: ignore[attr-defined]  # AsyncClient's
        serving = getattr(engine, "schema", None) if engine.name == "queue_storage" else None
        if serving is not None and serving != schema:
            raise ValidationError(f"queue_storage_schema={schema!r}, but this database's queue "
                                  f"storage is in schema {serving!r}: pass {serving!r} or leave "
                                  f"it out")

    async def _postgres_reachable(self) -> bool:
        try:
            await self._get_engine()  # type: ignore[attr-defined]
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
        h.refresh(runtime)
        try:
            available = await runtime.available_counts()
            h.postgres_connected = True
        except Exception:  # any failure to ask the database means: not connected
            available = {}
            h.postgres_connected = False
        queues = {}
        for name, q in runtime.queues.items():
            p = runtime.permits[name]
            weighted = p.pool is not None
            queues[name] = QueueHealth(
                in_flight=p.in_use, available=available.get(name, 0),
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
        if name in values and (isinstance(values[name], bool)
                               or not isinstance(values[name], (int, float))
                               or values[name] <= 0):
            raise ValidationError(f"{name} must be a positive number, got {values[name]!r}")
    for name in _BATCH_ARGS:
        if name in values:
            _positive_int(values[name], name)
    if "global_max_workers" in values:
        _positive_int(values["global_max_workers"], "global_max_workers")
    if "metrics_addr" in values:
        from awa.telemetry import parse_listen_address
        parse_listen_address(values["metrics_addr"])
    return RuntimeSettings(**values)
