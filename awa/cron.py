"""Cron schedules: ``client.periodic(...)`` and the cron admin functions.

A schedule is declared in code and validated at once (expression, time zone,
ranges), upserted into ``awa.cron_jobs`` when a runtime starts, and fired by
the maintenance leader (``awa.runtime.maintenance.cron``).  Pause, resume,
manual trigger and delete work on the stored rows, for the CLI and operators.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from psycopg_pool import AsyncConnectionPool

from awa import config, recording, serialization
from awa.job import Job, ValidationError
from awa.storage import open_engine
from awa.storage.engine import CronJobInfo, CronSchedule, Engine

MISSED_FIRE_POLICIES = ("coalesce", "catch_up")
_NO_ARGS: Any = object()


@dataclass(frozen=True)
class PeriodicJob:
    """One declared schedule, validated; its fields are the ``awa.cron_jobs`` columns."""

    name: str
    cron_expr: str
    kind: str
    args: dict[str, Any]
    timezone: str = "UTC"
    queue: str = config.DEFAULT_QUEUE
    priority: int = config.DEFAULT_PRIORITY
    max_attempts: int = config.DEFAULT_MAX_ATTEMPTS
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    missed_fire_policy: str = "coalesce"

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def schedule(self) -> CronSchedule:
        """What the engine stores for this declaration."""
        return CronSchedule(**self.record())


# --- schedule arithmetic (shared with the leader's evaluator) ----------------------
def validate_schedule(name: str, cron_expr: str, timezone: str) -> ZoneInfo:
    """Raise a one-line ``ValidationError`` for a bad expression or time zone."""
    # croniter (and dateutil under it) is imported where a schedule is computed: ~30 ms of
    # CPU that every `awa` and `awa-ops` process paid at start-up through the client.
    from croniter import croniter

    if not isinstance(cron_expr, str) or not croniter.is_valid(cron_expr):
        raise ValidationError(
            f"periodic job {name!r}: invalid cron expression {cron_expr!r}; use five fields "
            f"'minute hour day-of-month month day-of-week', e.g. '*/5 * * * *'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValidationError(
            f"periodic job {name!r}: unknown time zone {timezone!r}; use an IANA name such "
            f"as 'UTC' or 'Europe/Berlin'") from None


def latest_slot(cron_expr: str, timezone: str, now: datetime) -> datetime:
    """The most recent fire time at or before ``now``."""
    from croniter import croniter  # lazily: see validate_schedule

    local_now = now.astimezone(ZoneInfo(timezone))
    prev: datetime = croniter(cron_expr, local_now).get_prev(datetime)
    following: datetime = croniter(cron_expr, prev).get_next(datetime)
    return following if following <= local_now else prev


def slots_between(cron_expr: str, timezone: str, after: datetime, until: datetime,
                  limit: int) -> list[datetime]:
    """Fire times in ``(after, until]``, oldest first, at most ``limit``."""
    from croniter import croniter  # lazily: see validate_schedule

    it = croniter(cron_expr, after.astimezone(ZoneInfo(timezone)))
    slots: list[datetime] = []
    while len(slots) < limit:
        slot = it.get_next(datetime)
        if slot > until:
            break
        slots.append(slot)
    return slots


def due_slots(cron_expr: str, timezone: str, policy: str, after: datetime, now: datetime,
              catch_up_limit: int = config.CRON_CATCH_UP_MAX_PER_TICK) -> list[datetime]:
    """What to fire now: the latest missed slot (coalesce) or every one (catch_up)."""
    if policy == "catch_up":
        return slots_between(cron_expr, timezone, after, now, catch_up_limit)
    slot = latest_slot(cron_expr, timezone, now)
    return [slot] if slot > after else []


# --- validation of the other fields ----------------------------------------------------
def _validate_fields(name: str, queue: str, priority: int, max_attempts: int,
                     missed_fire_policy: str, tags: Any, metadata: Any) -> None:
    if not queue or len(queue.encode()) > config.MAX_QUEUE_NAME_BYTES:
        raise ValidationError(f"periodic job {name!r}: queue name must be 1 to "
                              f"{config.MAX_QUEUE_NAME_BYTES} bytes, got {queue!r}")
    if not config.MIN_PRIORITY <= priority <= config.MAX_PRIORITY:
        raise ValidationError(f"periodic job {name!r}: priority must be between "
                              f"{config.MIN_PRIORITY} and {config.MAX_PRIORITY}, got {priority}")
    if not config.MIN_MAX_ATTEMPTS <= max_attempts <= config.MAX_MAX_ATTEMPTS:
        raise ValidationError(f"periodic job {name!r}: max_attempts must be between "
                              f"{config.MIN_MAX_ATTEMPTS} and {config.MAX_MAX_ATTEMPTS}, "
                              f"got {max_attempts}")
    if missed_fire_policy not in MISSED_FIRE_POLICIES:
        raise ValidationError(f"periodic job {name!r}: missed_fire_policy must be "
                              f"'coalesce' or 'catch_up', got {missed_fire_policy!r}")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValidationError(f"periodic job {name!r}: tags must be a list of strings")
    if not isinstance(metadata, dict):
        raise ValidationError(f"periodic job {name!r}: metadata must be a dict")
    serialization.require_json(metadata, f"periodic job {name!r}: metadata")


def _row_dict(info: CronJobInfo) -> dict[str, Any]:
    out = asdict(info)
    out["paused"] = info.paused_at is not None
    return out


class CronMixin:
    """Schedules of the client: declaration, runtime sync, and admin."""

    @property
    def _periodic_jobs(self) -> list[PeriodicJob]:
        found: list[PeriodicJob] = self.__dict__.setdefault("_awa_periodic_jobs", [])
        return found

    def periodic(self, name: str, cron_expr: str, args_type: Any, args: Any = _NO_ARGS, *,
                 timezone: str = "UTC", queue: str = config.DEFAULT_QUEUE,
                 priority: int = config.DEFAULT_PRIORITY,
                 max_attempts: int = config.DEFAULT_MAX_ATTEMPTS,
                 tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                 missed_fire_policy: str = "coalesce", kind: str | None = None) -> None:
        """Declare a schedule; the runtime stores it at start and the leader fires it.

        ``periodic(name, expr, ArgsType, ArgsType(...))`` as in the existing SDK, or
        ``periodic(name, expr, ArgsType(...))`` (the type is taken from the args).
        """
        if args is _NO_ARGS:
            args, args_type = args_type, type(args_type)
        if not isinstance(name, str) or not name.strip():
            raise ValidationError("periodic job name must be a non-empty string")
        validate_schedule(name, cron_expr, timezone)
        tags = list(tags) if tags is not None else []
        metadata = dict(metadata) if metadata is not None else {}
        _validate_fields(name, queue, priority, max_attempts, missed_fire_policy, tags,
                         metadata)
        if isinstance(args_type, type) and args_type is not dict and not isinstance(args,
                                                                                   args_type):
            raise ValidationError(f"periodic job {name!r}: args must be a {args_type.__name__}, "
                                  f"got {type(args).__name__}")
        if kind is None:
            if args_type is dict or not isinstance(args_type, type):
                raise ValidationError(f"periodic job {name!r}: dict args need an explicit "
                                      f"kind= (there is no class to derive it from)")
            kind = serialization.derive_kind(args_type)
        if any(p.name == name for p in self._periodic_jobs):
            raise ValidationError(f"periodic job {name!r} is already registered; "
                                  f"give each schedule its own name")
        self._periodic_jobs.append(PeriodicJob(
            name=name, cron_expr=cron_expr, kind=kind, args=serialization.encode_args(args),
            timezone=timezone, queue=queue, priority=priority, max_attempts=max_attempts,
            tags=tags, metadata=metadata, missed_fire_policy=missed_fire_policy))

    async def _get_pool(self, *, check_schema: bool = True) -> AsyncConnectionPool:
        raise NotImplementedError  # provided by AsyncClient

    async def _get_engine(self) -> Engine:
        raise NotImplementedError  # provided by AsyncClient

    async def sync_cron_jobs(self, pool: AsyncConnectionPool | None = None) -> int:
        """Upsert the declared schedules into ``awa.cron_jobs``; returns rows changed.

        Keeps ``last_enqueued_at`` and pause state, so a redeploy neither
        re-fires a slot nor resumes a schedule an operator paused.
        """
        if not self._periodic_jobs:
            return 0
        if pool is None:
            pool, engine = await self._get_pool(), await self._get_engine()
        else:
            engine = await open_engine(pool)
        async with pool.connection() as conn:
            return await engine.upsert_cron_jobs(conn, [p.schedule() for p in self._periodic_jobs])

    async def list_cron_jobs(self) -> list[dict[str, Any]]:
        pool, engine = await self._get_pool(), await self._get_engine()
        async with pool.connection() as conn:
            infos = await engine.list_cron_jobs(conn)
        return [_row_dict(i) for i in infos]

    async def get_cron_job(self, name: str) -> dict[str, Any]:
        pool, engine = await self._get_pool(), await self._get_engine()
        async with pool.connection() as conn:
            info = await engine.get_cron_job(conn, name)
        if info is None:
            raise _not_found(name)
        return _row_dict(info)

    async def delete_cron_job(self, name: str) -> bool:
        pool, engine = await self._get_pool(), await self._get_engine()
        async with pool.connection() as conn:
            return await engine.delete_cron_job(conn, name)

    async def pause_cron_job(self, name: str, paused_by: str | None = None) -> None:
        """Stop firing until resumed; raises ``ValidationError`` for an unknown name."""
        pool, engine = await self._get_pool(), await self._get_engine()
        async with pool.connection() as conn:
            found = await engine.pause_cron_job(conn, name, paused_by)
        if not found:
            raise _not_found(name)

    async def resume_cron_job(self, name: str) -> None:
        pool, engine = await self._get_pool(), await self._get_engine()
        async with pool.connection() as conn:
            found = await engine.resume_cron_job(conn, name)
        if not found:
            raise _not_found(name)

    async def trigger_cron_job(self, name: str) -> Job[Any]:
        """Enqueue one run now, outside the schedule (the schedule itself is untouched)."""
        pool, engine = await self._get_pool(), await self._get_engine()
        async with pool.connection() as conn:
            job = await engine.trigger_cron_job(conn, name)
        if job is None:
            raise _not_found(name)
        recording.record_inserted_jobs((job,))
        return job


def _not_found(name: str) -> ValidationError:
    return ValidationError(f"no cron job named {name!r}; `awa cron list` shows the schedules")


__all__ = ["CronMixin", "PeriodicJob", "due_slots", "latest_slot", "slots_between",
           "validate_schedule", "MISSED_FIRE_POLICIES"]
