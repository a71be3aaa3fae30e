"""Compat scenarios: each runs unchanged under awa-pg 0.6.9 and under ours.

A scenario is a function of ``ctx`` (``runner.Ctx``: ``ctx.client`` -- a
blocking ``awa.Client`` for a plain function, an ``awa.AsyncClient`` for an
``async def`` --, ``ctx.q`` its own queue name, ``ctx.url``, ``ctx.sql()``) that
returns a JSON-able summary of what it observed; what it raises is an outcome
too.  Jobs it leaves in ``ctx.q`` are compared row by row afterwards.
Standard library and ``awa`` only: this module is imported by both SDKs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import awa

REGISTRY: dict[str, Callable[..., Any]] = {}


def scenario(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        if name:
            f.__name__ = name
        assert f.__name__ not in REGISTRY, f.__name__
        REGISTRY[f.__name__] = f
        return f
    return register(fn) if fn is not None else register


# --- summarising helpers ------------------------------------------------------
BUILTIN_BASES = (bool, int, float, str, bytes, list, tuple, dict)


def tn(value: Any) -> str:
    """A type name both SDKs can agree on (PyO3 classes live in ``builtins``).

    A subclass of a builtin type reports the builtin (ours returns e.g. job timestamps
    as a ``str`` subclass): what user code can rely on is ``isinstance``.
    """
    if isinstance(value, awa.JobState):
        return "JobState"
    if type(value) not in BUILTIN_BASES:
        for base in BUILTIN_BASES:
            if isinstance(value, base):
                return base.__name__
    return type(value).__name__


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)) and not isinstance(
            value, enum.Enum) and type(value) in (bool, int, float, str):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, awa.JobState):
        return f"JobState.{str(value)}"
    if isinstance(value, (str, int, float)):
        return {"type": tn(value), "value": str(value)}
    return {"type": tn(value)}


JOB_FIELDS = ("id", "kind", "queue", "args", "state", "priority", "attempt", "max_attempts",
              "run_at", "created_at", "finalized_at", "deadline", "errors", "metadata", "tags",
              "progress")
STABLE = ("kind", "args", "priority", "attempt", "max_attempts", "metadata", "tags", "progress")


def job(j: Any) -> Any:
    """A Job: its type, every reference field's type, and the values that do not vary."""
    if j is None or not hasattr(j, "kind"):
        return {"not_a_job": tn(j)}
    out: dict[str, Any] = {"type": tn(j), "types": {f: tn(getattr(j, f)) for f in JOB_FIELDS
                                                     if f != "args"}}
    out.update({f: getattr(j, f) for f in STABLE})
    # What came back as args is compared by insert_args_type alone; here, its content.
    if dataclasses.is_dataclass(out["args"]) and not isinstance(out["args"], type):
        out["args"] = dataclasses.asdict(out["args"])
    out["state"] = str(j.state)
    out["errors"] = len(j.errors)
    return out


def raised(exc: BaseException) -> str:
    """``raised:Name,Base,...``: an exception and the classes an ``except`` could name.

    The suite counts ours as compatible when it is an instance of what the
    reference raised (so every ``except``/``pytest.raises`` of a user still
    catches it), not only when the names are equal.
    """
    names = [c.__name__ for c in type(exc).__mro__
             if c not in (BaseException, Exception, object)]
    return "raised:" + ",".join(names)


def raises(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What ``fn(...)`` raised (see ``raised``), or ``ok``."""
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result.close()  # type: ignore[attr-defined]
            return "awaitable"
        return "ok"
    except Exception as exc:
        return raised(exc)


def raises_msg(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``raises``, with the message too (users' tests assert on 0.6.9's wording)."""
    try:
        fn(*args, **kwargs)
        return "ok"
    except Exception as exc:
        return [raised(exc), str(exc)]


async def araises(awaitable: Any) -> str:
    try:
        await awaitable
        return "ok"
    except Exception as exc:
        return raised(exc)


def fields(obj: Any, names: tuple[str, ...]) -> dict[str, str]:
    return {n: tn(getattr(obj, n)) if hasattr(obj, n) else "MISSING" for n in names}


@dataclasses.dataclass
class SendEmail:
    to: str
    subject: str = "hi"


@dataclasses.dataclass
class CompatPing:
    n: int = 0


def future(seconds: float = 3600) -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


def past(seconds: float = 3600) -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)


# === item 4: public names ======================================================
REFERENCE_NAMES = [
    "AsyncClient", "AwaError", "BatchOperation", "BatchOperationFilter", "BatchOperationKind",
    "BatchOperationPreview", "BatchOperationState", "CallbackNotFound", "CallbackToken",
    "Cancel", "Client", "DatabaseError", "DlqEntry", "HealthCheck", "Job", "JobState",
    "PartitionedQueue", "QueueHealth", "QueueStat", "RawClient", "ResolveResult", "RetryAfter",
    "RetryFailedResult", "SchemaNotMigrated", "SerializationError", "Snooze", "SyncTransaction",
    "TerminalError", "Transaction", "UniqueConflict", "UnknownJobKind", "ValidationError",
    "WaitForCallback", "callback_contract", "current_migration_version", "derive_kind",
    "init_telemetry", "migrate", "migrations", "migrations_range", "schema_patches",
    "shutdown_telemetry",
]

for _n in REFERENCE_NAMES:
    def _has(ctx: Any, _n: str = _n) -> Any:
        return hasattr(awa, _n)
    scenario(_has, name=f"name_{_n}")


@scenario
def testing_module_names(ctx: Any) -> Any:
    import importlib
    try:
        t = importlib.import_module("awa.testing")
    except Exception as exc:
        return raised(exc)
    return {n: hasattr(t, n) for n in ("AwaTestClient", "HandlerJob", "JobRow", "NoJob",
                                       "WorkResult", "awa_client", "get_database_url",
                                       "DEFAULT_DATABASE_URL")}


@scenario
def testing_workresult_predicates(ctx: Any) -> Any:
    from awa.testing import JobRow, NoJob, WorkResult
    row = JobRow.from_row({"id": 1, "kind": "k", "queue": "q", "args": {}, "attempt": 1,
                           "max_attempts": 25, "priority": 2, "tags": None})
    out = {"row": dataclasses.asdict(row), "nojob_bool": bool(NoJob), "nojob": repr(NoJob)}
    for outcome in ("completed", "failed", "retryable", "cancelled", "snoozed", "no_job"):
        r = WorkResult(job=row, outcome=outcome)
        out[outcome] = [r.is_completed(), r.is_failed(), r.is_retryable(), r.is_cancelled(),
                        r.is_snoozed(), r.is_no_job(), r.error]
    return out


@scenario
def bridge_names(ctx: Any) -> Any:
    import awa.bridge as b
    return {n: hasattr(b, n) for n in ("insert_job", "insert_job_sync")}


@scenario
def callback_contract_constants(ctx: Any) -> Any:
    cc = awa.callback_contract
    return {"header": cc.SIGNATURE_HEADER, "prefix": cc.DEFAULT_PATH_PREFIX,
            "timeout": cc.DEFAULT_HEARTBEAT_TIMEOUT_SECS}


@scenario
def callback_contract_sign_verify(ctx: Any) -> Any:
    cc = awa.callback_contract
    secret = bytes(range(32))
    sig = cc.sign(secret, "0191a7a0-0000-7000-8000-000000000001")
    return {"sig": sig, "type": tn(sig),
            "ok": cc.verify(secret, "0191a7a0-0000-7000-8000-000000000001", sig),
            "bad": cc.verify(secret, "0191a7a0-0000-7000-8000-000000000001", "00" * 32),
            "str_secret": raises(cc.sign, "secret", "abc")}


@scenario
def callback_contract_url(ctx: Any) -> Any:
    cc = awa.callback_contract
    return [cc.build_callback_url("https://x.test", "/api/callbacks", "abc", "complete"),
            cc.build_callback_url("https://x.test/", "/api/callbacks/", "abc", "fail")]


KEY32 = bytes(range(1, 33))


