"""The JSON shapes of the REST API: one function per shape, and a pydantic model each.

The functions turn the read model's rows (``awa.job.Job``, ``DlqEntry``, the
runtime registry) into the plain JSON of the Rust-core awa-ui API
(``docs/api.md`` lists the differences).  The response models only describe
those shapes in the OpenAPI document: routes return JSON they built themselves,
so a list of 1,000 jobs is not validated twice.  The request models and types
are the input's rules, stated in the document and checked before anything runs
(no NUL, bounded numbers, awa's queue-name rule), so no input reaches the
database that it would refuse with a 500.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import date, datetime
from typing import Annotated, Any, Literal, get_args

from annotated_types import Interval
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    WithJsonSchema,
)
from pydantic.json_schema import JsonDict, JsonValue

from awa import config
from awa.job import Job, ValidationError
from awa.storage.common.enqueue import validate_queue
from awa.storage.engine import DlqEntry

ORIGINAL_PRIORITY_KEY = "_awa_original_priority"
JOB_STATES = tuple(config.JOB_STATES)
CAPPED_ARGS_KEY = "_awa_args_capped"

# --- the rules every input obeys (stated in the OpenAPI document, checked by pydantic) ---
# Job ids are int64, but a JSON number is a double to most clients and validators: the
# integers the API takes are those a double holds exactly (I-JSON, RFC 7493: +-(2**53 - 1)),
# so the server and every validator read a bound alike.  No job id comes near it.
INT_MIN, INT_MAX = -(2**53 - 1), 2**53 - 1
# Text PostgreSQL can store: no NUL (pydantic itself refuses a lone surrogate).
NO_NUL = r"^[^\x00]*$"
# Python's str.isspace() characters, spelt out: ECMA's \s differs (U+001C-001F, U+0085).
_SPACE = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$"


_INT_BOUNDS = Interval(ge=INT_MIN, le=INT_MAX)
# In a query or a path (text, read as an integer).
QueryInt = Annotated[int, _INT_BOUNDS]


def _json_number(value: Any) -> Any:
    """A JSON number, not "5" or true (pydantic's lax mode would take those)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a JSON number")
    return value


def _json_integer(value: Any) -> Any:
    """A JSON integer: 5 or 5.0 (JSON Schema counts both), not 5.5, "5" or true."""
    value = _json_number(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a JSON integer")
        return int(value)
    return value


# In a body.
BodyInt = Annotated[int, _INT_BOUNDS, BeforeValidator(_json_integer)]  # bounds first: documented
Text = Annotated[str, Field(pattern=NO_NUL)]
Name = Annotated[str, Field(min_length=1, pattern=NO_NUL)]
Priority = Annotated[int, Interval(ge=config.MIN_PRIORITY, le=config.MAX_PRIORITY),
                     BeforeValidator(_json_integer)]
# RFC 3339, as the document's "date-time" says (pydantic alone also takes a bare date, a
# time without offset, or a number of seconds).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _rfc3339(value: Any) -> Any:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time with its offset "
                         "(2026-12-07T10:00:00Z)")
    return value


Timestamp = Annotated[datetime, BeforeValidator(_rfc3339)]


def _queue_rule(value: str) -> str:
    """awa's one queue-name rule (at most 59 UTF-8 bytes: the LISTEN channel's limit)."""
    try:
        return validate_queue(value)
    except ValidationError as exc:
        raise ValueError(str(exc)) from None


QUEUE_DOC = (f"1 to {config.MAX_QUEUE_NAME_BYTES} UTF-8 bytes (the LISTEN channel "
             f"\"{config.NOTIFY_CHANNEL_PREFIX}<queue>\" fits 63), no NUL")
QueueName = Annotated[str, Field(min_length=1, max_length=config.MAX_QUEUE_NAME_BYTES,
                                 pattern=NO_NUL, description=QUEUE_DOC),
                      AfterValidator(_queue_rule)]


def plain(value: Any) -> Any:
    """``json.dumps`` default: timestamps as RFC 3339, bytes as arrays of numbers, UUIDs."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return list(bytes(value))
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "value"):  # enums
        return value.value
    return str(value)


def dumps(value: Any) -> bytes:
    return json.dumps(value, default=plain, separators=(",", ":")).encode()


def _unique_states(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 2)
    except ValueError:
        return None


def job_row(job: Job[Any]) -> dict[str, Any]:
    """JobRow: every column, by the reference's names."""
    return {
        "id": job.id, "kind": job.kind, "queue": job.queue, "args": job.args,
        "state": job.state.value, "priority": job.priority, "attempt": job.attempt,
        "run_lease": job.run_lease, "max_attempts": job.max_attempts, "run_at": job.run_at,
        "heartbeat_at": job.heartbeat_at, "deadline_at": job.deadline_at,
        "attempted_at": job.attempted_at, "finalized_at": job.finalized_at,
        "created_at": job.created_at, "errors": list(job.errors) if job.errors else None,
        "metadata": job.metadata or {}, "tags": list(job.tags or []),
        "unique_key": job.unique_key, "unique_states": _unique_states(job.unique_states),
        "callback_id": job.callback_id, "callback_timeout_at": job.callback_timeout_at,
        "callback_filter": job.callback_filter, "callback_on_complete": job.callback_on_complete,
        "callback_on_fail": job.callback_on_fail, "callback_transform": job.callback_transform,
        "progress": job.progress,
    }


def capped_args(row: dict[str, Any], cap: int = config.SERVE_LIST_ARGS_CAP_BYTES
                ) -> dict[str, Any]:
    """A list's row: args bigger than ``cap`` bytes of JSON become a marker that says how
    big they are and which route returns them whole (the console caps them the same way)."""
    size = len(dumps(row["args"]))
    if size > cap:
        row["args"] = {CAPPED_ARGS_KEY: {"bytes": size, "cap": cap,
                                         "whole": f"/api/jobs/{row['id']}"}}
    return row


def job_response(job: Job[Any], descriptors: Descriptors) -> dict[str, Any]:
    """JobResponse: the row, its priority before aging, and its queue's and kind's descriptors."""
    row = job_row(job)
    original = (job.metadata or {}).get(ORIGINAL_PRIORITY_KEY)
    row["original_priority"] = original if isinstance(original, int) else job.priority
    row["queue_descriptor"] = descriptors.queues.get(job.queue)
    row["kind_descriptor"] = descriptors.kinds.get(job.kind)
    return row


def dlq_row(entry: DlqEntry) -> dict[str, Any]:
    """DlqRow: the job's columns plus ``dlq_reason``, ``dlq_at``, ``original_run_lease``."""
    row = job_row(entry.job)
    row["dlq_reason"] = entry.reason
    row["dlq_at"] = entry.dlq_at
    row["original_run_lease"] = entry.original_run_lease
    return row


def dlq_metadata(entry: DlqEntry) -> dict[str, Any]:
    return {"reason": entry.reason, "dlq_at": entry.dlq_at,
            "original_run_lease": entry.original_run_lease}


def descriptor(row: dict[str, Any]) -> dict[str, Any]:
    return {"display_name": row.get("display_name"), "description": row.get("description"),
            "owner": row.get("owner"), "docs_url": row.get("docs_url"),
            "tags": list(row.get("tags") or []), "extra": row.get("extra") or {}}


class Descriptors:
    """The stored queue and kind descriptors, by name, as Descriptor JSON."""

    def __init__(self, queues: dict[str, dict[str, Any]] | None = None,
                 kinds: dict[str, dict[str, Any]] | None = None) -> None:
        self.queues = queues or {}
        self.kinds = kinds or {}


# --- OpenAPI models (documentation only) ---------------------------------------------

class _Doc(BaseModel):
    model_config = ConfigDict(extra="allow")


class Error(_Doc):
    error: str


class Descriptor(_Doc):
    display_name: str | None = None
    description: str | None = None
    owner: str | None = None
    docs_url: str | None = None
    tags: list[str] = []
    extra: dict[str, Any] = {}


class _Described(Descriptor):
    """A queue or a kind with its descriptor's fields inline, and how current they are."""

    descriptor_last_seen_at: datetime | None = None
    descriptor_stale: bool
    descriptor_mismatch: bool


class JobRow(_Doc):
    id: int
    kind: str
    queue: str
    args: Any = None
    state: str
    priority: int
    attempt: int
    run_lease: int
    max_attempts: int
    run_at: datetime
    heartbeat_at: datetime | None = None
    deadline_at: datetime | None = None
    attempted_at: datetime | None = None
    finalized_at: datetime | None = None
    created_at: datetime
    errors: list[Any] | None = None
    metadata: dict[str, Any] = {}
    tags: list[str] = []
    unique_key: list[int] | None = None
    unique_states: int | None = None
    callback_id: str | None = None
    callback_timeout_at: datetime | None = None
    callback_filter: str | None = None
    callback_on_complete: str | None = None
    callback_on_fail: str | None = None
    callback_transform: str | None = None
    progress: Any = None


class DlqMetadata(_Doc):
    reason: str
    dlq_at: datetime
    original_run_lease: int


class JobResponse(JobRow):
    original_priority: int
    queue_descriptor: Descriptor | None = None
    kind_descriptor: Descriptor | None = None
    dlq: DlqMetadata | None = None


class DlqRow(JobRow):
    dlq_reason: str
    dlq_at: datetime
    original_run_lease: int


class QueueOverview(_Described):
    queue: str
    total_queued: int
    scheduled: int
    available: int
    retryable: int
    running: int
    failed: int
    waiting_external: int
    completed_last_hour: int
    lag_seconds: float | None = None
    paused: bool


class JobKindOverview(_Described):
    kind: str
    job_count: int
    queue_count: int
    completed_last_hour: int
    capped: bool = False
    """Addition: a part of the count stopped at its cap; the counts are lower bounds."""


class CronJobResponse(_Doc):
    name: str
    cron_expr: str
    timezone: str
    kind: str
    queue: str
    args: Any = None
    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    missed_fire_policy: str
    last_enqueued_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None
    next_fire_at: datetime | None = None


class QueueRuntimeConfig(_Doc):
    mode: str
    max_workers: int | None = None
    min_workers: int | None = None
    weight: int | None = None
    global_max_workers: int | None = None
    poll_interval_ms: int
    deadline_duration_secs: int
    priority_aging_interval_secs: int
    claimers: int | None = None
    claim_batch_size: int | None = None
    dlq_enabled: bool | None = None
    rate_limit: dict[str, Any] | None = None


class QueueRuntimeSnapshot(_Doc):
    queue: str
    in_flight: int
    overflow_held: int | None = None
    config: QueueRuntimeConfig


class RuntimeInstance(_Doc):
    instance_id: str
    hostname: str | None = None
    pid: int | None = None
    version: str | None = None
    storage_capability: str
    transition_role: str
    started_at: datetime | None = None
    last_seen_at: datetime
    snapshot_interval_ms: int
    stale: bool
    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    maintenance_alive: bool
    shutting_down: bool
    leader: bool
    global_max_workers: int | None = None
    queues: list[QueueRuntimeSnapshot]


class RuntimeOverview(_Doc):
    total_instances: int
    live_instances: int
    stale_instances: int
    healthy_instances: int
    leader_instances: int
    instances: list[RuntimeInstance]


class QueueRuntimeSummary(_Doc):
    queue: str
    instance_count: int
    live_instances: int
    stale_instances: int
    healthy_instances: int
    total_in_flight: int
    overflow_held_total: int | None = None
    config_mismatch: bool
    config: QueueRuntimeConfig | None = None


class StorageStatusReport(_Doc):
    current_engine: str
    active_engine: str
    prepared_engine: str | None = None
    state: str
    transition_epoch: int
    details: dict[str, Any]
    canonical_live_backlog: int
    can_enter_mixed_transition: bool
    enter_mixed_transition_blockers: list[str]
    can_finalize: bool
    finalize_blockers: list[str]


class Capabilities(_Doc):
    read_only: bool
    poll_interval_ms: int
    instance_name: str | None = None
    instance_color: str | None = None
    peers: list[dict[str, str]] = []
    auth: bool
    engine: str | None = None


class Ok(_Doc):
    ok: bool


class Count(_Doc):
    count: int


class Drained(_Doc):
    drained: int


class TimeseriesPoint(_Doc):
    bucket: datetime
    state: str
    count: int
    capped: bool = False
    """Addition: the read stopped at its cap inside this minute (the oldest shown): its
    count may be short, and older minutes are left out."""


class QueueCountDoc(_Doc):
    queue: str
    count: int


class DlqDepthDoc(_Doc):
    total: int
    by_queue: list[QueueCountDoc]


class CallbackResult(_Doc):
    id: int
    state: str


class ErrorGroupDoc(_Doc):
    fingerprint: str
    count: int
    kinds: list[str]
    example: str | None = None
    job_ids: list[int]


class Finding(_Doc):
    check: str
    status: str


# --- request bodies -------------------------------------------------------------------

def _one_of_fields(fields: tuple[str, ...], flag: str | None = "all") -> JsonDict:
    """JSON Schema for "at least one of ``fields``, or ``flag`` true": the route refuses
    (400) a body that names none, so the document says so."""
    options: list[JsonValue] = [{"required": [f], "properties": {f: {"type": "string"}}}
                                     for f in fields]
    if flag:
        options.append({"required": [flag], "properties": {flag: {"const": True}}})
    return {"anyOf": options}


class _Body(BaseModel):
    """A request body; unknown fields are ignored, as the reference's (serde's default)."""


class IdsBody(_Body):
    ids: list[BodyInt] = Field(max_length=config.SERVE_BULK_PREVIEW_MAX)


class _FilterBody(_Body):
    kind: Name | None = None
    queue: QueueName | None = None
    tag: Name | None = None


RetryState = Literal["failed", "cancelled", "waiting_external"]
CancelState = Literal["scheduled", "available", "running", "retryable", "waiting_external"]
RETRYABLE: tuple[str, ...] = get_args(RetryState)
CANCELLABLE: tuple[str, ...] = get_args(CancelState)


class RetryFilterBody(_FilterBody):
    model_config = ConfigDict(json_schema_extra=_one_of_fields(("state", "kind", "queue",
                                                                "tag"), None))
    state: RetryState | None = None


class CancelFilterBody(_FilterBody):
    model_config = ConfigDict(json_schema_extra=_one_of_fields(("state", "kind", "queue",
                                                                "tag"), None))
    state: CancelState | None = None


class FilterPreview(_Doc):
    total: int
    ids: list[int]
    truncated: bool


class PausedBy(_Body):
    paused_by: Text | None = None


class DlqRetryBody(_Body):
    run_at: Timestamp | None = None
    priority: Priority | None = None
    queue: QueueName | None = None


class DlqBulkBody(_FilterBody):
    model_config = ConfigDict(json_schema_extra=_one_of_fields(("kind", "queue", "tag")))
    all: StrictBool = False


class DlqMoveBody(_Body):
    model_config = ConfigDict(json_schema_extra=_one_of_fields(("kind", "queue")))
    kind: Name | None = None
    queue: QueueName | None = None
    reason: Name = "ui_bulk_move"
    all: StrictBool = False


def _storable(value: Any) -> Any:
    """A JSON value jsonb can hold: no NUL in any string or key."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("contains a NUL character (\\u0000), which PostgreSQL cannot "
                             "store in jsonb")
    elif isinstance(value, list):
        for item in value:
            _storable(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _storable(key)
            _storable(item)
    return value


# Any JSON value without NUL, stated recursively (the component ``document`` adds) so
# generated payloads obey it too.
STORABLE_JSON_DEF: dict[str, Any] = {
    "description": "Any JSON value whose strings and keys hold no NUL (jsonb cannot)",
    "anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "number"},
              {"type": "string", "pattern": NO_NUL},
              {"type": "array", "items": {"$ref": "#/components/schemas/StorableJson"}},
              {"type": "object", "propertyNames": {"pattern": NO_NUL},
               "additionalProperties": {"$ref": "#/components/schemas/StorableJson"}}]}
StorableJson = Annotated[Any, AfterValidator(_storable), WithJsonSchema(STORABLE_JSON_DEF)]


class CompleteBody(_Body):
    payload: StorableJson = None


class FailBody(_Body):
    error: Annotated[str, Field(pattern=NOT_BLANK, description="Not blank, no NUL")]


class BatchFilter(_Body):
    """Which jobs a batch operation changes (only available and scheduled ones).  An unknown
    field is refused: dropping a misspelt one would widen the change."""

    model_config = ConfigDict(extra="forbid")

    kind: Name = Field(default=None)  # type: ignore[assignment]  # absent, never null
    queue: QueueName = Field(default=None)  # type: ignore[assignment]  # absent, never null
    tag: Name = Field(default=None)  # type: ignore[assignment]  # absent, never null
    ids: list[BodyInt] = Field(default=None, min_length=1,  # type: ignore[arg-type]  # ditto
                             max_length=config.SERVE_BULK_PREVIEW_MAX)
    state: Literal["available", "scheduled"] = Field(default=None)  # type: ignore[arg-type]
    created_at_gte: Timestamp = Field(default=None)  # type: ignore[assignment]  # ditto
    created_at_lt: Timestamp = Field(default=None)  # type: ignore[assignment]  # ditto

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class SetPrioritySpec(_Body):
    priority: Priority


class MoveQueueSpec(_Body):
    queue: QueueName
    priority: Priority | None = None


class _BatchOp(_Body):
    filter: BatchFilter
    submitted_by: Text | None = None
    all: StrictBool = False


class SetPriorityOp(_BatchOp):
    op_kind: Literal["set_priority"]
    spec: SetPrioritySpec


class MoveQueueOp(_BatchOp):
    op_kind: Literal["move_queue"]
    spec: MoveQueueSpec


# Submitting needs a filter with at least one field, or all=true (else 400).
_WHOLE_OR_FILTERED: JsonDict = {
    "anyOf": [{"required": ["all"], "properties": {"all": {"const": True}}},
              {"properties": {"filter": {"minProperties": 1}}}]}


class SetPrioritySubmit(SetPriorityOp):
    model_config = ConfigDict(json_schema_extra=_WHOLE_OR_FILTERED)


class MoveQueueSubmit(MoveQueueOp):
    model_config = ConfigDict(json_schema_extra=_WHOLE_OR_FILTERED)


BatchPreviewBody = Annotated[SetPriorityOp | MoveQueueOp, Field(discriminator="op_kind")]
BatchSubmitBody = Annotated[SetPrioritySubmit | MoveQueueSubmit,
                            Field(discriminator="op_kind")]


class BatchPatch(_Body):
    # Only "cancelling"; another value is the reference's 400, said by the route.
    state: Annotated[str, WithJsonSchema({"type": "string", "enum": ["cancelling"]})]


class BatchOperation(_Doc):
    id: str
    op_kind: str
    filter: dict[str, Any]
    spec: dict[str, Any]
    state: str
    submitted_by: str | None = None
    submitted_at: datetime
    started_at: datetime | None = None
    finalized_at: datetime | None = None
    cursor: dict[str, Any] | None = None
    total_matched: int | None = None
    processed: int
    skipped: int
    errored: int
    last_error: str | None = None
    runner_instance: str | None = None
    retention_until: datetime | None = None
    updated_at: datetime


class BatchPreview(_Doc):
    total_matched: int
    sample: list[JobRow]


class HeartbeatBody(_Body):
    timeout_seconds: Annotated[float, BeforeValidator(_json_number)] = Field(
        default=config.CALLBACK_TIMEOUT_SECONDS, gt=0, le=config.CALLBACK_TIMEOUT_MAX_SECONDS,
        allow_inf_nan=False)


def document(app: Any, *, bearer: bool) -> None:
    """Put the schemas the models name by ``$ref`` (StorableJson) in the OpenAPI document,
    and, on a server with a token, the bearer scheme every route needs."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return dict(app.openapi_schema)
        doc: dict[str, Any] = generate()
        components = doc.setdefault("components", {})
        components.setdefault("schemas", {})["StorableJson"] = STORABLE_JSON_DEF
        if bearer:
            components["securitySchemes"] = {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "The token of awa serve --token-file"}}
            doc["security"] = [{"bearer": []}]
        return doc
    app.openapi = openapi
