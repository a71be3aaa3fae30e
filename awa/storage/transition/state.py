"""The transition's state in the database, its steps, and what blocks each.

States (``awa.storage_transition``, migration 0008):

- ``canonical``: canonical serves the database;
- ``prepared``: ``awa storage prepare`` laid queue storage out beside canonical, which still
  serves the database: nothing moved yet;
- ``mixed_transition``: queue storage is laid out and named the engine; new jobs go to it;
  runtimes of this release claim from both engines, so canonical drains; an attempt ends in
  the engine it was claimed from;
- ``aborting``: the way back, symmetric: new jobs go to canonical, queue storage drains;
  once it holds no live job the database is ``canonical`` again;
- ``active``: finalized: queue storage serves the database (a database migrated for queue
  storage from the start reads as ``active`` too).

Each step is a short transaction on the state row (``FOR UPDATE``); the checks that let a
drained engine go (finalize, the end of an abort) run under that engine's tables' SHARE lock,
so an insert or claim still in flight is either visible to the check or waits for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from awa import config
from awa.job import ValidationError
from awa.schema.layout import QUEUE_STORAGE, StorageLayout
from awa.statements import InTransaction, Query, Steps, first_value
from awa.storage.transition.sql import load

CANONICAL = "canonical"
PREPARED = "prepared"
MIXED = "mixed_transition"
ABORTING = "aborting"
ACTIVE = "active"
STATES = (CANONICAL, PREPARED, MIXED, ABORTING, ACTIVE)
TWO_ENGINES = (MIXED, ABORTING)
TRANSITION_MIGRATION = 8
"""The migration that added the state: a runtime whose code needs an older schema knows
nothing of the transition (capability ``canonical``)."""

ROLES = ("auto", "canonical_drain", "queue_storage_target")
CAPABILITY_UNAWARE = "canonical"
CAPABILITY_QUEUE_STORAGE = "queue_storage"
LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"
PAUSE = "SELECT pg_sleep(%s)"


class TransitionRefused(ValidationError):
    """A transition step that may not run now; its message says why and what to do, in one
    line."""


@dataclass(frozen=True)
class TransitionState:
    """The row of ``awa.storage_transition``, as this code reads it."""

    state: str
    prepared_engine: str | None = None
    prepared_schema: str | None = None
    epoch: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    entered_at: datetime | None = None
    updated_at: datetime | None = None
    finalized_at: datetime | None = None
    in_state_s: float = 0.0

    @property
    def two_engines(self) -> bool:
        """Both engines hold live jobs: runtimes claim from both."""
        return self.state in TWO_ENGINES

    @property
    def enqueue_engine(self) -> str:
        """Where a new job goes."""
        return QUEUE_STORAGE if self.state in (MIXED, ACTIVE) else CANONICAL

    @property
    def queue_schema(self) -> str:
        return self.prepared_schema or config.DEFAULT_QUEUE_STORAGE_SCHEMA


def _state(row: Mapping[str, Any], layout: StorageLayout | None) -> TransitionState:
    state = row["state"]
    schema = row["prepared_schema"]
    if state == CANONICAL and layout is not None and layout.engine == QUEUE_STORAGE:
        # Laid out for queue storage by `awa migrate` (no transition): it is the active engine.
        state, schema = ACTIVE, layout.schema
    details = row["details"] or {}
    if isinstance(details, str):  # a driver that loads jsonb as text (Django's adapter)
        details = json.loads(details)
    return TransitionState(state, row["prepared_engine"], schema, row["transition_epoch"],
                           dict(details), row["entered_at"], row["updated_at"],
                           row["finalized_at"], float(row["in_state_s"] or 0.0))


def read_steps(layout: StorageLayout | None = None) -> Steps[TransitionState | None]:
    """The state (one or two SELECTs), None on a schema from before the transition."""
    if layout is not None and (layout.schema_version or 0) < TRANSITION_MIGRATION:
        return None
    if layout is None and not first_value((yield Query(load("has_table")))):
        return None
    rows = yield Query(load("read_state"))
    return _state(rows[0], layout) if rows else None


def refresh_steps() -> Steps[TransitionState | None]:
    """The state again, for an engine that keeps it (one SELECT)."""
    rows = yield Query(load("read_state"))
    return _state(rows[0], None) if rows else None


def note_installed_steps(schema: str) -> Steps[None]:
    """After ``awa migrate`` laid queue storage out: a database in no transition (a new one,
    or a drained one switched offline) is now ``active``."""
    if not first_value((yield Query(load("has_table")))):
        return
    yield Query(load("activate_if_canonical"), {"schema": schema})


# --- what the fleet can do -----------------------------------------------------------
@dataclass(frozen=True)
class LiveRuntime:
    capability: str
    role: str
    name: str  # host:pid (awa-py version)


def live_runtimes_steps() -> Steps[list[LiveRuntime]]:
    rows = yield Query(load("live_capabilities"), {
        "aware": TRANSITION_MIGRATION, "factor": config.OPS_RUNTIME_LIVE_FACTOR,
        "min_s": config.OPS_RUNTIME_LIVE_MIN_S})
    return [LiveRuntime(r["capability"], r["role"],
                        f"{r['hostname']}:{r['pid']} (awa-py {r['version']})") for r in rows]


def _unaware(runtimes: list[LiveRuntime]) -> str | None:
    old = [r.name for r in runtimes if r.capability == CAPABILITY_UNAWARE]
    if not old:
        return None
    return (f"{len(old)} live runtime(s) of a release that knows nothing of the transition: "
            f"{', '.join(old)}; roll them to this release (or stop them) first")


def canonical_backlog_steps() -> Steps[dict[str, int]]:
    [row] = yield Query(load("canonical_backlog"))
    return {k: int(v) for k, v in row.items()}


def queue_storage_backlog_steps(layout_installed: bool) -> Steps[int]:
    if not layout_installed:
        return 0
    return int(first_value((yield Query(load("queue_storage_backlog")))) or 0)


def _describe_backlog(engine: str, backlog: Mapping[str, int]) -> str:
    parts = ", ".join(f"{n} {s}" for s, n in backlog.items() if n)
    return f"{engine} still holds {sum(backlog.values())} live job(s) ({parts})"


def _settle(state: TransitionState) -> str | None:
    if state.in_state_s >= config.STORAGE_TRANSITION_SETTLE_S:
        return None
    return (f"{state.state} was entered {state.in_state_s:.1f}s ago: every producer and "
            f"runtime reads the state within {config.STORAGE_TRANSITION_REFRESH_S:g}s; try "
            f"again after {config.STORAGE_TRANSITION_SETTLE_S:g}s")


# --- the status report ---------------------------------------------------------------
@dataclass
class TransitionStatus:
    """Everything ``storage_status()``, ``awa storage status`` and the ops tools say."""

    state: TransitionState
    canonical_backlog: dict[str, int]
    queue_storage_backlog: int
    queue_storage_ready: bool
    runtimes: list[LiveRuntime]
    enter_mixed_blockers: list[str]
    finalize_blockers: list[str]
    abort_blockers: list[str]

    @property
    def capability_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.runtimes:
            counts[r.capability] = counts.get(r.capability, 0) + 1
        return counts

    @property
    def in_progress(self) -> bool:
        return self.state.state in (PREPARED, MIXED, ABORTING)

    def describe(self) -> str:
        """One line: where the database is and what the next step waits for."""
        s = self.state.state
        backlog = sum(self.canonical_backlog.values())
        if s == CANONICAL:
            return "canonical serves this database; no transition in progress"
        if s == ACTIVE:
            return (f"queue storage (schema {self.state.queue_schema}) serves this database"
                    + (f"; canonical still holds {backlog} live job(s)" if backlog else ""))
        if s == PREPARED:
            head = (f"transition prepared (queue storage in schema {self.state.queue_schema}); "
                    f"next: `awa storage enter-mixed`")
            blockers = self.enter_mixed_blockers
        elif s == MIXED:
            head = (f"mixed transition in progress: new jobs go to queue storage, canonical "
                    f"drains ({backlog} live job(s) left)")
            blockers = self.finalize_blockers
        else:
            head = (f"abort in progress: new jobs go to canonical, queue storage drains "
                    f"({self.queue_storage_backlog} live job(s) left)")
            blockers = self.abort_blockers
        return head + ("; blocked: " + "; ".join(blockers) if blockers else "; ready")

    def report(self, now: datetime) -> dict[str, Any]:
        """awa-pg 0.6.9's storage_status document, key for key and in its order."""
        st = self.state
        current = QUEUE_STORAGE if st.state == ACTIVE else CANONICAL
        prepared = st.state in (PREPARED, MIXED, ABORTING)
        if st.state == ACTIVE:
            details: dict[str, Any] = {"schema": st.queue_schema}
        elif st.state == CANONICAL:
            details = {}
        else:  # a switch in progress: what its steps recorded, and what its drain waits for
            details = dict(st.details)
            details.update({"queue_storage_live_backlog": self.queue_storage_backlog,
                            "canonical_backlog_by_state": self.canonical_backlog,
                            "abort_blockers": self.abort_blockers,
                            "enqueue_engine": st.enqueue_engine})

        def ts(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat().replace("+00:00", "Z")

        return {
            "current_engine": current, "active_engine": st.enqueue_engine,
            "prepared_engine": QUEUE_STORAGE if prepared else None,
            "state": st.state, "transition_epoch": st.epoch, "details": details,
            "entered_at": ts(st.entered_at or now), "updated_at": ts(st.updated_at or now),
            "finalized_at": ts(st.finalized_at) if st.state == ACTIVE else None,
            "canonical_live_backlog": sum(self.canonical_backlog.values()),
            "prepared_queue_storage_schema": st.queue_schema if prepared or
            st.state == ACTIVE else None,
            "prepared_schema_ready": self.queue_storage_ready,
            "live_runtime_capability_counts": self.capability_counts,
            "can_enter_mixed_transition": not self.enter_mixed_blockers,
            "enter_mixed_transition_blockers": self.enter_mixed_blockers,
            "can_finalize": not self.finalize_blockers,
            "finalize_blockers": self.finalize_blockers,
        }


def _ready_steps(schema: str) -> Steps[bool]:
    from awa.storage.queue_storage.schema import in_schema

    ring = in_schema("awa.queue_ring_state", schema)
    return bool(first_value((yield Query(load("queue_storage_ready"),
                                         {"ring_state": ring}))))


def status_steps(layout: StorageLayout) -> Steps[TransitionStatus | None]:
    """The whole report (a handful of SELECTs); None before migration 0008."""
    state = yield from read_steps(layout)
    if state is None:
        return None
    canonical = yield from canonical_backlog_steps()
    ready = yield from _ready_steps(state.queue_schema)
    queue_backlog = yield from queue_storage_backlog_steps(ready and state.state != CANONICAL)
    runtimes = yield from live_runtimes_steps()
    return TransitionStatus(state, canonical, queue_backlog, ready, runtimes,
                            _enter_blockers(state, runtimes, ready),
                            _finalize_blockers(state, canonical, runtimes),
                            _abort_blockers(state, queue_backlog, runtimes))


def _enter_blockers(state: TransitionState, runtimes: list[LiveRuntime],
                    ready: bool) -> list[str]:
    if state.state != PREPARED:
        return [f"state is {state.state}, not prepared"
                + (": run `awa storage prepare` first" if state.state == CANONICAL else "")]
    found = []
    if not ready:
        found.append(f"queue storage is not laid out in schema {state.queue_schema!r}: run "
                     f"`awa storage prepare` again")
    unaware = _unaware(runtimes)
    if unaware:
        found.append(unaware)
    if not any(r.capability == CAPABILITY_QUEUE_STORAGE and r.role != "canonical_drain"
               for r in runtimes):
        found.append("no live runtime of this release claims from queue storage (role auto or "
                     "queue_storage_target): start one first, or new jobs would wait")
    return found


def _finalize_blockers(state: TransitionState, canonical: Mapping[str, int],
                       runtimes: list[LiveRuntime]) -> list[str]:
    if state.state != MIXED:
        return [f"state is {state.state}, not mixed_transition"]
    found = []
    if sum(canonical.values()):
        found.append(_describe_backlog("canonical", canonical))
    unaware = _unaware(runtimes)
    if unaware:
        found.append(unaware)
    settle = _settle(state)
    if settle:
        found.append(settle)
    return found


def _abort_blockers(state: TransitionState, queue_backlog: int,
                    runtimes: list[LiveRuntime]) -> list[str]:
    """What keeps ``awa storage abort`` from ending at canonical now (it may still start)."""
    if state.state not in (PREPARED, MIXED, ABORTING):
        return [f"state is {state.state}: there is no transition to abort"
                + (" (a finalized switch is not undone live)" if state.state == ACTIVE else "")]
    found = []
    if state.state == MIXED:
        found.append("queue storage takes new jobs: abort first moves to aborting")
    if queue_backlog:
        found.append(f"queue storage still holds {queue_backlog} live job(s)")
    unaware = _unaware(runtimes)
    if unaware:
        found.append(unaware)
    if state.state == ABORTING:
        settle = _settle(state)
        if settle:
            found.append(settle)
    return found


# --- the steps -----------------------------------------------------------------------
def _locked_state() -> Steps[TransitionState]:
    rows = yield Query(load("lock_state"))
    if not rows:
        raise TransitionRefused("this database has no transition state: run `awa migrate`")
    return _state(rows[0], None)


def _set(state: str, schema: str | None, details: dict[str, Any]) -> Query:
    return Query(load("set_state"), {
        "state": state, "prepared_engine": QUEUE_STORAGE if state != CANONICAL else None,
        "prepared_schema": schema, "details": Jsonb(details)})


def prepare_steps(layout: StorageLayout, schema: str | None, dry_run: bool) -> Steps[str]:
    """``canonical`` -> ``prepared``: queue storage laid out in ``schema`` beside canonical
    (each file a bounded-lock step, as ``awa migrate``), canonical still named the engine, so
    nothing moves yet.  Idempotent; with ``dry_run``, only what it and enter-mixed would do and
    what blocks them."""
    from awa.storage.queue_storage.schema import check_schema, install_steps

    target = schema or config.DEFAULT_QUEUE_STORAGE_SCHEMA
    check_schema(target)
    status = yield from status_steps(layout)
    if status is None:
        raise TransitionRefused("this database's schema is older than this code: run "
                                "`awa migrate` first")
    st = status.state.state
    if st not in (CANONICAL, PREPARED):
        raise TransitionRefused(f"prepare refused: the database is {st}"
                                + (", already switched" if st == ACTIVE else
                                   "; see `awa storage status`"))
    if st == PREPARED and status.state.queue_schema != target and schema is not None:
        raise TransitionRefused(f"prepare refused: already prepared for schema "
                                f"{status.state.queue_schema!r}; `awa storage abort` first to "
                                f"choose another")
    if st == PREPARED:
        target = status.state.queue_schema
    backlog = sum(status.canonical_backlog.values())
    runtimes = status.capability_counts
    if dry_run:
        blockers = [b for b in _enter_blockers(TransitionState(PREPARED, QUEUE_STORAGE, target),
                                               status.runtimes, True)]
        return (f"dry run: would lay queue storage out in schema {target!r} beside canonical "
                f"(bounded-lock steps, as `awa migrate`); canonical holds {backlog} live "
                f"job(s), which keep running there; live runtimes: {runtimes or 'none'}; "
                f"enter-mixed would then send new jobs to queue storage"
                + ("; it would be refused now: " + "; ".join(blockers) if blockers
                   else "; nothing blocks it now"))

    def mark() -> Steps[None]:
        locked = yield from _locked_state()
        if locked.state not in (CANONICAL, PREPARED):
            raise TransitionRefused(f"prepare refused: the database is {locked.state}")
        if locked.state == CANONICAL:
            yield _set(PREPARED, target, {"prepared_by": "awa storage prepare"})

    yield InTransaction(mark())
    yield from install_steps(target)

    def keep_canonical_named() -> Steps[None]:
        # The install names queue storage the engine (its jobs_view.sql); until enter-mixed,
        # canonical stays the one a process of any release opens.
        locked = yield from _locked_state()
        if locked.state == PREPARED:
            yield Query(load("unname_others_than_canonical"))
            yield Query(load("name_canonical"))

    yield InTransaction(keep_canonical_named())
    return (f"prepared: queue storage laid out in schema {target!r}; canonical still serves "
            f"the database; next: `awa storage enter-mixed`")


def enter_mixed_steps(layout: StorageLayout) -> Steps[str]:
    """``prepared`` -> ``mixed_transition`` in one short transaction: queue storage named the
    engine, the state flipped; refused with its blockers."""
    status = yield from status_steps(layout)
    if status is None:
        raise TransitionRefused("this database's schema is older than this code: run "
                                "`awa migrate` first")
    if status.state.state == MIXED:
        return "already in mixed_transition"
    if status.enter_mixed_blockers:
        raise TransitionRefused("enter-mixed refused: " + "; ".join(status.enter_mixed_blockers))
    schema = status.state.queue_schema

    def step() -> Steps[str]:
        locked = yield from _locked_state()
        if locked.state != PREPARED:
            raise TransitionRefused(f"enter-mixed refused: the database is {locked.state}")
        yield Query(load("unname_others_than_queue_storage"))
        yield Query(load("name_queue_storage"), {"schema": schema})
        yield _set(MIXED, schema, {"entered_mixed_by": "awa storage enter-mixed"})
        return (f"mixed transition entered: new jobs go to queue storage (schema {schema!r}); "
                f"canonical drains; `awa storage finalize` once `awa storage status` shows no "
                f"blocker")

    done: str = yield InTransaction(step())
    return done


def _under_share_lock(lock: str, check: Any) -> Steps[str]:
    """``check()`` (steps) in a transaction holding the state row and ``lock``; retried while
    the lock is busy (each wait bounded by ``MIGRATE_LOCK_TIMEOUT_MS``)."""
    first, most = config.MIGRATE_RETRY_PAUSE_MS
    pause = first
    for _ in range(config.STORAGE_TRANSITION_LOCK_ATTEMPTS):
        try:
            done: str = yield InTransaction(check())
            return done
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            yield Query(PAUSE, (pause / 1000.0,))
            pause = min(pause * 2, most)
    raise TransitionRefused(f"could not lock the drained engine's tables in "
                            f"{config.STORAGE_TRANSITION_LOCK_ATTEMPTS} tries: a long "
                            f"transaction holds them (see pg_stat_activity); run it again")


def finalize_steps(layout: StorageLayout, dry_run: bool = False) -> Steps[str]:
    """``mixed_transition`` -> ``active`` once canonical holds no live job, no runtime of an
    older release is live and the state has settled."""
    def check() -> Steps[str]:
        yield Query(LOCK_TIMEOUT, (f"{config.MIGRATE_LOCK_TIMEOUT_MS}ms",))
        locked = yield from _locked_state()
        if locked.state == ACTIVE:
            return "already finalized: queue storage serves this database"
        if not dry_run:
            yield Query(load("lock_canonical"))
        backlog = yield from canonical_backlog_steps()
        runtimes = yield from live_runtimes_steps()
        blockers = _finalize_blockers(locked, backlog, runtimes)
        if blockers:
            raise TransitionRefused("finalize refused: " + "; ".join(blockers))
        if dry_run:
            return "dry run: finalize would succeed now"
        yield _set(ACTIVE, locked.queue_schema, {"finalized_by": "awa storage finalize"})
        return (f"finalized: queue storage (schema {locked.queue_schema!r}) serves this "
                f"database")

    return (yield from _under_share_lock("lock_canonical", check))


def abort_steps(layout: StorageLayout, dry_run: bool = False) -> Steps[str]:
    """The way back.  ``prepared`` -> ``canonical``; ``mixed_transition`` -> ``aborting``
    (new jobs go to canonical again, queue storage drains); ``aborting`` -> ``canonical``
    once queue storage holds no live job (run it again until it does)."""
    from awa.storage.queue_storage.schema import in_schema

    def check() -> Steps[str]:
        yield Query(LOCK_TIMEOUT, (f"{config.MIGRATE_LOCK_TIMEOUT_MS}ms",))
        locked = yield from _locked_state()
        if locked.state not in (PREPARED, MIXED, ABORTING):
            raise TransitionRefused("abort refused: " + _abort_blockers(locked, 0, [])[0])
        if locked.state == MIXED:
            if dry_run:
                return ("dry run: abort would send new jobs to canonical again and let queue "
                        "storage drain (state aborting)")
            yield _set(ABORTING, locked.queue_schema, {"aborted_by": "awa storage abort"})
            return ("aborting: new jobs go to canonical again; queue storage drains; run `awa "
                    "storage abort` again once `awa storage status` shows no blocker")
        ready = yield from _ready_steps(locked.queue_schema)
        if ready and not dry_run:
            yield Query(in_schema(load("lock_queue_storage"), locked.queue_schema))
        queue_backlog = yield from queue_storage_backlog_steps(ready)
        runtimes = yield from live_runtimes_steps()
        blockers = _abort_blockers(locked, queue_backlog, runtimes)
        if blockers:
            raise TransitionRefused("abort refused: " + "; ".join(blockers))
        if dry_run:
            return "dry run: abort would end now, canonical serving the database"
        yield Query(load("unname_others_than_canonical"))
        yield Query(load("name_canonical"))
        yield _set(CANONICAL, None, {"abort_ended_by": "awa storage abort"})
        return "aborted: canonical serves this database again"

    return (yield from _under_share_lock("lock_queue_storage", check))