def _cc(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        return [raised(exc), str(exc)]


@scenario
def callback_contract_sign_edges(ctx: Any) -> Any:
    cc = awa.callback_contract
    cid = "0191a7a0-0000-7000-8000-000000000001"
    return {"empty_secret": _cc(cc.sign, b"", cid),
            "long_secret": _cc(cc.sign, b"k" * 200, cid),
            "empty_id": _cc(cc.sign, KEY32, ""),
            "unicode_id": _cc(cc.sign, KEY32, "zürich"),
            "not_uuid": _cc(cc.sign, KEY32, "not-a-uuid"),
            "hex_secret": _cc(cc.sign, KEY32.hex(), cid),
            "short_secret": _cc(cc.sign, b"k", cid),
            "bytearray": _cc(cc.sign, bytearray(b"k"), cid),
            "memoryview": _cc(cc.sign, memoryview(b"k"), cid),
            "int_secret": _cc(cc.sign, 5, cid),
            "none_id": _cc(cc.sign, KEY32, None),
            "bytes_id": _cc(cc.sign, KEY32, b"abc")}


@scenario
def callback_contract_verify_edges(ctx: Any) -> Any:
    cc = awa.callback_contract
    cid = "0191a7a0-0000-7000-8000-000000000001"
    sig = cc.sign(KEY32, cid)
    return {"upper": _cc(cc.verify, KEY32, cid, sig.upper()),
            "prefixed": _cc(cc.verify, KEY32, cid, "sha256=" + sig),
            "short": _cc(cc.verify, KEY32, cid, sig[:10]),
            "not_hex": _cc(cc.verify, KEY32, cid, "zz" * 32),
            "empty": _cc(cc.verify, KEY32, cid, ""),
            "spaces": _cc(cc.verify, KEY32, cid, " " + sig + " "),
            "other_id": _cc(cc.verify, KEY32, cid.replace("1", "2"), sig),
            "other_secret": _cc(cc.verify, bytes(32), cid, sig),
            "none_sig": _cc(cc.verify, KEY32, cid, None),
            "str_secret": _cc(cc.verify, "k", cid, sig)}


@scenario
def callback_contract_url_edges(ctx: Any) -> Any:
    cc = awa.callback_contract
    url = cc.build_callback_url
    return {"no_slash_prefix": _cc(url, "https://x.test", "api/cb", "abc", "complete"),
            "empty_prefix": _cc(url, "https://x.test", "", "abc", "complete"),
            "root_prefix": _cc(url, "https://x.test", "/", "abc", "complete"),
            "base_path": _cc(url, "https://x.test/base", "/cb", "abc", "heartbeat"),
            "base_path_slash": _cc(url, "https://x.test/base/", "/cb", "abc", "resume"),
            "double_slash": _cc(url, "https://x.test//", "//cb//", "abc", "complete"),
            "unknown_action": _cc(url, "https://x.test", "/cb", "abc", "explode"),
            "empty_action": _cc(url, "https://x.test", "/cb", "abc", ""),
            "space_id": _cc(url, "https://x.test", "/cb", "a b/c", "complete"),
            "empty_base": _cc(url, "", "/cb", "abc", "complete"),
            "query_base": _cc(url, "https://x.test/?a=1", "/cb", "abc", "complete"),
            "default_prefix": _cc(url, "https://x.test", cc.DEFAULT_PATH_PREFIX, "abc", "fail")}


# === item 3: exception classes =================================================
for _e in ("AwaError", "CallbackNotFound", "DatabaseError", "SchemaNotMigrated",
           "SerializationError", "TerminalError", "UniqueConflict", "UnknownJobKind",
           "ValidationError"):
    def _bases(ctx: Any, _e: str = _e) -> Any:
        import builtins
        cls = getattr(awa, _e)
        return {b: issubclass(cls, getattr(awa, b, None) or getattr(builtins, b))
                for b in ("AwaError", "Exception", "ValueError", "TypeError", "RuntimeError",
                          "LookupError")}
    scenario(_bases, name=f"exc_bases_{_e}")


@scenario
def terminal_error_message(ctx: Any) -> Any:
    e = awa.TerminalError("boom")
    return {"str": str(e), "args": list(e.args)}


# === item 2: JobState ==========================================================
@scenario
def jobstate_members(ctx: Any) -> Any:
    return [(n, str(getattr(awa.JobState, n)), repr(getattr(awa.JobState, n)))
            for n in ("Scheduled", "Available", "Running", "Completed", "Retryable", "Failed",
                      "Cancelled", "WaitingExternal")]


@scenario
def jobstate_equality(ctx: Any) -> Any:
    s = awa.JobState
    return {"same": s.Available == s.Available, "other": s.Available == s.Running}


@scenario
def jobstate_hashable(ctx: Any) -> Any:
    return raises(hash, awa.JobState.Available)


@scenario
def jobstate_equals_string(ctx: Any) -> Any:
    return awa.JobState.Available == "available"


@scenario
def jobstate_job_state_identity(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    return [j.state == awa.JobState.Available, tn(j.state)]


@scenario
def jobstate_str_format(ctx: Any) -> Any:
    return [f"{awa.JobState.WaitingExternal}", "%s" % awa.JobState.Completed]  # noqa: UP031


# === handler results =============================================================
@scenario
def handler_results(ctx: Any) -> Any:
    ra, sn = awa.RetryAfter(5), awa.Snooze(2.5)
    return {"retry": [ra.seconds, tn(ra.seconds)], "snooze": [sn.seconds, tn(sn.seconds)],
            "cancel": awa.Cancel("why").reason}


@scenario
def cancel_default_reason(ctx: Any) -> Any:
    return tn(awa.Cancel().reason)


@scenario
def wait_for_callback_from_str(ctx: Any) -> Any:
    return raises(awa.WaitForCallback, "abc")


@scenario
def derive_kind_names(ctx: Any) -> Any:
    return [awa.derive_kind(n) for n in ("SendEmail", "HTTPRequest", "ProcessPDFFile", "job",
                                         "Already_Snake", "A", "ABTest", "userID2Fetch")]


# === migrations ==================================================================
@scenario
def migrations_shape(ctx: Any) -> Any:
    m = awa.migrations()
    first = m[0]
    return {"type": tn(m), "item": tn(first), "len_item": len(first),
            "types": [tn(x) for x in first], "sorted": [x[0] for x in m] == sorted(x[0] for x in m)}


@scenario
def migrations_range_shape(ctx: Any) -> Any:
    cur = awa.current_migration_version()
    r = awa.migrations_range(0, cur)
    return {"cur": tn(cur), "type": tn(r), "all": len(r) == len(awa.migrations()),
            "empty": awa.migrations_range(cur, cur), "item": tn(r[0]) if r else None}


@scenario
async def migrate_function_awaitable(ctx: Any) -> Any:
    pending = awa.migrate(ctx.url)
    awaitable = inspect.isawaitable(pending)
    await pending
    return awaitable


@scenario
async def migrate_function_again(ctx: Any) -> Any:
    return tn(await awa.migrate(ctx.url))


@scenario
def client_migrate_returns(ctx: Any) -> Any:
    return tn(ctx.client.migrate())


@scenario
def schema_patches_shape(ctx: Any) -> Any:
    return tn(awa.schema_patches())


# === inserts (sync) ============================================================
@scenario
def insert_dict_kind(ctx: Any) -> Any:
    return job(ctx.client.insert({"a": 1}, kind="compat_k", queue=ctx.q))


@scenario
def insert_args_type(ctx: Any) -> Any:
    return tn(ctx.client.insert(SendEmail(to="a@b.c"), queue=ctx.q).args)


class ModelLike:
    """A pydantic model as both SDKs see one (``model_dump``): pydantic is in neither venv."""

    def __init__(self, to: str, n: int) -> None:
        self.to, self.n = to, n

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return {"to": self.to, "n": self.n, "when": "2026-01-01T00:00:00Z"}


def _args_of(j: Any) -> Any:
    """What user code does right after an insert: index the args, read their type."""
    try:
        return {"type": tn(j.args), "to": j.args["to"], "args": j.args}
    except Exception as exc:
        return raised(exc)


@scenario
def insert_args_index(ctx: Any) -> Any:
    return _args_of(ctx.client.insert(SendEmail(to="a@b.c"), queue=ctx.q))


@scenario
def insert_args_model(ctx: Any) -> Any:
    return _args_of(ctx.client.insert(ModelLike("m@b.c", 3), kind="compat_model", queue=ctx.q))


@scenario
def insert_args_dict_copy(ctx: Any) -> Any:
    mine = {"to": "d@b.c", "nested": {"x": [1, 2]}}
    j = ctx.client.insert(mine, kind="compat_dict", queue=ctx.q)
    return {"seen": _args_of(j), "same_object": j.args is mine}


@scenario
def insert_many_copy_args_index(ctx: Any) -> Any:
    jobs = ctx.client.insert_many_copy([SendEmail(to="1@b.c"), ModelLike("2@b.c", 1)],
                                       kind="compat_mixed", queue=ctx.q)
    return [_args_of(j) for j in jobs]


@scenario
def tx_sync_insert_args_index(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        j = tx.insert(SendEmail(to="t@b.c"), queue=ctx.q)
        many = tx.insert_many([SendEmail(to="u@b.c")], queue=ctx.q)
    return [_args_of(j)] + [_args_of(m) for m in many]


@scenario
async def ainsert_args_index(ctx: Any) -> Any:
    j = await ctx.client.insert(SendEmail(to="a@b.c"), queue=ctx.q)
    m = await ctx.client.insert(ModelLike("m@b.c", 2), kind="compat_model", queue=ctx.q)
    many = await ctx.client.insert_many_copy([SendEmail(to="x@b.c")], queue=ctx.q)
    return [_args_of(j), _args_of(m)] + [_args_of(x) for x in many]


@scenario
async def tx_async_insert_args_index(ctx: Any) -> Any:
    async with await ctx.client.transaction() as tx:
        j = await tx.insert(SendEmail(to="t@b.c"), queue=ctx.q)
    return _args_of(j)


@scenario
def insert_dataclass(ctx: Any) -> Any:
    return job(ctx.client.insert(SendEmail(to="a@b.c"), queue=ctx.q))


@scenario
def insert_dict_no_kind(ctx: Any) -> Any:
    return raises(ctx.client.insert, {"a": 1}, queue=ctx.q)


@scenario
def insert_defaults(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    return {"priority": j.priority, "max_attempts": j.max_attempts, "attempt": j.attempt,
            "tags": j.tags, "metadata": j.metadata, "state": str(j.state), "progress": j.progress,
            "finalized": j.finalized_at, "deadline": j.deadline}


@scenario
def insert_default_queue(ctx: Any) -> Any:
    return ctx.client.insert(CompatPing(n=1), kind="compat_default_q").queue


for _p in (-1, 0, 1, 2, 3, 4, 5, 100):
    def _prio(ctx: Any, _p: int = _p) -> Any:
        try:
            return job(ctx.client.insert(CompatPing(), queue=ctx.q, priority=_p))
        except Exception as exc:
            return raised(exc)
    scenario(_prio, name=f"insert_priority_{_p}".replace("-", "m"))

for _m in (-1, 0, 1, 25, 1000, 32767, 40000):
    def _max(ctx: Any, _m: int = _m) -> Any:
        try:
            return job(ctx.client.insert(CompatPing(), queue=ctx.q, max_attempts=_m))
        except Exception as exc:
            return raised(exc)
    scenario(_max, name=f"insert_max_attempts_{_m}".replace("-", "m"))


@scenario
def insert_tags_metadata(ctx: Any) -> Any:
    return job(ctx.client.insert(CompatPing(), queue=ctx.q, tags=["a", "b"],
                                 metadata={"x": {"y": [1, 2]}}))


@scenario
def insert_run_at_future_datetime(ctx: Any) -> Any:
    return job(ctx.client.insert(CompatPing(), queue=ctx.q, run_at=future()))


@scenario
def insert_run_at_past_datetime(ctx: Any) -> Any:
    return job(ctx.client.insert(CompatPing(), queue=ctx.q, run_at=past()))


@scenario
def insert_run_at_iso_string(ctx: Any) -> Any:
    return job(ctx.client.insert(CompatPing(), queue=ctx.q, run_at=future().isoformat()))


@scenario
def insert_run_at_naive_datetime(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q,
                  run_at=dt.datetime.now() + dt.timedelta(hours=1))


@scenario
def insert_run_at_garbage(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q, run_at="tomorrow-ish")


@scenario
def insert_run_at_int(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q, run_at=12345)


@scenario
def insert_empty_kind(ctx: Any) -> Any:
    return raises(ctx.client.insert, {"a": 1}, kind="", queue=ctx.q)


@scenario
def insert_empty_queue(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue="")


@scenario
def insert_long_queue(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue="q" * 300)


@scenario
def insert_args_list(ctx: Any) -> Any:
    return raises(ctx.client.insert, [1, 2], kind="compat_list", queue=ctx.q)


@scenario
def insert_args_int(ctx: Any) -> Any:
    return raises(ctx.client.insert, 5, kind="compat_int", queue=ctx.q)


@scenario
def insert_args_unserializable(ctx: Any) -> Any:
    return raises(ctx.client.insert, {"a": object()}, kind="compat_obj", queue=ctx.q)


@scenario
def insert_args_nested_datetime(ctx: Any) -> Any:
    return raises(ctx.client.insert, {"a": dt.datetime(2020, 1, 1)}, kind="compat_dt",
                  queue=ctx.q)


@scenario
def insert_metadata_not_dict(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q, metadata=[1])


@scenario
def insert_tags_not_list(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q, tags="abc")


@scenario
def insert_unique_duplicate(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(n=7), queue=ctx.q, unique_opts={"by_args": True})
    return raises(ctx.client.insert, CompatPing(n=7), queue=ctx.q,
                  unique_opts={"by_args": True})


@scenario
def insert_unique_different_args(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(n=1), queue=ctx.q, unique_opts={"by_args": True})
    return job(ctx.client.insert(CompatPing(n=2), queue=ctx.q, unique_opts={"by_args": True}))


@scenario
def insert_unique_by_queue(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(n=1), queue=ctx.q, unique_opts={"by_queue": True})
    return raises(ctx.client.insert, CompatPing(n=2), queue=ctx.q,
                  unique_opts={"by_queue": True})


@scenario
def insert_unique_bad_option(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q, unique_opts={"nope": 1})


@scenario
def insert_unique_by_period(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(), queue=ctx.q, unique_opts={"by_period": 3600})
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q, unique_opts={"by_period": 3600})


@scenario
def insert_ordering_key(ctx: Any) -> Any:
    return job(ctx.client.insert(CompatPing(), queue=ctx.q, ordering_key="acct-1"))


@scenario
def insert_unknown_keyword(ctx: Any) -> Any:
    return raises(ctx.client.insert, CompatPing(), queue=ctx.q, bogus=1)


@scenario
def job_repr_shape(ctx: Any) -> Any:
    r = repr(ctx.client.insert(CompatPing(), queue=ctx.q))
    return r.split("(")[0]


@scenario
def job_timestamps_iso(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    parsed = dt.datetime.fromisoformat(j.created_at)
    return {"tz": parsed.utcoffset() == dt.timedelta(0), "run_at": tn(j.run_at),
            "T": "T" in j.created_at, "eq": j.created_at <= j.run_at}


@scenario
def job_methods_outside_handler(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    return {"is_cancelled": raises(j.is_cancelled), "set_progress": raises(j.set_progress, 5),
            "update_metadata": raises(j.update_metadata, {"a": 1}),
            "flush_progress_sync": raises(j.flush_progress_sync)}


# --- insert_many_copy ----------------------------------------------------------
@scenario
def insert_many_copy_returns(ctx: Any) -> Any:
    jobs = ctx.client.insert_many_copy([CompatPing(n=i) for i in range(3)], queue=ctx.q)
    return {"type": tn(jobs), "n": len(jobs), "first": job(jobs[0]),
            "args": [job(j)["args"] for j in jobs]}


@scenario
def insert_many_copy_empty(ctx: Any) -> Any:
    return jsonable(ctx.client.insert_many_copy([], queue=ctx.q))


@scenario
def insert_many_copy_opts(ctx: Any) -> Any:
    jobs = ctx.client.insert_many_copy([CompatPing(n=1), CompatPing(n=2)], queue=ctx.q,
                                       opts=[{"priority": 1}, None])
    return [j.priority for j in jobs]


@scenario
def insert_many_copy_dicts(ctx: Any) -> Any:
    return len(ctx.client.insert_many_copy([{"a": 1}, {"a": 2}], kind="compat_d", queue=ctx.q))


@scenario
def enqueue_many_copy_count(ctx: Any) -> Any:
    n = ctx.client.enqueue_many_copy([CompatPing(n=i) for i in range(4)], queue=ctx.q)
    return [n, tn(n)]


@scenario
def insert_many_copy_future(ctx: Any) -> Any:
    jobs = ctx.client.insert_many_copy([CompatPing()], queue=ctx.q, run_at=future())
    return str(jobs[0].state)


# --- async inserts ---------------------------------------------------------------
@scenario
async def ainsert_job(ctx: Any) -> Any:
    return job(await ctx.client.insert(SendEmail(to="x"), queue=ctx.q))


@scenario
async def ainsert_future(ctx: Any) -> Any:
    return job(await ctx.client.insert(SendEmail(to="x"), queue=ctx.q, run_at=future(60)))


@scenario
async def ainsert_bad_priority(ctx: Any) -> Any:
    return await araises(ctx.client.insert(SendEmail(to="x"), queue=ctx.q, priority=9))


@scenario
async def ainsert_many_copy(ctx: Any) -> Any:
    jobs = await ctx.client.insert_many_copy([SendEmail(to="x")] * 2, queue=ctx.q)
    return [tn(jobs), [job(j) for j in jobs]]


@scenario
async def ainsert_unique_conflict(ctx: Any) -> Any:
    await ctx.client.insert(CompatPing(n=3), queue=ctx.q, unique_opts={"by_args": True})
    return await araises(ctx.client.insert(CompatPing(n=3), queue=ctx.q,
                                           unique_opts={"by_args": True}))


# === transactions ============================================================
@scenario
def tx_sync_commit(ctx: Any) -> Any:
    tx = ctx.client.transaction()
    j = tx.insert(CompatPing(n=1), queue=ctx.q)
    tx.commit()
    return {"tx": tn(tx), "job": job(j)}


@scenario
def tx_sync_rollback(ctx: Any) -> Any:
    tx = ctx.client.transaction()
    tx.insert(CompatPing(n=1), queue=ctx.q)
    tx.rollback()
    return len(ctx.client.list_jobs(queue=ctx.q))


@scenario
def tx_sync_context_commit(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        tx.insert(CompatPing(n=1), queue=ctx.q)
    return len(ctx.client.list_jobs(queue=ctx.q))


@scenario
def tx_sync_context_exception(ctx: Any) -> Any:
    try:
        with ctx.client.transaction() as tx:
            tx.insert(CompatPing(n=1), queue=ctx.q)
            raise KeyError("x")
    except KeyError:
        pass
    return len(ctx.client.list_jobs(queue=ctx.q))


@scenario
def tx_sync_execute_returns(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        n = tx.execute("SELECT 1")
    return [tn(n)]


@scenario
def tx_sync_fetch_one(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        row = tx.fetch_one("SELECT $1::int AS a, $2::text AS b", 5, "x")
    return {"type": tn(row), "row": row}


@scenario
def tx_sync_fetch_one_empty(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        return raises(tx.fetch_one, "SELECT 1 AS a WHERE false")


@scenario
def tx_sync_fetch_optional_empty(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        return jsonable(tx.fetch_optional("SELECT 1 AS a WHERE false"))


@scenario
def tx_sync_fetch_all(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        rows = tx.fetch_all("SELECT g AS n FROM generate_series(1, 3) g")
    return {"type": tn(rows), "rows": rows}


@scenario
def tx_sync_fetch_types(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        row = tx.fetch_one("SELECT 1::bigint AS i, 1.5::float8 AS f, true AS b, 'x'::text AS t,"
                           " '{\"a\":1}'::jsonb AS j, NULL::text AS n")
    return {k: [tn(v), v] for k, v in row.items()}


@scenario
def tx_sync_fetch_timestamp_type(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        row = tx.fetch_one("SELECT now() AS ts")
    return tn(row["ts"])


@scenario
def tx_sync_bad_sql(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        return raises(tx.execute, "SELEC nonsense")


@scenario
def tx_sync_insert_many(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        jobs = tx.insert_many([CompatPing(n=1), CompatPing(n=2)], queue=ctx.q)
    return {"type": tn(jobs), "jobs": [job(j) for j in jobs]} if jobs is not None else None


@scenario
def tx_sync_insert_then_query_jobs(ctx: Any) -> Any:
    with ctx.client.transaction() as tx:
        j = tx.insert(CompatPing(n=1), queue=ctx.q)
        row = tx.fetch_one("SELECT state::text AS state FROM awa.jobs WHERE id = $1", j.id)
    return row


@scenario
def tx_sync_commit_twice(ctx: Any) -> Any:
    tx = ctx.client.transaction()
    tx.commit()
    return raises(tx.commit)


@scenario
def tx_sync_insert_after_commit(ctx: Any) -> Any:
    tx = ctx.client.transaction()
    tx.commit()
    return raises(tx.insert, CompatPing(), queue=ctx.q)


@scenario
async def tx_async_commit(ctx: Any) -> Any:
    tx = await ctx.client.transaction()
    j = await tx.insert(CompatPing(n=1), queue=ctx.q)
    await tx.commit()
    return {"tx": tn(tx), "job": job(j)}


@scenario
async def tx_async_context(ctx: Any) -> Any:
    async with await ctx.client.transaction() as tx:
        await tx.insert(CompatPing(n=2), queue=ctx.q)
    return len(await ctx.client.list_jobs(queue=ctx.q))


@scenario
async def tx_async_rollback(ctx: Any) -> Any:
    tx = await ctx.client.transaction()
    await tx.insert(CompatPing(n=2), queue=ctx.q)
    await tx.rollback()
    return len(await ctx.client.list_jobs(queue=ctx.q))


@scenario
async def tx_async_fetch(ctx: Any) -> Any:
    tx = await ctx.client.transaction()
    one = await tx.fetch_one("SELECT $1::bigint AS x", 42)
    opt = await tx.fetch_optional("SELECT 1 WHERE false")
    allr = await tx.fetch_all("SELECT 1 AS a UNION ALL SELECT 2")
    n = await tx.execute("SELECT 1")
    await tx.commit()
    return {"one": one, "opt": opt, "all": allr, "n": tn(n)}


@scenario
async def tx_async_insert_many(ctx: Any) -> Any:
    tx = await ctx.client.transaction()
    jobs = await tx.insert_many([CompatPing(n=1)], queue=ctx.q)
    await tx.commit()
    return jsonable(jobs) if not isinstance(jobs, list) else [job(j) for j in jobs]


@scenario
async def tx_async_execute_update_count(ctx: Any) -> Any:
    await ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    await ctx.client.insert(CompatPing(n=2), queue=ctx.q)
    tx = await ctx.client.transaction()
    n = await tx.execute("SELECT id FROM awa.jobs WHERE queue = $1", ctx.q)
    await tx.commit()
    return n


# === admin =======================================================================
@scenario
def admin_get_job(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    return job(ctx.client.get_job(j.id))


@scenario
def admin_get_job_missing(ctx: Any) -> Any:
    return raises(ctx.client.get_job, 987654321)


@scenario
def admin_cancel(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    return job(ctx.client.cancel(j.id))


@scenario
def admin_cancel_twice(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    ctx.client.cancel(j.id)
    r = ctx.client.cancel(j.id)
    return job(r) if r is not None else None


@scenario
def admin_cancel_missing(ctx: Any) -> Any:
    try:
        return jsonable(ctx.client.cancel(987654321))
    except Exception as exc:
        return raised(exc)


@scenario
def admin_retry_cancelled(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    ctx.client.cancel(j.id)
    return job(ctx.client.retry(j.id))


@scenario
def admin_retry_available(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    r = ctx.client.retry(j.id)
    return job(r) if r is not None else None


@scenario
def admin_retry_missing(ctx: Any) -> Any:
    try:
        return jsonable(ctx.client.retry(987654321))
    except Exception as exc:
        return raised(exc)


@scenario
def admin_list_jobs_filters(ctx: Any) -> Any:
    a = ctx.client.insert(CompatPing(), queue=ctx.q)
    ctx.client.insert({"z": 1}, kind="compat_other", queue=ctx.q)
    ctx.client.cancel(a.id)
    c = ctx.client
    return {"all": len(c.list_jobs(queue=ctx.q)),
            "cancelled": len(c.list_jobs(queue=ctx.q, state="cancelled")),
            "kind": len(c.list_jobs(queue=ctx.q, kind="compat_other")),
            "limit": len(c.list_jobs(queue=ctx.q, limit=1)),
            "type": tn(c.list_jobs(queue=ctx.q)),
            "first": job(c.list_jobs(queue=ctx.q)[0])}


@scenario
def admin_list_jobs_bad_state(ctx: Any) -> Any:
    return raises(ctx.client.list_jobs, state="bogus", queue=ctx.q)


@scenario
def admin_list_jobs_order(ctx: Any) -> Any:
    ids = [ctx.client.insert(CompatPing(n=i), queue=ctx.q).id for i in range(3)]
    got = [j.id for j in ctx.client.list_jobs(queue=ctx.q)]
    return "desc" if got == ids[::-1] else "asc" if got == ids else "other"


@scenario
def admin_queue_stats_fields(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(), queue=ctx.q)
    ctx.client.insert(CompatPing(), queue=ctx.q, run_at=future())
    st = [s for s in ctx.client.queue_stats() if s.queue == ctx.q][0]
    names = ("queue", "available", "completed_last_hour", "failed", "lag_seconds", "paused",
             "retryable", "running", "scheduled", "total_queued", "waiting_external")
    return {"types": fields(st, names),
            "values": {n: getattr(st, n) for n in names if n != "lag_seconds"}}


@scenario
def admin_queue_stats_list(ctx: Any) -> Any:
    return tn(ctx.client.queue_stats())


@scenario
def admin_pause_resume(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(), queue=ctx.q)
    p = ctx.client.pause_queue(ctx.q, "tester")
    paused = [s.paused for s in ctx.client.queue_stats() if s.queue == ctx.q]
    r = ctx.client.resume_queue(ctx.q)
    resumed = [s.paused for s in ctx.client.queue_stats() if s.queue == ctx.q]
    return [jsonable(p), paused, jsonable(r), resumed]


@scenario
def admin_pause_unknown_queue(ctx: Any) -> Any:
    return raises(ctx.client.pause_queue, ctx.q + "_nojobs")


@scenario
def admin_drain_queue(ctx: Any) -> Any:
    for i in range(3):
        ctx.client.insert(CompatPing(n=i), queue=ctx.q)
    ctx.client.insert(CompatPing(n=9), queue=ctx.q, run_at=future())
    n = ctx.client.drain_queue(ctx.q)
    return [n, tn(n), sorted(str(j.state) for j in ctx.client.list_jobs(queue=ctx.q))]


@scenario
def admin_drain_empty(ctx: Any) -> Any:
    return ctx.client.drain_queue(ctx.q)


@scenario
def admin_discard_failed_none(ctx: Any) -> Any:
    n = ctx.client.discard_failed("compat_nothing")
    return [n, tn(n)]


@scenario
def admin_retry_failed_none(ctx: Any) -> Any:
    r = ctx.client.retry_failed(queue=ctx.q)
    return {"type": tn(r), "fields": fields(r, ("jobs", "matched", "pruned_failed_count")),
            "matched": r.matched, "jobs": len(r.jobs)}


@scenario
def admin_failed_lifecycle(ctx: Any) -> Any:
    """Fail jobs by SQL through the awa.jobs view (both SDKs route it), then retry_failed."""
    a = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.client.insert(CompatPing(n=2), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now(), attempt = 1 "
            "WHERE queue = %s", ctx.q)
    r = ctx.client.retry_failed(queue=ctx.q)
    again = ctx.client.get_job(a.id)
    # The order of RetryFailedResult.jobs is unspecified (0.6.9 happened to return newest first).
    jobs = sorted((job(j) for j in r.jobs), key=lambda d: d["args"]["n"])
    return {"matched": r.matched, "jobs": jobs, "state": str(again.state)}


@scenario
def admin_discard_failed(ctx: Any) -> Any:
    ctx.client.insert({"a": 1}, kind="compat_discard", queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE queue = %s",
            ctx.q)
    return ctx.client.discard_failed("compat_discard")


@scenario
def admin_retry_failed_job(ctx: Any) -> Any:
    a = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now(), attempt = 3 "
            "WHERE queue = %s", ctx.q)
    return job(ctx.client.retry(a.id))


def _fail_by_sql(ctx: Any, where: str = "queue = %s", *params: Any) -> None:
    """Set jobs failed the way a user does it: an UPDATE of ``awa.jobs``, state alone."""
    ctx.sql(f"UPDATE awa.jobs SET state = 'failed' WHERE {where}", *(params or (ctx.q,)))


@scenario
def admin_failed_by_state_only(ctx: Any) -> Any:
    """UPDATE awa.jobs SET state = 'failed' (nothing else), then every admin call on it."""
    a = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    b = ctx.client.insert(CompatPing(n=2), queue=ctx.q, run_at=future())
    c = ctx.client.insert({"x": 1}, kind="compat_failed_only", queue=ctx.q)
    _fail_by_sql(ctx)
    states = sorted(str(ctx.client.get_job(j.id).state) for j in (a, b, c))
    failed = sorted(str(j.id == a.id) for j in ctx.client.list_jobs(state="failed",
                                                                   queue=ctx.q))
    retried = job(ctx.client.retry(a.id))
    discarded = ctx.client.discard_failed("compat_failed_only")
    r = ctx.client.retry_failed(queue=ctx.q)
    return {"states": states, "listed": failed, "retried": retried, "discarded": discarded,
            "retry_failed": r.matched, "jobs": [job(j) for j in r.jobs]}


@scenario
def admin_failed_running_by_sql(ctx: Any) -> Any:
    """A job claimed by SQL (running), then failed by SQL: retry() finds it."""
    a = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'running', attempt = 1, heartbeat_at = now() "
            "WHERE id = %s", a.id)
    _fail_by_sql(ctx, "id = %s", a.id)
    return {"state": str(ctx.client.get_job(a.id).state), "retried": job(ctx.client.retry(a.id))}


@scenario
def admin_discard_failed_by_sql(ctx: Any) -> Any:
    for n in range(3):
        ctx.client.insert({"n": n}, kind="compat_discard_sql", queue=ctx.q)
    ctx.client.insert({"n": 9}, kind="compat_discard_sql", queue=ctx.q, run_at=future())
    _fail_by_sql(ctx)
    return [ctx.client.discard_failed("compat_discard_sql"),
            ctx.client.discard_failed("compat_discard_sql")]


@scenario
def admin_retry_failed_by_kind_sql(ctx: Any) -> Any:
    for n in range(2):
        ctx.client.insert({"n": n}, kind="compat_retry_kind_sql", queue=ctx.q)
    ctx.client.insert({"n": 5}, kind="compat_retry_kind_sql", queue=ctx.q, run_at=future())
    _fail_by_sql(ctx)
    r = ctx.client.retry_failed(kind="compat_retry_kind_sql")
    return {"matched": r.matched, "jobs": sorted(j.args["n"] for j in r.jobs),
            "left": ctx.client.retry_failed(kind="compat_retry_kind_sql").matched}


@scenario
async def aadmin_failed_by_sql(ctx: Any) -> Any:
    a = await ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    await ctx.client.insert({"n": 2}, kind="compat_afailed", queue=ctx.q)
    await ctx.client.insert({"n": 3}, kind="compat_afailed", queue=ctx.q, run_at=future())
    _fail_by_sql(ctx)
    retried = job(await ctx.client.retry(a.id))
    r = await ctx.client.retry_failed(kind="compat_afailed")
    _fail_by_sql(ctx, "kind = %s", "compat_afailed")
    return {"retried": retried, "retry_failed": r.matched,
            "discarded": await ctx.client.discard_failed("compat_afailed")}


@scenario
def admin_health_check(ctx: Any) -> Any:
    h = ctx.client.health_check()
    return {"type": tn(h), "fields": fields(h, ("healthy", "heartbeat_alive", "leader",
                                                "poll_loop_alive", "postgres_connected",
                                                "queues", "shutting_down")),
            "postgres_connected": h.postgres_connected, "leader": h.leader,
            "queues": h.queues}


@scenario
def admin_storage_status(ctx: Any) -> Any:
    import json
    s = ctx.client.storage_status()
    d = json.loads(s)
    return [tn(s), sorted(d), d["current_engine"], d["active_engine"], d["state"]]


@scenario
def admin_flush_admin_metadata(ctx: Any) -> Any:
    return jsonable(ctx.client.flush_admin_metadata())


@scenario
def admin_dump_job(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    import json
    d = ctx.client.dump_job(j.id)
    parsed = json.loads(d)
    return {"type": tn(d), "parsed": tn(parsed)}


@scenario
def admin_dump_job_missing(ctx: Any) -> Any:
    return raises(ctx.client.dump_job, 987654321)


@scenario
def admin_dump_run(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    return tn(ctx.client.dump_run(j.id))


@scenario
def admin_cancel_by_unique_key(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(n=5), queue=ctx.q, unique_opts={"by_args": True})
    r = ctx.client.cancel_by_unique_key("compat_ping", queue=ctx.q, args={"n": 5})
    return job(r) if r is not None else None


@scenario
def admin_cancel_by_unique_key_none(ctx: Any) -> Any:
    return jsonable(ctx.client.cancel_by_unique_key("compat_ping", queue=ctx.q, args={"n": 55}))


@scenario
def admin_list_cron_jobs(ctx: Any) -> Any:
    return tn(ctx.client.list_cron_jobs())


@scenario
def admin_delete_cron_missing(ctx: Any) -> Any:
    return ctx.client.delete_cron_job("compat_never")


# --- DLQ ---------------------------------------------------------------------------
@scenario
def dlq_empty_reads(ctx: Any) -> Any:
    c = ctx.client
    return {"depth": c.dlq_depth(queue=ctx.q), "by_queue": tn(c.dlq_depth_by_queue()),
            "list": c.list_dlq(queue=ctx.q), "get": c.get_dlq_job(987654321),
            "purge": c.purge_dlq_job(987654321),
            "retry": jsonable(c.retry_from_dlq(987654321))}


@scenario
def dlq_move_not_failed(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(), queue=ctx.q)
    try:
        return jsonable(ctx.client.move_failed_to_dlq(j.id, "why"))
    except Exception as exc:
        return raised(exc)


@scenario
def dlq_move_failed(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE queue = %s",
            ctx.q)
    e = ctx.client.move_failed_to_dlq(j.id, "manual-test")
    out = {"type": tn(e), "fields": fields(e, ("dlq_at", "job", "original_run_lease", "reason")),
           "reason": e.reason, "job": job(e.job), "depth": ctx.client.dlq_depth(queue=ctx.q)}
    got = ctx.client.get_dlq_job(j.id)
    out["get"] = tn(got)
    out["list"] = [tn(x) for x in ctx.client.list_dlq(queue=ctx.q)]
    out["by_queue"] = [list(x) for x in ctx.client.dlq_depth_by_queue() if x[0] == ctx.q]
    return out


@scenario
def dlq_retry_from_dlq(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE queue = %s",
            ctx.q)
    ctx.client.move_failed_to_dlq(j.id, "x")
    r = ctx.client.retry_from_dlq(j.id, priority=1)
    return job(r)


@scenario
def dlq_purge_job(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE queue = %s",
            ctx.q)
    ctx.client.move_failed_to_dlq(j.id, "x")
    return [ctx.client.purge_dlq_job(j.id), ctx.client.purge_dlq_job(j.id)]


@scenario
def dlq_bulk_move_and_retry(ctx: Any) -> Any:
    for i in range(2):
        ctx.client.insert(CompatPing(n=i), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE queue = %s",
            ctx.q)
    moved = ctx.client.bulk_move_failed_to_dlq(queue=ctx.q)
    back = ctx.client.bulk_retry_from_dlq(queue=ctx.q)
    return [moved, back]


@scenario
def dlq_bulk_requires_filter(ctx: Any) -> Any:
    return [raises(ctx.client.bulk_move_failed_to_dlq),
            raises(ctx.client.bulk_retry_from_dlq), raises(ctx.client.purge_dlq)]


@scenario
def dlq_purge_queue(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.sql("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE queue = %s",
            ctx.q)
    ctx.client.move_failed_to_dlq(j.id, "x")
    return ctx.client.purge_dlq(queue=ctx.q)


# --- async admin -----------------------------------------------------------------
@scenario
async def aadmin_cancel_get(ctx: Any) -> Any:
    j = await ctx.client.insert(CompatPing(), queue=ctx.q)
    c = await ctx.client.cancel(j.id)
    g = await ctx.client.get_job(j.id)
    return [job(c), job(g)]


@scenario
async def aadmin_queue_stats(ctx: Any) -> Any:
    await ctx.client.insert(CompatPing(), queue=ctx.q)
    st = [s for s in await ctx.client.queue_stats() if s.queue == ctx.q]
    return [s.available for s in st]


@scenario
async def aadmin_health(ctx: Any) -> Any:
    h = await ctx.client.health_check()
    return [tn(h), h.healthy, h.postgres_connected, h.shutting_down]


@scenario
async def aadmin_storage_status(ctx: Any) -> Any:
    import json
    return json.loads(await ctx.client.storage_status())["current_engine"]


@scenario
async def aadmin_prepare_queue_storage_call(ctx: Any) -> Any:
    return [tn(await ctx.client.prepare_queue_storage_schema(schema="awa_qs_compat")),
            json_engine(await ctx.client.storage_status())]


@scenario
async def aadmin_prepare_queue_storage_accepts_args(ctx: Any) -> Any:
    f = ctx.client.prepare_queue_storage_schema
    sig = inspect.signature(f)
    return sorted(sig.parameters)


@scenario
async def aadmin_install_queue_storage_args(ctx: Any) -> Any:
    return sorted(inspect.signature(ctx.client.install_queue_storage).parameters)


def json_engine(status: str) -> Any:
    import json
    return json.loads(status)["current_engine"]


# === callbacks (ids with no waiting job) ==========================================
CB_UUID = "0191a7a0-0000-7000-8000-0000000000ff"
for _op, _args in (("complete_external", ()), ("fail_external", ("err",)),
                   ("retry_external", ()), ("resume_external", ()),
                   ("heartbeat_callback", ()), ("resolve_callback", ())):
    def _cb_unknown(ctx: Any, _op: str = _op, _args: tuple[Any, ...] = _args) -> Any:
        return raises(getattr(ctx.client, _op), CB_UUID, *_args)
    scenario(_cb_unknown, name=f"callback_unknown_{_op}")

    def _cb_invalid(ctx: Any, _op: str = _op, _args: tuple[Any, ...] = _args) -> Any:
        return raises(getattr(ctx.client, _op), "not-a-uuid", *_args)
    scenario(_cb_invalid, name=f"callback_invalid_{_op}")


# === rows of awa.jobs: DELETE / UPDATE through the view (item 1) ===============
@scenario
def view_delete_where(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    ctx.client.insert(CompatPing(n=2), queue=ctx.q, run_at=future())
    try:
        ctx.sql("DELETE FROM awa.jobs WHERE queue = %s AND args->>'n' = '1'", ctx.q)
    except Exception as exc:
        return raised(exc)
    return len(ctx.client.list_jobs(queue=ctx.q))


@scenario
def view_delete_scheduled(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(n=2), queue=ctx.q, run_at=future())
    try:
        ctx.sql("DELETE FROM awa.jobs WHERE queue = %s", ctx.q)
    except Exception as exc:
        return raised(exc)
    return len(ctx.client.list_jobs(queue=ctx.q))


@scenario
def view_update_priority(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    try:
        ctx.sql("UPDATE awa.jobs SET priority = 1 WHERE id = %s", j.id)
    except Exception as exc:
        return raised(exc)
    return ctx.client.get_job(j.id).priority


@scenario
def view_update_state_cancel(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    try:
        ctx.sql("UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() WHERE id = %s",
                j.id)
    except Exception as exc:
        return raised(exc)
    return str(ctx.client.get_job(j.id).state)


@scenario
def view_update_run_at_future(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    try:
        ctx.sql("UPDATE awa.jobs SET state = 'scheduled', run_at = now() + interval '1 hour' "
                "WHERE id = %s", j.id)
    except Exception as exc:
        return raised(exc)
    return str(ctx.client.get_job(j.id).state)


@scenario
def view_update_scheduled_to_available(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q, run_at=future())
    try:
        ctx.sql("UPDATE awa.jobs SET state = 'available', run_at = now() WHERE id = %s", j.id)
    except Exception as exc:
        return raised(exc)
    return str(ctx.client.get_job(j.id).state)


@scenario
def view_update_metadata(ctx: Any) -> Any:
    j = ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    try:
        ctx.sql("UPDATE awa.jobs SET metadata = metadata || '{\"k\": 1}' WHERE id = %s", j.id)
    except Exception as exc:
        return raised(exc)
    return ctx.client.get_job(j.id).metadata


@scenario
def view_delete_returning(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    try:
        rows = ctx.sql("DELETE FROM awa.jobs WHERE queue = %s RETURNING kind", ctx.q)
    except Exception as exc:
        return raised(exc)
    return rows


@scenario
async def view_delete_via_transaction(ctx: Any) -> Any:
    await ctx.client.insert(CompatPing(n=1), queue=ctx.q)
    tx = await ctx.client.transaction()
    try:
        n = await tx.execute("DELETE FROM awa.jobs WHERE queue = $1", ctx.q)
        await tx.commit()
    except Exception as exc:
        return raised(exc)
    return [n, len(await ctx.client.list_jobs(queue=ctx.q))]


@scenario
def view_columns(ctx: Any) -> Any:
    rows = ctx.sql("SELECT column_name FROM information_schema.columns "
                   "WHERE table_schema = 'awa' AND table_name = 'jobs'")
    return sorted(r["column_name"] for r in rows)


# === bridge (item 7) ===============================================================
def _bridge_row(row: Any) -> Any:
    return {"type": tn(row), "keys": sorted(row) if isinstance(row, dict) else None,
            "types": {k: tn(v) for k, v in row.items()} if isinstance(row, dict) else None,
            "state": str(row.get("state")) if isinstance(row, dict) else None}


@scenario
def bridge_psycopg_sync(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job_sync
    with psycopg.connect(ctx.url) as conn:
        row = insert_job_sync(conn, CompatPing(n=1), queue=ctx.q)
    return _bridge_row(row)


@scenario
def bridge_psycopg_sync_rollback(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job_sync
    with psycopg.connect(ctx.url) as conn:
        insert_job_sync(conn, CompatPing(n=1), queue=ctx.q)
        conn.rollback()
    return len(ctx.client.list_jobs(queue=ctx.q))


@scenario
def bridge_psycopg_sync_past_run_at(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job_sync
    with psycopg.connect(ctx.url) as conn:
        row = insert_job_sync(conn, CompatPing(n=1), queue=ctx.q, run_at=past())
    return str(row["state"])


@scenario
def bridge_psycopg_sync_future_run_at(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job_sync
    with psycopg.connect(ctx.url) as conn:
        row = insert_job_sync(conn, CompatPing(n=1), queue=ctx.q, run_at=future())
    return str(row["state"])


@scenario
def bridge_psycopg_sync_options(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job_sync
    with psycopg.connect(ctx.url) as conn:
        row = insert_job_sync(conn, {"a": 1}, kind="compat_bridge", queue=ctx.q, priority=1,
                              max_attempts=3, tags=["t"], metadata={"m": 1})
    return {k: row[k] for k in ("kind", "priority", "max_attempts", "tags", "metadata", "args")}


@scenario
def bridge_unsupported_object(ctx: Any) -> Any:
    from awa.bridge import insert_job_sync
    return raises(insert_job_sync, object(), CompatPing(), queue=ctx.q)


@scenario
async def bridge_unsupported_object_async(ctx: Any) -> Any:
    from awa.bridge import insert_job
    return await araises(insert_job(object(), CompatPing(), queue=ctx.q))


@scenario
def bridge_bad_priority(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job_sync
    with psycopg.connect(ctx.url) as conn:
        return raises(insert_job_sync, conn, CompatPing(), queue=ctx.q, priority=7)


@scenario
async def bridge_psycopg_async(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job
    async with await psycopg.AsyncConnection.connect(ctx.url) as conn:
        row = await insert_job(conn, CompatPing(n=2), queue=ctx.q)
    return _bridge_row(row)


@scenario
async def bridge_psycopg_async_rollback(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job
    async with await psycopg.AsyncConnection.connect(ctx.url) as conn:
        await insert_job(conn, CompatPing(n=2), queue=ctx.q)
        await conn.rollback()
    return len(await ctx.client.list_jobs(queue=ctx.q))


@scenario
def bridge_sync_with_async_conn(ctx: Any) -> Any:
    from awa.bridge import insert_job_sync

    class Fake:
        pass
    return raises(insert_job_sync, Fake(), CompatPing(), queue=ctx.q)


def _bridge_try(ctx: Any, args: Any, **kwargs: Any) -> Any:
    """insert_job_sync on a fresh psycopg connection (committed): the row's salient values,
    or what it raised and its message."""
    import psycopg

    from awa.bridge import insert_job_sync
    with psycopg.connect(ctx.url) as conn:
        try:
            row = insert_job_sync(conn, args, **{"queue": ctx.q, **kwargs})
        except Exception as exc:
            return [raised(exc), str(exc)]
    return {k: row[k] for k in ("kind", "args", "state", "priority", "tags", "metadata")}


@scenario
def bridge_edges(ctx: Any) -> Any:
    return {
        "dict_kind_key": _bridge_try(ctx, {"kind": "compat_bk", "x": 1}),
        "dict_no_kind": _bridge_try(ctx, {"x": 1}),
        "model": _bridge_try(ctx, ModelLike("b@c", 1), kind="compat_bmodel"),
        "list_args": _bridge_try(ctx, [1, 2], kind="compat_blist"),
        "null_byte": _bridge_try(ctx, {"s": "a\x00b"}, kind="compat_bnull"),
        "null_byte_key": _bridge_try(ctx, {"a\x00": 1}, kind="compat_bnull"),
        "null_byte_meta": _bridge_try(ctx, {"s": 1}, kind="compat_bnull",
                                      metadata={"m": "x\x00"}),
        "run_at_iso": _bridge_try(ctx, CompatPing(), run_at="2000-01-01T00:00:00"),
        "run_at_int": _bridge_try(ctx, CompatPing(), run_at=5),
        "run_at_garbage": _bridge_try(ctx, CompatPing(), run_at="soon"),
        "ordering_key_int": _bridge_try(ctx, CompatPing(), ordering_key=5),
        "tags_none": _bridge_try(ctx, CompatPing(), tags=None),
        "datetime_arg": _bridge_try(ctx, {"when": dt.datetime(2026, 1, 2, 3, 4, 5)},
                                    kind="compat_bdt"),
    }


@scenario
async def bridge_edges_async(ctx: Any) -> Any:
    import psycopg

    from awa.bridge import insert_job
    out: dict[str, Any] = {}
    async with await psycopg.AsyncConnection.connect(ctx.url) as conn:
        for label, args, kw in (("no_kind", {"x": 1}, {}),
                                ("null_byte", {"s": "\x00"}, {"kind": "compat_ban"}),
                                ("run_at_int", CompatPing(), {"run_at": 5})):
            try:
                row = await insert_job(conn, args, queue=ctx.q, **kw)
                out[label] = {"kind": row["kind"], "state": str(row["state"])}
            except Exception as exc:
                out[label] = [raised(exc), str(exc)]
                await conn.rollback()
        await conn.commit()
    return out


# === PartitionedQueue (item 4) ====================================================
def _pq_attempt(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` as JSON, or what it raised (args passed through, not bound in a lambda)."""
    try:
        return jsonable(fn(*args))
    except Exception as exc:
        return raised(exc)


@scenario
def pq_basic(ctx: Any) -> Any:
    pq = awa.PartitionedQueue("orders", 4)
    return {"logical": pq.logical_queue, "partitions": pq.partitions,
            "physical": pq.physical_queues, "len": len(pq), "repr": repr(pq).split("(")[0]}


@scenario
def pq_route_by_key(ctx: Any) -> Any:
    pq = awa.PartitionedQueue("orders", 8)
    return [pq.route_by_key(k) for k in ("a", "b", "customer-1", "customer-2", "", "ü", "x" * 50)]


@scenario
def pq_queue_for_key(ctx: Any) -> Any:
    pq = awa.PartitionedQueue("orders", 3)
    return [_pq_attempt(pq.queue_for_key, k) for k in ("a", "b", 1, b"bytes")]


@scenario
def pq_index(ctx: Any) -> Any:
    pq = awa.PartitionedQueue("orders", 3)
    return [_pq_attempt(pq.route_by_index, i) for i in (0, 1, 2, 3, 7, -1)] + [
        _pq_attempt(pq.queue_for_index, i) for i in (0, 2, 3, -1)]


@scenario
def pq_invalid(ctx: Any) -> Any:
    return [_pq_attempt(lambda: awa.PartitionedQueue("orders", 0)),
            _pq_attempt(lambda: awa.PartitionedQueue("", 2)),
            _pq_attempt(lambda: awa.PartitionedQueue("orders", -1)),
            _pq_attempt(lambda: awa.PartitionedQueue("orders", "2")),  # type: ignore[arg-type]  # deliberate: checks the error
            _pq_attempt(lambda: awa.PartitionedQueue("orders", 1))]


@scenario
def pq_from_physical(ctx: Any) -> Any:
    pq = awa.PartitionedQueue.from_physical_queues("orders", ["o_a", "o_b"])
    return {"physical": pq.physical_queues, "partitions": pq.partitions,
            "key": pq.route_by_key("k1"),
            "dup": _pq_attempt(lambda: awa.PartitionedQueue.from_physical_queues(
                "orders", ["x", "x"])),
            "empty": _pq_attempt(lambda: awa.PartitionedQueue.from_physical_queues(
                "orders", []))}


@scenario
def pq_queue_configs(ctx: Any) -> Any:
    pq = awa.PartitionedQueue("orders", 2)
    return [_pq_attempt(lambda: pq.queue_configs()),
            _pq_attempt(lambda: pq.queue_configs(5)),
            _pq_attempt(lambda: pq.queue_configs(5, min_workers_per_partition=1, weight=3,
                                                 rate_limit_per_partition=10.0,
                                                 claimers=2, claim_batch_size=4)),
            _pq_attempt(lambda: pq.queue_configs(0))]


# === configuration and workers (item 8) ============================================
async def _start_attempt(ctx: Any, queues: Any, **kwargs: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    try:
        await c.start(queues, **kwargs)
    except Exception as exc:
        await c.close()
        return raised(exc)
    await c.shutdown(500)
    await c.close()
    return "started"


def _q(ctx: Any, **extra: Any) -> dict[str, Any]:
    return {"name": ctx.q, **extra}


START_CASES: dict[str, Callable[[Any], Any]] = {
    "tuple": lambda ctx: [(ctx.q, 2)],
    "dict_max": lambda ctx: [_q(ctx, max_workers=2)],
    "dict_min_max": lambda ctx: [_q(ctx, min_workers=1, max_workers=2)],
    "dict_min_gt_max": lambda ctx: [_q(ctx, min_workers=3, max_workers=2)],
    "dict_zero_max": lambda ctx: [_q(ctx, max_workers=0)],
    "dict_negative": lambda ctx: [_q(ctx, max_workers=-1)],
    "dict_weight": lambda ctx: [_q(ctx, max_workers=2, weight=2)],
    "dict_unknown_key": lambda ctx: [_q(ctx, max_workers=2, bogus=1)],
    "dict_no_name": lambda ctx: [{"max_workers": 2}],
    "dict_rate_limit": lambda ctx: [_q(ctx, max_workers=2, rate_limit=5.0)],
    "dict_rate_limit_burst": lambda ctx: [_q(ctx, max_workers=2,
                                             rate_limit={"max_rate": 5.0, "burst": 2})],
    "empty_list": lambda ctx: [],
    "tuple_zero": lambda ctx: [(ctx.q, 0)],
    "string": lambda ctx: ctx.q,
    "mixed": lambda ctx: [(ctx.q, 2), _q(ctx, max_workers=1)],
    "duplicate": lambda ctx: [(ctx.q, 2), (ctx.q, 3)],
    "empty_name": lambda ctx: [("", 2)],
    "deadline": lambda ctx: [_q(ctx, max_workers=2, deadline_duration_ms=1000)],
    "aging": lambda ctx: [_q(ctx, max_workers=2, priority_aging_interval_ms=1000)],
}
for _case, _queues in START_CASES.items():
    async def _start(ctx: Any, _queues: Callable[[Any], Any] = _queues) -> Any:
        return await _start_attempt(ctx, _queues(ctx))
    scenario(_start, name=f"start_{_case}")


async def _start_message(ctx: Any, queues: Any, queue_names: tuple[str, ...] = (),
                         **kwargs: Any) -> Any:
    """start() with handlers on ``queue_names`` (default ctx.q): "started", or what it
    raised and its message (users' tests assert on 0.6.9's wording)."""
    c = awa.AsyncClient(ctx.url)
    for i, queue in enumerate(queue_names or (ctx.q,)):
        @c.task(CompatPing if i == 0 else dict, kind=f"compat_msg_{i}", queue=queue)
        async def handle(job: Any) -> None:
            return None
    try:
        await c.start(queues, **kwargs)
    except Exception as exc:
        await c.close()
        return [raised(exc), str(exc)]
    await c.shutdown(500)
    await c.close()
    return "started"


START_MESSAGE_CASES: dict[str, Callable[[Any], tuple[Any, dict[str, Any]]]] = {
    "tuple_global": lambda ctx: ([(ctx.q, 2)], {"global_max_workers": 4}),
    "hard_max_and_min": lambda ctx: ([_q(ctx, max_workers=2, min_workers=1)], {}),
    "weighted_max_and_min": lambda ctx: ([_q(ctx, max_workers=2, min_workers=1)],
                                         {"global_max_workers": 4}),
    "weighted_max_only": lambda ctx: ([_q(ctx, max_workers=2)], {"global_max_workers": 4}),
    "weighted_weight0": lambda ctx: ([_q(ctx, min_workers=1, weight=0)],
                                     {"global_max_workers": 4}),
    "weighted_weight_negative": lambda ctx: ([_q(ctx, min_workers=1, weight=-1)],
                                             {"global_max_workers": 4}),
    "weighted_weight_str": lambda ctx: ([_q(ctx, min_workers=1, weight="2")],
                                        {"global_max_workers": 4}),
    "hard_weight0": lambda ctx: ([_q(ctx, max_workers=2, weight=0)], {}),
    "hard_weight2": lambda ctx: ([_q(ctx, max_workers=2, weight=2)], {}),
    "hard_min_only": lambda ctx: ([_q(ctx, min_workers=1)], {}),
    "min_over_global": lambda ctx: ([_q(ctx, min_workers=5)], {"global_max_workers": 4}),
    "global_negative": lambda ctx: ([_q(ctx, min_workers=0)], {"global_max_workers": -1}),
    "global_str": lambda ctx: ([_q(ctx, min_workers=1)], {"global_max_workers": "4"}),
    "min_negative": lambda ctx: ([_q(ctx, min_workers=-1)], {"global_max_workers": 4}),
    "rate_limit_str": lambda ctx: ([_q(ctx, max_workers=2, rate_limit="fast")], {}),
    "rate_limit_bool": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=True)], {}),
    "rate_limit_triple": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=(5.0, 2, 1))], {}),
    "rate_limit_str_rate": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=("a", 2))], {}),
    "rate_limit_float_burst": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=(5.0, 2.5))],
                                           {}),
    "rate_limit_negative_burst": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=(5.0, -1))],
                                              {}),
    "rate_limit_zero_rate": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=(0.0, 2))], {}),
    "rate_limit_negative_rate": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=(-1.0, 2))],
                                             {}),
    "rate_limit_int_tuple": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=(5, 2))], {}),
    "rate_limit_zero_burst": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=(5.0, 0))], {}),
    "rate_limit_none": lambda ctx: ([_q(ctx, max_workers=2, rate_limit=None)], {}),
    "duplicate_dict": lambda ctx: ([_q(ctx, max_workers=2), _q(ctx, max_workers=3)], {}),
    "duplicate_tuple": lambda ctx: ([(ctx.q, 2), (ctx.q, 3)], {}),
    "aging_zero": lambda ctx: ([_q(ctx, max_workers=2, priority_aging_interval_ms=0)], {}),
    "aging_negative": lambda ctx: ([_q(ctx, max_workers=2, priority_aging_interval_ms=-1)], {}),
    "aging_float": lambda ctx: ([_q(ctx, max_workers=2, priority_aging_interval_ms=1.5)], {}),
    "aging_too_big": lambda ctx: ([_q(ctx, max_workers=2, priority_aging_interval_ms=2 ** 64)],
                                  {}),
    "max_negative": lambda ctx: ([_q(ctx, max_workers=-1)], {}),
    "max_str": lambda ctx: ([_q(ctx, max_workers="2")], {}),
    "max_float": lambda ctx: ([_q(ctx, max_workers=2.0)], {}),
    "tuple_negative": lambda ctx: ([(ctx.q, -1)], {}),
    "tuple_one": lambda ctx: ([(ctx.q,)], {}),
    "tuple_three": lambda ctx: ([(ctx.q, 1, 2)], {}),
    "tuple_name_int": lambda ctx: ([(5, 1)], {}),
    "item_int": lambda ctx: ([5], {}),
    "dict_no_name": lambda ctx: ([{"max_workers": 2}], {}),
    "dict_name_int": lambda ctx: ([{"name": 5, "max_workers": 1}], {}),
    "queues_string": lambda ctx: (ctx.q, {}),
    "queues_empty": lambda ctx: ([], {}),
    "claimers_zero": lambda ctx: ([_q(ctx, max_workers=2, claimers=0)], {}),
    "claim_batch_zero": lambda ctx: ([_q(ctx, max_workers=2, claim_batch_size=0)], {}),
    "none_weighted": lambda ctx: (None, {"global_max_workers": 4}),
    "descriptor_retention_zero": lambda ctx: ([(ctx.q, 1)], {"descriptor_retention_days": 0}),
    "bool_max": lambda ctx: ([_q(ctx, max_workers=True)], {}),
    "global_zero": lambda ctx: ([_q(ctx, min_workers=0)], {"global_max_workers": 0}),
    "poll_zero": lambda ctx: ([(ctx.q, 1)], {"poll_interval_ms": 0}),
    "deadline_zero": lambda ctx: ([_q(ctx, max_workers=1, deadline_duration_ms=0)], {}),
}
for _case, _make in START_MESSAGE_CASES.items():
    async def _start_msg(ctx: Any, _make: Callable[[Any], Any] = _make) -> Any:
        queues, kwargs = _make(ctx)
        return await _start_message(ctx, queues, **kwargs)
    scenario(_start_msg, name=f"startmsg_{_case}")


@scenario
async def startmsg_partitioned_duplicate(ctx: Any) -> Any:
    pq = awa.PartitionedQueue(ctx.q, 2)
    return await _start_message(ctx, pq.queue_configs(2) + pq.queue_configs(2),
                                tuple(pq.physical_queues))


@scenario
async def startmsg_partitioned_plus_tuple(ctx: Any) -> Any:
    pq = awa.PartitionedQueue(ctx.q, 2)
    return await _start_message(ctx, pq.queue_configs(2) + [(pq.physical_queues[0], 1)],
                                tuple(pq.physical_queues))


@scenario
async def startmsg_partitioned(ctx: Any) -> Any:
    pq = awa.PartitionedQueue(ctx.q, 2)
    return [pq.physical_queues, await _start_message(ctx, pq.queue_configs(2),
                                                     tuple(pq.physical_queues)),
            await _start_message(ctx, pq.queue_configs(min_workers_per_partition=1),
                                 tuple(pq.physical_queues), global_max_workers=4)]


@scenario
async def start_global_max_with_min(ctx: Any) -> Any:
    return await _start_attempt(ctx, [_q(ctx, min_workers=2, max_workers=4)],
                                global_max_workers=1)


@scenario
async def start_global_max(ctx: Any) -> Any:
    return await _start_attempt(ctx, [_q(ctx, max_workers=4)], global_max_workers=2)


@scenario
async def start_queue_storage_kwargs(ctx: Any) -> Any:
    return await _start_attempt(ctx, [(ctx.q, 1)], queue_storage_queue_slot_count=16,
                                storage_transition_role="auto")


@scenario
async def start_bad_transition_role(ctx: Any) -> Any:
    return await _start_attempt(ctx, [(ctx.q, 1)], storage_transition_role="nope")


@scenario
async def start_unknown_kwarg(ctx: Any) -> Any:
    return await _start_attempt(ctx, [(ctx.q, 1)], not_an_option=1)


@scenario
async def start_retention(ctx: Any) -> Any:
    return await _start_attempt(ctx, [(ctx.q, 1)], completed_retention_hours=1.0,
                                failed_retention_hours=2.0, cleanup_batch_size=10)


@scenario
async def start_no_handlers(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)
    try:
        await c.start([(ctx.q, 1)])
    except Exception as exc:
        await c.close()
        return raised(exc)
    await c.shutdown(500)
    await c.close()
    return "started"


@scenario
async def start_undeclared_descriptor(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    c.queue_descriptor("compat_not_run", display_name="x")
    try:
        await c.start([(ctx.q, 1)])
    except Exception as exc:
        await c.close()
        return raised(exc)
    await c.shutdown(500)
    await c.close()
    return "started"


@scenario
async def descriptor_after_start(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    await c.start([(ctx.q, 1)])
    try:
        return [raises_msg(c.queue_descriptor, ctx.q, display_name="late"),
                raises_msg(c.job_kind_descriptor, "compat_late", display_name="late")]
    finally:
        await c.shutdown(500)
        await c.close()


DESCRIPTOR_COLUMNS = ("display_name", "description", "owner", "docs_url", "tags", "extra",
                      "descriptor_hash")


def _descriptor_rows(ctx: Any, queue: str, kind: str) -> dict[str, Any]:
    """The catalogue rows of one queue and one kind, values as stored, and their ages."""
    out: dict[str, Any] = {}
    for table, key, name in (("queue_descriptors", "queue", queue),
                             ("job_kind_descriptors", "kind", kind)):
        rows = ctx.sql(f"SELECT *, last_seen_at AS seen FROM awa.{table} WHERE {key} = %s",
                       name)
        out[table] = [{c: r.get(c) for c in DESCRIPTOR_COLUMNS} for r in rows]
        out[table + "_seen"] = [tn(r["seen"]) for r in rows]
    return out


async def _start_described(ctx: Any, kind: str, **queue_fields: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    c.queue_descriptor(ctx.q, **queue_fields)
    c.job_kind_descriptor(kind, display_name="Kind " + kind, description="what it does",
                          owner="team-k", docs_url="https://k.example/doc", tags=["k1", "k2"],
                          extra={"sla": {"p99_ms": 250}, "n": 1.5, "flag": True})
    await c.start([(ctx.q, 1)])
    return c


@scenario
async def descriptor_synced_at_start(ctx: Any) -> Any:
    """Declared descriptors are in the catalogue once start() returned (values, hash)."""
    kind = "compat_desc_kind"
    c = await _start_described(ctx, kind, display_name="Queue Q", description="the queue",
                               owner="team-q", docs_url="https://q.example", tags=["b", "a"],
                               extra={"tier": 1, "z": None, "list": [3, 1]})
    try:
        return _descriptor_rows(ctx, ctx.q, kind)
    finally:
        await c.shutdown(500)
        await c.close()


@scenario
async def descriptor_hash_minimal(ctx: Any) -> Any:
    """The hash of a descriptor with nothing but its name, and with only some fields."""
    kind = "compat_desc_min"
    c = await _start_described(ctx, kind)
    try:
        bare = _descriptor_rows(ctx, ctx.q, kind)["queue_descriptors"]
    finally:
        await c.shutdown(500)
        await c.close()
    c = await _start_described(ctx, kind, description="only this", tags=[])
    try:
        some = _descriptor_rows(ctx, ctx.q, kind)["queue_descriptors"]
    finally:
        await c.shutdown(500)
        await c.close()
    return {"bare": bare, "some": some}


@scenario
async def descriptor_unicode_hash(ctx: Any) -> Any:
    kind = "compat_desc_uni"
    c = await _start_described(ctx, kind, display_name="Zürich ✓", description="a\nb \"q\"",
                               extra={"ü": "é", "emoji": "🚀", "big": 12345678901234,
                                      "neg": -0.5, "nested": {"b": 1, "a": [True, None]}})
    try:
        return _descriptor_rows(ctx, ctx.q, kind)["queue_descriptors"]
    finally:
        await c.shutdown(500)
        await c.close()


def _descriptor_times(ctx: Any, queue: str) -> dict[str, Any]:
    r = ctx.sql("SELECT display_name, created_at, updated_at, last_seen_at, sync_interval_ms "
                "FROM awa.queue_descriptors WHERE queue = %s", queue)
    return r[0] if r else {}


@scenario
async def descriptor_last_seen_moves(ctx: Any) -> Any:
    """Restarts refresh last_seen_at; updated_at moves only when the declaration changed."""
    kind = "compat_desc_seen"
    seen = []
    for name in ("first", "first", "second"):
        c = await _start_described(ctx, kind, display_name=name)
        seen.append(_descriptor_times(ctx, ctx.q))
        await c.shutdown(500)
        await c.close()
        await asyncio.sleep(0.3)

    def moved(col: str, i: int) -> Any:
        return seen[i + 1].get(col) != seen[i].get(col)
    return {"display_name": [s.get("display_name") for s in seen],
            "sync_interval_ms": [s.get("sync_interval_ms") for s in seen],
            "last_seen_moved": [moved("last_seen_at", 0), moved("last_seen_at", 1)],
            "updated_moved": [moved("updated_at", 0), moved("updated_at", 1)],
            "created_moved": [moved("created_at", 0), moved("created_at", 1)]}


@scenario
async def descriptor_bare_for_every_queue_and_kind(ctx: Any) -> Any:
    """start() with no declaration at all still catalogues its queues and kinds."""
    c = awa.AsyncClient(ctx.url)

    @dataclasses.dataclass
    class CompatBareKind:
        n: int = 0

    @c.task(CompatBareKind, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    await c.start([(ctx.q, 1)])
    try:
        return _descriptor_rows(ctx, ctx.q, "compat_bare_kind")
    finally:
        await c.shutdown(500)
        await c.close()


@scenario
async def descriptor_runtime_hashes(ctx: Any) -> Any:
    """The runtime's row in runtime_instances names the hashes it declared."""
    kind = "compat_desc_rt"
    c = await _start_described(ctx, kind, display_name="rt")
    try:
        rows = _descriptor_rows(ctx, ctx.q, kind)
        want = {"queues": {ctx.q: rows["queue_descriptors"][0]["descriptor_hash"]},
                "kinds": {kind: rows["job_kind_descriptors"][0]["descriptor_hash"]}}
        found = None
        for _ in range(40):
            # Either layout: 0.6.9 has two columns, ours one (runtime_instances_columns).
            got = [{"queues": r.get("queue_descriptor_hashes"),
                    "kinds": r.get("job_kind_descriptor_hashes")}
                   if "queue_descriptor_hashes" in r else r.get("descriptor_hashes")
                   for r in (x["r"] for x in ctx.sql(
                       "SELECT to_jsonb(i) AS r FROM awa.runtime_instances i"))]
            found = [g for g in got if isinstance(g, dict)
                     and (g.get("queues") or {}).get(ctx.q) is not None]
            if found:
                break
            await asyncio.sleep(0.1)
        return {"matches": bool(found) and all(
            (f.get("queues") or {}).get(ctx.q) == want["queues"][ctx.q]
            and (f.get("kinds") or {}).get(kind) == want["kinds"][kind] for f in found or ()),
            "shape": sorted(found[0]) if found else None}
    finally:
        await c.shutdown(500)
        await c.close()


@scenario
def runtime_instances_columns(ctx: Any) -> Any:
    return sorted(r["column_name"] for r in ctx.sql(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = 'awa' AND table_name = 'runtime_instances'"))


@scenario
async def descriptor_kind_only(ctx: Any) -> Any:
    """A kind descriptor for a kind with no handler in this client."""
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    c.job_kind_descriptor("compat_desc_nohandler", display_name="x")
    try:
        await c.start([(ctx.q, 1)])
    except Exception as exc:
        await c.close()
        return raised(exc)
    try:
        return _descriptor_rows(ctx, ctx.q, "compat_desc_nohandler")["job_kind_descriptors"]
    finally:
        await c.shutdown(500)
        await c.close()


@scenario
async def descriptor_bad_values(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)
    out = [raises_msg(c.queue_descriptor, ctx.q, display_name=1),
           raises_msg(c.queue_descriptor, ctx.q, tags=["a", 1]),
           raises_msg(c.queue_descriptor, ctx.q, tags="ab"),
           raises_msg(c.queue_descriptor, ctx.q, extra={"d": dt.datetime(2026, 1, 1)}),
           raises_msg(c.queue_descriptor, "", display_name="x"),
           raises_msg(c.job_kind_descriptor, "", display_name="x"),
           raises_msg(c.queue_descriptor, ctx.q, extra=[1]),
           raises_msg(c.queue_descriptor, ctx.q, display_name="twice"),
           raises_msg(c.queue_descriptor, ctx.q, display_name="twice")]
    await c.close()
    return out


@scenario
async def descriptor_limits_at_start(ctx: Any) -> Any:
    """What the catalogue refuses when start() publishes it (0.6.9: its CHECK constraints)."""
    out: list[Any] = []
    decls: list[dict[str, Any]] = [
        {"queue": {"display_name": "x" * 201}}, {"kind": {"description": "x" * 2001}},
        {"queue": {"tags": [str(i) for i in range(21)]}}, {"kind_name": "k" * 201},
        {"kind_name": ""}, {"queue": {"docs_url": "u" * 2049, "owner": "o" * 201}},
        {"queue": {"display_name": "x" * 200, "tags": ["t"] * 20}}]
    for decl in decls:
        c = awa.AsyncClient(ctx.url)

        @c.task(CompatPing, queue=ctx.q)
        async def handle(job: Any) -> None:
            return None
        if "queue" in decl:
            c.queue_descriptor(ctx.q, **decl["queue"])
        if "kind" in decl:
            c.job_kind_descriptor("compat_limits", **decl["kind"])
        if "kind_name" in decl:
            c.job_kind_descriptor(decl["kind_name"])
        try:
            await c.start([(ctx.q, 1)])
            out.append("started")
            await c.shutdown(500)
        except Exception as exc:
            out.append([raised(exc), str(exc)])
        await c.close()
    return out


@scenario
async def descriptor_undeclared_message(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    c.queue_descriptor("compat_not_run", display_name="x")
    try:
        await c.start([(ctx.q, 1)])
    except Exception as exc:
        await c.close()
        return [raised(exc), str(exc)]
    await c.shutdown(500)
    await c.close()
    return "started"


@scenario
async def descriptor_columns(ctx: Any) -> Any:
    rows = ctx.sql("SELECT table_name, column_name FROM information_schema.columns "
                   "WHERE table_schema = 'awa' AND table_name IN "
                   "('queue_descriptors', 'job_kind_descriptors')")
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["table_name"], []).append(r["column_name"])
    return {k: sorted(v) for k, v in sorted(out.items())}


@scenario
async def worker_deprecation(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @c.worker(CompatPing, queue=ctx.q)
        async def handle(job: Any) -> None:
            return None
    await c.close()
    return sorted({w.category.__name__ for w in caught})


@scenario
async def task_no_warning(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @c.task(CompatPing, queue=ctx.q)
        async def handle(job: Any) -> None:
            return None
    await c.close()
    return [w.category.__name__ for w in caught if issubclass(w.category, DeprecationWarning)]


@scenario
async def task_returns_handler(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    async def handle(job: Any) -> None:
        return None
    got = c.task(CompatPing, queue=ctx.q)(handle)
    await c.close()
    return got is handle


@scenario
async def task_sync_handler(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    def handle(job: Any) -> None:
        return None
    try:
        c.task(CompatPing, queue=ctx.q)(handle)
        return "ok"
    except Exception as exc:
        return raised(exc)
    finally:
        await c.close()


@scenario
def telemetry_idempotent(ctx: Any) -> Any:
    a = awa.init_telemetry("http://127.0.0.1:1", "compat-test", 60000)
    b = awa.init_telemetry("http://127.0.0.1:1", "compat-test", 60000)
    awa.shutdown_telemetry()
    return [tn(a), tn(b), a == b]


# === running jobs (items 2, 5, 6) ====================================================
async def _run_one(ctx: Any, handler: Callable[..., Any], args: Any = None,
                   insert: dict[str, Any] | None = None, wait_states: tuple[str, ...] = (
                       "completed", "failed", "cancelled", "retryable", "waiting_external",
                       "scheduled"), timeout: float = 15.0) -> Any:
    """Start a worker for ctx.q, insert one job, wait until it leaves running, shut down."""
    c = awa.AsyncClient(ctx.url)
    seen: dict[str, Any] = {}

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> Any:
        try:
            return await handler(job, seen)
        finally:
            seen["_done"] = True
    j = await ctx.client.insert(args or CompatPing(), queue=ctx.q, **(insert or {}))
    await c.start([(ctx.q, 1)], poll_interval_ms=50, heartbeat_interval_ms=100)
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            got = await ctx.client.get_job(j.id)
            if str(got.state) in wait_states and seen.get("_done"):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    finally:
        await c.shutdown(1000)
        await c.close()
    seen.pop("_done", None)
    return seen, await ctx.client.get_job(j.id)


@scenario
async def run_handler_job_types(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> None:
        seen.update(types={f: tn(getattr(job, f)) for f in JOB_FIELDS},
                    args=tn(job.args), state=str(job.state), attempt=job.attempt,
                    cancelled=job.is_cancelled())
    seen, final = await _run_one(ctx, h)
    return {"seen": seen, "final": job(final)}


@scenario
async def run_completed_progress_cleared(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> None:
        job.set_progress(50, "half")
        job.update_metadata({"k": 1})
        seen["progress"] = job.progress
    seen, final = await _run_one(ctx, h)
    return {"seen": seen, "final_progress": final.progress, "metadata": final.metadata,
            "state": str(final.state)}


@scenario
async def run_retry_keeps_progress(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        job.set_progress(30, "step")
        job.update_metadata({"cursor": 7})
        raise RuntimeError("again")
    seen, final = await _run_one(ctx, h)
    return {"state": str(final.state), "progress": final.progress, "errors": len(final.errors),
            "error_keys": sorted(final.errors[0]) if final.errors else None}


@scenario
async def run_update_metadata_not_dict(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> None:
        seen["list"] = raises(job.update_metadata, [1, 2])
        seen["str"] = raises(job.update_metadata, "x")
    seen, final = await _run_one(ctx, h)
    return {"seen": seen, "state": str(final.state)}


@scenario
async def run_update_metadata_shallow(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        job.update_metadata({"a": {"x": 1}, "b": 1})
        job.update_metadata({"a": {"y": 2}})
        await job.flush_progress()
        raise RuntimeError("keep it")
    seen, final = await _run_one(ctx, h)
    return final.progress


@scenario
async def run_set_progress_bounds(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> None:
        seen["neg"] = raises(job.set_progress, -1)
        seen["big"] = raises(job.set_progress, 101)
        seen["float"] = raises(job.set_progress, 12.5)
        seen["str"] = raises(job.set_progress, "x")
    seen, final = await _run_one(ctx, h)
    return seen


@scenario
async def run_flush_progress_sync(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        job.set_progress(10, "m")
        seen["sync"] = raises(job.flush_progress_sync)
        row = ctx.sql("SELECT progress FROM awa.jobs WHERE id = %s", job.id)
        seen["stored"] = row[0]["progress"] if row else None
        raise awa.TerminalError("stop")
    seen, final = await _run_one(ctx, h)
    return {"seen": seen, "state": str(final.state), "progress": final.progress}


@scenario
async def run_terminal_error(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        raise awa.TerminalError("fatal")
    seen, final = await _run_one(ctx, h)
    return job(final)


@scenario
async def run_cancel_result(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        return awa.Cancel("nope")
    seen, final = await _run_one(ctx, h)
    return job(final)


@scenario
async def run_retry_after(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        return awa.RetryAfter(60)
    seen, final = await _run_one(ctx, h)
    return job(final)


@scenario
async def run_snooze(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        return awa.Snooze(60)
    seen, final = await _run_one(ctx, h)
    return job(final)


@scenario
async def run_max_attempts_one_fails(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        raise ValueError("x")
    seen, final = await _run_one(ctx, h, insert={"max_attempts": 1})
    return job(final)


@scenario
async def run_return_value_ignored(ctx: Any) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        return {"some": "value"}
    seen, final = await _run_one(ctx, h)
    return str(final.state)


@scenario
async def run_completed_then_failed_by_sql(ctx: Any) -> Any:
    """A job a worker completed, then set failed through awa.jobs: the admin calls see it."""
    async def ok(job: Any, seen: dict[str, Any]) -> None:
        return None
    _, done = await _run_one(ctx, ok)
    _fail_by_sql(ctx, "id = %s", done.id)
    state = str((await ctx.client.get_job(done.id)).state)
    retried = job(await ctx.client.retry(done.id))
    _fail_by_sql(ctx, "id = %s", done.id)
    r = await ctx.client.retry_failed(queue=ctx.q)
    return {"state": state, "retried": retried, "retry_failed": r.matched}


@scenario
async def run_failed_terminal_then_admin(ctx: Any) -> Any:
    """A job failed by its handler (TerminalError): retry_failed / discard_failed count it."""
    async def fail(job: Any, seen: dict[str, Any]) -> None:
        raise awa.TerminalError("no")
    _, failed = await _run_one(ctx, fail)
    r = await ctx.client.retry_failed(queue=ctx.q)
    return {"state": str(failed.state), "retry_failed": r.matched}


async def _waiting(ctx: Any, timeout: float = 3600.0) -> Any:
    async def h(job: Any, seen: dict[str, Any]) -> Any:
        token = await job.register_callback(timeout_seconds=timeout)
        seen["token"] = token.id
        seen["token_type"] = tn(token)
        return awa.WaitForCallback(token)
    seen, final = await _run_one(ctx, h)
    return seen, final


@scenario
async def cb_wait_state(ctx: Any) -> Any:
    seen, final = await _waiting(ctx)
    return {"state": str(final.state), "token_type": seen["token_type"],
            "uuid_len": len(seen["token"])}


@scenario
async def cb_complete(ctx: Any) -> Any:
    seen, _ = await _waiting(ctx)
    j = await ctx.client.complete_external(seen["token"], {"ok": True})
    again = await araises(ctx.client.complete_external(seen["token"]))
    return {"job": job(j), "again": again}


@scenario
async def cb_fail(ctx: Any) -> Any:
    seen, _ = await _waiting(ctx)
    j = await ctx.client.fail_external(seen["token"], "remote said no")
    return {"job": job(j)}


@scenario
async def cb_retry_external(ctx: Any) -> Any:
    seen, _ = await _waiting(ctx)
    j = await ctx.client.retry_external(seen["token"])
    return job(j)


@scenario
async def cb_heartbeat(ctx: Any) -> Any:
    seen, _ = await _waiting(ctx)
    j = await ctx.client.heartbeat_callback(seen["token"], 120.0)
    return job(j)


@scenario
async def cb_resume_payload(ctx: Any) -> Any:
    seen, final = await _waiting(ctx)
    j = await ctx.client.resume_external(seen["token"], {"step": 2})
    rows = ctx.sql("SELECT metadata, progress FROM awa.jobs WHERE id = %s", final.id)
    return {"job": job(j), "row": rows[0] if rows else None}


@scenario
async def cb_resolve_default_ignore(ctx: Any) -> Any:
    seen, _ = await _waiting(ctx)
    r = await ctx.client.resolve_callback(seen["token"], {"x": 1})
    return {"type": tn(r), "outcome": r.outcome, "completed": r.is_completed(),
            "ignored": r.is_ignored(), "failed": r.is_failed(),
            "job": job(r.job) if r.job is not None else None}


@scenario
async def cb_resolve_default_complete(ctx: Any) -> Any:
    seen, _ = await _waiting(ctx)
    r = await ctx.client.resolve_callback(seen["token"], {"x": 1}, default_action="complete")
    return {"outcome": r.outcome, "completed": r.is_completed(),
            "job": job(r.job) if r.job is not None else None, "payload": r.payload}


@scenario
async def cb_resolve_bad_action(ctx: Any) -> Any:
    seen, _ = await _waiting(ctx)
    return await araises(ctx.client.resolve_callback(seen["token"], {}, default_action="x"))


@scenario
async def cb_admin_retry_waiting(ctx: Any) -> Any:
    seen, final = await _waiting(ctx)
    r = await ctx.client.retry(final.id)
    return job(r) if r is not None else None


@scenario
async def cb_admin_cancel_waiting(ctx: Any) -> Any:
    seen, final = await _waiting(ctx)
    r = await ctx.client.cancel(final.id)
    return job(r) if r is not None else None


@scenario
async def cb_drain_cancels_waiting(ctx: Any) -> Any:
    seen, final = await _waiting(ctx)
    n = await ctx.client.drain_queue(ctx.q)
    return [n, str((await ctx.client.get_job(final.id)).state)]


@scenario
async def cb_queue_stats_waiting(ctx: Any) -> Any:
    seen, final = await _waiting(ctx)
    st = [s for s in await ctx.client.queue_stats() if s.queue == ctx.q]
    return [(s.waiting_external, s.available, s.running) for s in st]


# === connection failures (item 3) =====================================================
# A server that answers but has no such database: both SDKs fail at once (a refused port
# makes awa-pg 0.6.9 wait out its 30 s pool timeout).
BAD_URL = "postgresql://postgres@127.0.0.1:5432/awa_compat_no_such_database"


def _unreachable(cls: Any) -> tuple[Any, list[str] | None]:
    """A client of ``BAD_URL``, or where and what its construction raised: 0.6.9's
    constructor connects, so an unreachable database fails there, not at the first call."""
    try:
        return cls(BAD_URL), None
    except Exception as exc:
        return None, ["at construction", raised(exc)]


@scenario
def conn_refused_sync_insert(ctx: Any) -> Any:
    c, failed = _unreachable(awa.Client)
    if failed:
        return failed
    try:
        return ["at the first call", raises(c.insert, CompatPing(), queue=ctx.q)]
    finally:
        c.close()


@scenario
async def conn_refused_async_insert(ctx: Any) -> Any:
    c, failed = _unreachable(awa.AsyncClient)
    if failed:
        return failed
    try:
        return ["at the first call", await araises(c.insert(CompatPing(), queue=ctx.q))]
    finally:
        await c.close()


@scenario
async def conn_refused_async_migrate(ctx: Any) -> Any:
    c, failed = _unreachable(awa.AsyncClient)
    if failed:
        return failed
    try:
        return ["at the first call", await araises(c.migrate())]
    finally:
        await c.close()


@scenario
def conn_refused_queue_stats(ctx: Any) -> Any:
    c, failed = _unreachable(awa.Client)
    if failed:
        return failed
    try:
        return ["at the first call", raises(c.queue_stats)]
    finally:
        c.close()


@scenario
def conn_bad_url(ctx: Any) -> Any:
    try:
        c = awa.Client("not a url at all")
    except Exception as exc:
        return raised(exc)
    try:
        return raises(c.insert, CompatPing(), queue=ctx.q)
    finally:
        c.close()


@scenario
async def conn_refused_module_migrate(ctx: Any) -> Any:
    try:
        return await araises(asyncio.wait_for(awa.migrate(BAD_URL), 3))
    except Exception as exc:
        return raised(exc)


@scenario
def unmigrated_database(ctx: Any) -> Any:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    name = str(conninfo_to_dict(ctx.url)["dbname"]) + "_empty"
    admin = make_conninfo(ctx.url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    c = awa.Client(make_conninfo(ctx.url, dbname=name))
    try:
        return raises(c.insert, CompatPing(), queue=ctx.q)
    finally:
        c.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# === awa.testing (item 4) =============================================================
@scenario
async def testing_work_one(ctx: Any) -> Any:
    from awa.testing import AwaTestClient
    tc = AwaTestClient(awa.AsyncClient(ctx.url))
    await tc.insert(CompatPing(n=4), queue=ctx.q)

    async def handler(job: Any) -> None:
        return None
    # ``r.job`` is a JobRow here (a job was inserted); ``: Any`` so reading it needs no narrowing.
    r: Any = await tc.work_one(CompatPing, handler, queue=ctx.q)
    none = await tc.work_one(CompatPing, handler, queue=ctx.q)
    await tc.client.close()
    return {"outcome": r.outcome, "job": tn(r.job), "state": r.job.state,
            "args": r.job.args, "none": none.outcome, "none_job": repr(none.job)}


@scenario
async def testing_work_one_retryable(ctx: Any) -> Any:
    from awa.testing import AwaTestClient
    tc = AwaTestClient(awa.AsyncClient(ctx.url))
    await tc.insert(CompatPing(n=4), queue=ctx.q)

    async def handler(job: Any) -> None:
        raise RuntimeError("nope")
    r: Any = await tc.work_one(CompatPing, handler, queue=ctx.q)
    await tc.client.close()
    return {"outcome": r.outcome, "error": r.error, "state": r.job.state}


@scenario
async def testing_work_one_handler_job(ctx: Any) -> Any:
    from awa.testing import AwaTestClient
    tc = AwaTestClient(awa.AsyncClient(ctx.url))
    await tc.insert(CompatPing(n=4), queue=ctx.q, tags=["x"])
    seen: dict[str, Any] = {}

    async def handler(job: Any) -> Any:
        seen.update({k: tn(getattr(job, k)) for k in (
            "args", "id", "attempt", "max_attempts", "queue", "priority", "deadline",
            "metadata", "tags")})
        seen["attempt_v"] = job.attempt
        return awa.Cancel("c")
    r = await tc.work_one(CompatPing, handler, queue=ctx.q)
    await tc.client.close()
    return {"seen": seen, "outcome": r.outcome, "error": r.error}


@scenario
async def testing_work_one_snooze_terminal(ctx: Any) -> Any:
    from awa.testing import AwaTestClient
    tc = AwaTestClient(awa.AsyncClient(ctx.url))
    await tc.insert(CompatPing(n=1), queue=ctx.q)
    await tc.insert(CompatPing(n=2), queue=ctx.q)

    async def snooze(job: Any) -> Any:
        return awa.Snooze(1)

    async def terminal(job: Any) -> Any:
        raise awa.TerminalError("t")
    a: Any = await tc.work_one(CompatPing, snooze, queue=ctx.q)
    b: Any = await tc.work_one(CompatPing, terminal, queue=ctx.q)
    await tc.client.close()
    return [a.outcome, a.job.state, b.outcome, b.job.state]


@scenario
async def testing_clean(ctx: Any) -> Any:
    from awa.testing import AwaTestClient
    c = awa.AsyncClient(ctx.url)
    tc = AwaTestClient(c)
    await tc.insert(CompatPing(n=4), queue=ctx.q)
    before = len(ctx.sql("SELECT 1 FROM awa.jobs"))
    await tc.clean()
    after = len(ctx.sql("SELECT 1 FROM awa.jobs"))
    await c.close()
    return [before > 0, after]


# Scenarios that wipe the whole database: the runner runs them after every other one.
RUN_LAST = {"testing_clean"}


@scenario
def testing_get_database_url(ctx: Any) -> Any:
    import os

    from awa.testing import DEFAULT_DATABASE_URL, get_database_url
    old = os.environ.pop("DATABASE_URL", None)
    try:
        a = get_database_url()
        os.environ["DATABASE_URL"] = "postgresql://x/y"
        b = get_database_url()
    finally:
        os.environ.pop("DATABASE_URL", None)
        if old is not None:
            os.environ["DATABASE_URL"] = old
    return [a == DEFAULT_DATABASE_URL, b, DEFAULT_DATABASE_URL]


# === RawClient =====================================================================
@scenario
def rawclient_signature(ctx: Any) -> Any:
    try:
        r = awa.RawClient(ctx.url)
    except Exception as exc:
        return raised(exc)
    return {"type": tn(r), "has_insert": hasattr(r, "insert")}


@scenario
def client_signature_defaults(ctx: Any) -> Any:
    sig = inspect.signature(awa.Client.__init__)
    return {k: repr(p.default) for k, p in sig.parameters.items() if k in ("max_connections",)}


@scenario
def client_context_manager(ctx: Any) -> Any:
    with awa.Client(ctx.url) as c:
        j = c.insert(CompatPing(), queue=ctx.q)
    return tn(j)


@scenario
async def async_client_context_manager(ctx: Any) -> Any:
    async with awa.AsyncClient(ctx.url) as c:
        j = await c.insert(CompatPing(), queue=ctx.q)
    return tn(j)


@scenario
def periodic_registration(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)
    out = [raises(c.periodic, "compat_daily", "0 9 * * *", CompatPing, CompatPing()),
           raises(c.periodic, "compat_bad", "not cron", CompatPing, CompatPing()),
           raises(c.periodic, "compat_tz", "0 9 * * *", CompatPing, CompatPing(),
                  timezone="Mars/Olympus"),
           raises(c.periodic, "compat_policy", "0 9 * * *", CompatPing, CompatPing(),
                  missed_fire_policy="whatever")]
    return out


def _cron_rows(ctx: Any, prefix: str) -> list[dict[str, Any]]:
    rows = ctx.sql("SELECT to_jsonb(c) AS r FROM awa.cron_jobs c WHERE name LIKE %s "
                   "ORDER BY name", prefix + "%")
    out = []
    for r in (x["r"] for x in rows):
        out.append({k: (tn(v) if k.endswith("_at") else v) for k, v in r.items()})
    return out


@scenario
async def cron_synced_at_start(ctx: Any) -> Any:
    """A fresh database: periodic schedules are stored once start() has run, with every column.

    How many are there the moment start() returns is not compared: 0.6.9 syncs them beside
    its start, so under load it can return with one of two stored (ours stores both before
    it returns: tests/maintenance/test_cron.py)."""
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    c.periodic("compat_cron_a", "0 9 * * *", CompatPing, CompatPing(n=3), queue=ctx.q,
               priority=3, max_attempts=5, tags=["t"], metadata={"m": 1},
               timezone="Europe/Berlin")
    c.periodic("compat_cron_b", "*/5 * * * *", CompatPing, CompatPing(), queue=ctx.q,
               missed_fire_policy="coalesce")
    await c.start([(ctx.q, 1)])
    try:
        found: list[dict[str, Any]] = []
        for _ in range(50):
            found = _cron_rows(ctx, "compat_cron_")
            if len(found) == 2:
                break
            await asyncio.sleep(0.1)
        return {"rows": found}
    finally:
        await c.shutdown(500)
        await c.close()


@scenario
async def cron_list_after_start(ctx: Any) -> Any:
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        return None
    c.periodic("compat_cronlist", "0 0 1 1 *", CompatPing, CompatPing(n=1), queue=ctx.q)
    await c.start([(ctx.q, 1)])
    try:
        listed: Any = []
        for _ in range(50):
            listed = ctx.client.list_cron_jobs()
            if inspect.isawaitable(listed):
                listed = await listed
            listed = [x for x in listed if "compat_cronlist" in str(x)]
            if listed:
                break
            await asyncio.sleep(0.1)
        return [tn(x) for x in listed]
    finally:
        await c.shutdown(500)
        await c.close()


# === the CLI (python -m awa), run by each side's own interpreter ===================
def _cli(ctx: Any, *args: str, env_url: bool = False) -> Any:
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PYTHONPATH")}
    if env_url:
        env["DATABASE_URL"] = ctx.url
    proc = subprocess.run([sys.executable, "-m", "awa", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd="/")
    return proc


@scenario
def cli_migrate_sql_without_url(ctx: Any) -> Any:
    proc = _cli(ctx, "migrate", "--sql")
    return {"rc": proc.returncode, "sql": "CREATE" in proc.stdout}


@scenario
def cli_url_before_command(ctx: Any) -> Any:
    ctx.client.insert(CompatPing(), queue=ctx.q)
    proc = _cli(ctx, "--database-url", ctx.url, "queue-stats")
    return {"rc": proc.returncode, "queue_listed": ctx.q in proc.stdout}


@scenario
def cli_url_from_environment(ctx: Any) -> Any:
    """0.6.9 read no $DATABASE_URL: --database-url was required."""
    proc = _cli(ctx, "queue-stats", env_url=True)
    return {"rc": proc.returncode}


@scenario
def cli_job_dump_missing(ctx: Any) -> Any:
    proc = _cli(ctx, "--database-url", ctx.url, "job", "dump", "987654321")
    return {"rc": proc.returncode}


@scenario
def cli_bad_command(ctx: Any) -> Any:
    return {"rc": _cli(ctx, "no-such-command").returncode}



# === issue 49: what awa-pg 0.6.9's own tests still tripped on ==========================
# --- 49.1 rows changed through awa.jobs inside a client transaction -------------------
FAIL_TWO = ("UPDATE awa.jobs SET state = 'failed', finalized_at = now() "
            "WHERE id = $1 OR id = $2")
FAIL_ONE = "UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = $1"


def _tx_execute(client: Any, query: str, *params: Any) -> Any:
    """0.6.9's tests' way: a client transaction, ``$n`` placeholders, positional params."""
    tx = client.transaction()
    n = tx.execute(query, *params)
    tx.commit()
    return n


@scenario
def admin_failed_in_client_tx(ctx: Any) -> Any:
    """Two rows failed in one client transaction: retry_failed, retry and discard_failed
    find them (sync client)."""
    kind = "compat_fail_tx_sync"
    a = ctx.client.insert({"n": 1}, kind=kind, queue=ctx.q)
    b = ctx.client.insert({"n": 2}, kind=kind, queue=ctx.q)
    updated = _tx_execute(ctx.client, FAIL_TWO, a.id, b.id)
    states = [str(ctx.client.get_job(j.id).state) for j in (a, b)]
    r = ctx.client.retry_failed(queue=ctx.q)
    _tx_execute(ctx.client, FAIL_ONE, a.id)
    retried = job(ctx.client.retry(a.id))
    _tx_execute(ctx.client, FAIL_ONE, b.id)
    return {"updated": updated, "states": states, "retry_failed": r.matched,
            "retried_jobs": len(r.jobs), "retried": retried,
            "discarded": ctx.client.discard_failed(kind)}


@scenario
async def aadmin_failed_in_client_tx(ctx: Any) -> Any:
    """The same through the AsyncClient's transaction."""
    kind = "compat_fail_tx_async"
    a = await ctx.client.insert({"n": 1}, kind=kind, queue=ctx.q)
    b = await ctx.client.insert({"n": 2}, kind=kind, queue=ctx.q)

    async def execute(query: str, *params: Any) -> Any:
        tx = await ctx.client.transaction()
        n = await tx.execute(query, *params)
        await tx.commit()
        return n
    updated = await execute(FAIL_TWO, a.id, b.id)
    r = await ctx.client.retry_failed(queue=ctx.q)
    await execute(FAIL_ONE, a.id)
    retried = job(await ctx.client.retry(a.id))
    await execute(FAIL_ONE, b.id)
    return {"updated": updated, "retry_failed": r.matched, "retried": retried,
            "discarded": await ctx.client.discard_failed(kind)}


@scenario
async def run_available_by_client_tx(ctx: Any) -> Any:
    """A scheduled job and a failed one made available through awa.jobs in a client
    transaction: a worker then runs both."""
    ran: list[int] = []
    c = awa.AsyncClient(ctx.url)

    @c.task(CompatPing, queue=ctx.q)
    async def handle(job: Any) -> None:
        ran.append(job.args.n)
    later = await ctx.client.insert(CompatPing(n=1), queue=ctx.q, run_at=future())
    failed = await ctx.client.insert(CompatPing(n=2), queue=ctx.q, run_at=future())
    tx = await ctx.client.transaction()
    await tx.execute(FAIL_ONE, failed.id)
    await tx.commit()
    tx = await ctx.client.transaction()
    made = await tx.execute("UPDATE awa.jobs SET state = 'available', run_at = now() "
                            "WHERE id = $1 OR id = $2", later.id, failed.id)
    await tx.commit()
    states = [str((await ctx.client.get_job(j.id)).state) for j in (later, failed)]
    await c.start([(ctx.q, 2)], poll_interval_ms=50)
    try:
        for _ in range(100):
            if len(ran) == 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    finally:
        await c.shutdown(1000)
        await c.close()
    return {"made_available": made, "states": states, "ran": sorted(ran)}


# --- 49.2 zero values meaning "off" ----------------------------------------------------
def _queue_storage_database(ctx: Any) -> str:
    """A fresh database of this scenario's own on queue storage (0.6.9's compact-claim path
    needs it; its fresh databases are canonical until ``install_queue_storage``)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    name = str(conninfo_to_dict(ctx.url)["dbname"]) + "_qs"
    with psycopg.connect(make_conninfo(ctx.url, dbname="postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(ctx.url, dbname=name)
    url = f"postgresql://{conninfo_to_dict(url).get('user', 'postgres')}@" \
          f"{conninfo_to_dict(url).get('host', '127.0.0.1')}:" \
          f"{conninfo_to_dict(url).get('port', '5432')}/{name}"
    c = awa.Client(url)
    try:
        c.migrate()
        if ctx.is_ref:
            c.install_queue_storage(reset=True)
    finally:
        c.close()
    return url


@scenario
def run_deadline_and_aging_zero(ctx: Any) -> Any:
    """deadline_duration_ms = 0 (no attempt deadline) and priority_aging_interval_ms = 0
    (no aging) on queue storage: a job outlives many deadline-rescue passes and runs once,
    on its first attempt; a priority-4 job waiting behind it keeps its priority.

    What the handlers saw is the outcome (0.6.9 folds a compact claim's completion into
    its tables seconds later, so get_job may not find the job meanwhile).  A plain
    function (no per-scenario timeout): laying out a fresh queue-storage database takes
    awa-pg 0.6.9 some 20 s on a loaded machine."""
    url = _queue_storage_database(ctx)

    async def run() -> Any:
        producer = awa.AsyncClient(url)
        c = awa.AsyncClient(url)
        seen: list[tuple[int, int, int, bool]] = []
        finished: list[int] = []

        @c.task(CompatPing, queue=ctx.q)
        async def handle(job: Any) -> None:
            seen.append((job.args.n, job.attempt, job.priority, job.deadline is None))
            await asyncio.sleep(0.8 if job.args.n == 1 else 0)
            finished.append(job.args.n)
        await producer.insert(CompatPing(n=1), queue=ctx.q)
        await c.start([{"name": ctx.q, "max_workers": 1, "deadline_duration_ms": 0,
                        "priority_aging_interval_ms": 0}],
                      poll_interval_ms=50, deadline_rescue_interval_ms=100,
                      heartbeat_interval_ms=100)
        try:
            await asyncio.sleep(0.2)
            await producer.insert(CompatPing(n=2), queue=ctx.q, priority=4)
            for _ in range(200):
                if len(finished) >= 2:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # a rescued attempt would run again meanwhile
        finally:
            await c.shutdown(1000)
            await c.close()
            await producer.close()
        return {"seen": sorted(seen), "finished": sorted(finished)}
    return asyncio.run(asyncio.wait_for(run(), 30))


# --- 49.3 the sync Client has no worker methods ----------------------------------------
@scenario
def sync_client_no_worker_methods(ctx: Any) -> Any:
    names = ("task", "worker", "start", "shutdown")
    return {"class": [hasattr(awa.Client, n) for n in names],
            "instance": [hasattr(ctx.client, n) for n in names],
            "async": [hasattr(awa.AsyncClient, n) for n in names]}


@scenario
async def task_args_not_a_class(ctx: Any) -> Any:
    """@task("not_a_class") registers (kind "unknown"), start() runs, and the handler of
    a job of that kind gets its args as a dict."""
    c = awa.AsyncClient(ctx.url)
    seen: list[str] = []

    async def handle(job: Any) -> None:
        seen.append(tn(job.args))
    # 0.6.9 accepted a non-class here; the scenario checks that we do too.
    registered = c.task("not_a_class", queue=ctx.q)(handle) is handle  # type: ignore[arg-type]
    j = await ctx.client.insert({"x": 1}, kind="unknown", queue=ctx.q)
    try:
        await c.start([(ctx.q, 1)], poll_interval_ms=50)
        started = "started"
        for _ in range(100):
            if str((await ctx.client.get_job(j.id)).state) == "completed":
                break
            await asyncio.sleep(0.05)
    except Exception as exc:
        started = raised(exc)
    finally:
        await c.shutdown(500)
        await c.close()
    return {"registered": registered, "start": started, "args": seen}


# --- 49.4 errors and their classes -----------------------------------------------------
@scenario
def insert_args_not_an_object(ctx: Any) -> Any:
    """object(), an int, a list or a str as args, with a kind: 0.6.9's ValidationError."""
    out = {}
    for name, value in (("object", object()), ("int", 5), ("list", [1]), ("str", "s")):
        out[name] = raises_msg(ctx.client.insert, value, kind="explicit_kind", queue=ctx.q)
    return out


@scenario
def start_handler_queue_not_run(ctx: Any) -> Any:
    """A handler on a queue start() does not run: ValueError, 0.6.9's message."""
    async def attempt() -> Any:
        c = awa.AsyncClient(ctx.url)

        @c.task(CompatPing, queue=ctx.q + "_other")
        async def handle(job: Any) -> None:
            return None
        try:
            await c.start([(ctx.q, 1)])
        except Exception as exc:
            return [raised(exc), str(exc)]
        finally:
            await c.shutdown(500)
            await c.close()
        return "started"
    return asyncio.run(attempt())


@scenario
def bridge_unsupported_connection(ctx: Any) -> Any:
    from awa.bridge import insert_job, insert_job_sync
    sync = raises_msg(insert_job_sync, object(), CompatPing(), queue=ctx.q)

    async def attempt() -> Any:
        try:
            await insert_job(None, CompatPing(), queue=ctx.q)
            return "ok"
        except Exception as exc:
            return [raised(exc), str(exc)]
    out = []
    for result in (sync, asyncio.run(attempt())):
        out.append([result[0], result[1].startswith("Unsupported connection type: ")]
                   if isinstance(result, list) else result)
    return out


@scenario
def pq_messages(ctx: Any) -> Any:
    pq = awa.PartitionedQueue(ctx.q, 2)
    return {"index": raises_msg(pq.queue_for_index, -1),
            "route_index": raises_msg(pq.route_by_index, -1),
            "empty": raises_msg(awa.PartitionedQueue, "", 2),
            "zero": raises_msg(awa.PartitionedQueue, ctx.q, 0),
            "negative": raises_msg(awa.PartitionedQueue, ctx.q, -3),
            "configs_zero": raises_msg(pq.queue_configs, 0),
            "configs_negative": raises(pq.queue_configs, -1),
            "configs_none": raises_msg(pq.queue_configs),
            "configs_weight_zero": raises_msg(pq.queue_configs, min_workers_per_partition=0,
                                              weight=0),
            "configs_claimers_zero": raises_msg(pq.queue_configs, 1, claimers=0),
            "configs_batch_zero": raises_msg(pq.queue_configs, 1, claim_batch_size=0),
            "physical_none": raises_msg(awa.PartitionedQueue.from_physical_queues, ctx.q, []),
            "physical_blank": raises_msg(awa.PartitionedQueue.from_physical_queues, ctx.q,
                                         ["a", ""]),
            "physical_twice": raises_msg(awa.PartitionedQueue.from_physical_queues, ctx.q,
                                         ["a", "a"])}


# --- 49.5 the CLI --------------------------------------------------------------------
@scenario
def cli_help_title(ctx: Any) -> Any:
    proc = _cli(ctx, "--help")
    return {"rc": proc.returncode, "title": "Awa job queue CLI" in proc.stdout,
            "serve": "serve" in proc.stdout}


@scenario
def cli_migrate_sql_headers(ctx: Any) -> Any:
    """Each migration under a "Migration V<n>" header, no database URL needed."""
    whole = _cli(ctx, "migrate", "--sql")
    one = _cli(ctx, "migrate", "--version", "1")
    return {"rc": [whole.returncode, one.returncode],
            "v1": ["-- Migration V1:" in whole.stdout, "-- Migration V1:" in one.stdout],
            "v2_in_one": "Migration V2:" in one.stdout}


@scenario
def cli_queue_stats_without_url(ctx: Any) -> Any:
    """No --database-url (and $DATABASE_URL set): exit 1 with one line, both spellings."""
    out = []
    for args in (("queue", "stats"), ("queue-stats",)):
        proc = _cli(ctx, *args, env_url=True)
        lines = proc.stderr.strip().splitlines()
        out.append([proc.returncode, len(lines),
                    "--database-url is required" in proc.stderr])
    return out


@scenario
def cli_retry_failed_filters(ctx: Any) -> Any:
    """No filter, or two: exit 1 naming --kind and --queue, "exactly one" for two,
    before connecting (the URL points at a closed port)."""
    closed = "postgres://postgres@127.0.0.1:1/nonexistent"
    out = []
    for extra in ((), ("--kind", "email", "--queue", "critical")):
        proc = _cli(ctx, "--database-url", closed, "job", "retry-failed", *extra)
        out.append([proc.returncode, "--kind" in proc.stderr and "--queue" in proc.stderr,
                    "exactly one" in proc.stderr, "connect" in proc.stderr.lower()])
    return out
