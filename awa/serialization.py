"""Job args to JSON and back, and the kind a job gets when none is given.

Producers and the runtime both go through these functions so that an args
class serialises the same way on enqueue as it is decoded in its handler.
Args may be a dataclass, a pydantic model (duck-typed: ``model_dump`` /
``model_validate``) or a plain dict.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, TypeVar

from awa.job import (
    ARGS_BUILD,
    ARGS_SOURCE,
    ArgsNotAnObject,
    Job,
    SerializationError,
    ValidationError,
    parse_json_text,
)

T = TypeVar("T")

# "HTMLToPDF" -> "HTML_To_PDF" -> "html_to_pdf": an upper run followed by a
# capitalised word splits before the word; a lower/digit before an upper splits.
_ACRONYM_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")


def derive_kind(cls_or_name: Any) -> str:
    """The snake_case kind of an args class (or a class name string)."""
    if isinstance(cls_or_name, str):
        name = cls_or_name
    elif isinstance(cls_or_name, type):
        name = cls_or_name.__name__
    else:
        name = type(cls_or_name).__name__
    name = _ACRONYM_BOUNDARY.sub(r"\1_\2", name)
    name = _WORD_BOUNDARY.sub(r"\1_\2", name)
    return name.replace("-", "_").lower()


def kind_for(args: Any, kind: str | None = None) -> str:
    """The explicit ``kind`` if given, else the one derived from the args' class.

    A plain dict has no class to name the job after, so it needs ``kind=``.
    """
    if kind:
        return kind
    if isinstance(args, dict):
        raise ValidationError("dict args need an explicit kind= (there is no class to "
                              "derive the kind from)")
    if args is None or isinstance(args, (str, int, float, bool, list, tuple)):
        raise not_an_object()
    return derive_kind(args)


def json_default(value: Any) -> Any:
    """The JSON encoders' ``default`` hook: dataclasses and pydantic models as plain values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def not_an_object() -> ArgsNotAnObject:
    """The error for args that are not a dataclass, pydantic model or dict."""
    return ArgsNotAnObject("Job args must be a dataclass, pydantic BaseModel, or dict")


def _plain_object(args: Any) -> dict[str, Any]:
    if isinstance(args, dict):
        plain = args
    else:
        try:
            plain = json_default(args)
        except TypeError:
            raise not_an_object() from None
    if not isinstance(plain, dict):
        raise SerializationError(f"job args of {type(args).__name__} must serialise to a JSON "
                                 f"object, got {type(plain).__name__}")
    return plain


def _not_json(args: Any, exc: Exception) -> SerializationError:
    return SerializationError(f"job args of {type(args).__name__} are not JSON-serializable: "
                              f"{' '.join(str(exc).split())}")


def encode_args(args: Any) -> dict[str, Any]:
    """A JSON-able dict of the args; fails with one line when it is not JSON."""
    plain = _plain_object(args)
    try:
        # Round trip: proves it is JSON and drops tuple/str-key differences the
        # database would otherwise introduce.
        decoded: dict[str, Any] = json.loads(json.dumps(plain, allow_nan=False))
        return decoded
    except (TypeError, ValueError) as exc:
        raise _not_json(args, exc) from None


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators: the bytes the unique key hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def require_json(value: Any, what: str) -> None:
    """Reject (``ValidationError`` naming ``what``) a value JSON cannot store."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} is not JSON-serializable: "
                              f"{' '.join(str(exc).split())}") from None


# A dataclass args type (without pydantic's ``model_validate``) -> its init field names.
_DATACLASS_FIELDS: dict[type, frozenset[str]] = {}


def decode_args(args_type: type[T] | None, data: Any) -> T:
    """Build ``args_type`` from stored JSON; ``SerializationError`` when it does not fit."""
    # Not a class (0.6.9 registered ``task("not_a_class")`` too): the handler gets the dict.
    if args_type is None or args_type is dict or args_type is Any or not isinstance(
            args_type, type):
        if not isinstance(data, dict):
            raise SerializationError(f"job args must be a JSON object, got {type(data).__name__}")
        return data  # type: ignore[return-value]  # T is dict (or Any) on this branch
    if not isinstance(data, dict):
        raise SerializationError(f"cannot build {args_type.__name__} from "
                                 f"{type(data).__name__}: a JSON object is needed")
    # A dataclass's init fields, looked up once per class (the runtime decodes every job).
    names = _DATACLASS_FIELDS.get(args_type)
    validate = None if names is not None else getattr(args_type, "model_validate", None)
    try:
        if callable(validate):
            validated: T = validate(data)
            return validated
        if names is None and dataclasses.is_dataclass(args_type):
            names = _DATACLASS_FIELDS[args_type] = frozenset(
                f.name for f in dataclasses.fields(args_type) if f.init)
        if names is not None:
            # Fields the class does not know are dropped (as pydantic does), so a
            # producer may add a field before every worker is redeployed.
            return args_type(**{k: v for k, v in data.items() if k in names})
        return args_type(**data)
    except SerializationError:
        raise
    except Exception as exc:  # the args type's own validation: report it as one line
        raise SerializationError(f"cannot build {args_type.__name__} from job args: "
                                 f"{' '.join(str(exc).split())}") from None


# Field default factories that cannot raise (a dataclass's own ``__init__`` calls them).
_SAFE_FACTORIES = (list, dict, set, tuple, frozenset)
_TYPE_CALL: Any = type.__call__
_OBJECT_NEW: Any = object.__new__
_OBJECT_SETATTR: Any = object.__setattr__


def _is_plain(args_type: Any) -> bool:
    """An args type whose handler gets the stored object itself (``decode_args``'s first case)."""
    return (args_type is None or args_type is dict or args_type is Any
            or not isinstance(args_type, type))


def _generated_init(args_type: type) -> bool:
    """Whether ``args_type`` is made by its dataclass-generated ``__init__`` alone: no
    ``__init__`` of its own (the generated one is compiled from a string, its file
    ``"<string>"``; one a class defines, or pydantic's dataclasses install, has a file),
    no ``__post_init__``, no metaclass ``__call__`` or ``__new__`` of its own, and no
    ``__setattr__`` of its own unless frozen (the frozen ``__init__`` goes around it)."""
    cls: Any = args_type  # Any: mypy sees no overlap between a class's and type's methods
    meta: Any = type(args_type)
    init = cls.__dict__.get("__init__")
    params = getattr(cls, "__dataclass_params__", None)
    return (getattr(getattr(init, "__code__", None), "co_filename", None) == "<string>"
            and params is not None and params.init
            and not hasattr(cls, "__post_init__")
            and meta.__call__ is _TYPE_CALL and cls.__new__ is _OBJECT_NEW
            and (params.frozen or cls.__setattr__ is _OBJECT_SETATTR))


def _deferrable(args_type: Any) -> frozenset[str] | None:
    """For a dataclass whose construction from stored args cannot fail once its required
    fields are there: those fields' names; else None.

    That is a dataclass without ``model_validate`` made by its generated ``__init__``
    alone (``_generated_init``), without InitVar or ClassVar pseudo-fields, whose defaults
    are plain values (no descriptors) and whose default factories are the builtin
    containers: its construction assigns what it is given and never validates.  Anything
    else (pydantic models, validating classes) is built before the handler, as ever."""
    if callable(getattr(args_type, "model_validate", None)) or not _generated_init(args_type):
        return None
    fields = dataclasses.fields(args_type)
    if len(fields) != len(getattr(args_type, "__dataclass_fields__", ())):
        return None  # InitVar / ClassVar pseudo-fields
    required = []
    for f in fields:
        if (f.default_factory is not dataclasses.MISSING
                and f.default_factory not in _SAFE_FACTORIES):
            return None
        if f.default is not dataclasses.MISSING and hasattr(type(f.default), "__set__"):
            return None
        if (f.init and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING):
            required.append(f.name)
    return frozenset(required)


class ArgsDecoder:
    """How a handler's args type turns a claimed job's stored args into ``job.args``.

    ``check(job)`` runs before the handler, where ``decode_args`` used to run for every
    job: it raises ``SerializationError`` (with ``decode_args``'s message) for args that do
    not fit, so such a job fails at once whether or not its handler reads them, and leaves
    the rest -- parsing the JSON text, building the args object -- to the first read of
    ``job.args`` (``awa.job.ARGS_SOURCE``) when that cannot fail: for a handler of dicts the
    stored args need only be an object, for a plain dataclass (``_deferrable``) an object
    with its required fields.  Any other args type is built here, before the handler."""

    __slots__ = ("args_type", "build", "plain", "required")

    def __init__(self, args_type: Any) -> None:
        self.args_type = args_type
        self.plain = _is_plain(args_type)
        # Deferrable: the required fields (maybe none); None: built before the handler.
        self.required = (_deferrable(args_type) if not self.plain
                         and dataclasses.is_dataclass(args_type) else None)
        # What the first read of job.args builds with (awa.job.ARGS_BUILD; None: the
        # parsed object is the args): the class and its init fields' names.
        self.build = (None if self.required is None else (args_type, frozenset(
            f.name for f in dataclasses.fields(args_type) if f.init)))

    def check(self, job: Job[Any]) -> None:
        """Raise ``SerializationError`` when ``job``'s args do not fit; else make
        ``job.args`` what the handler is to read (now, or on its first read)."""
        values = job.__dict__
        source = values.get(ARGS_SOURCE)
        if source is None or "args" in values:  # not a claimed job's pending args
            job.args = decode_args(self.args_type, job.args)
            return
        required = self.required
        if self.plain or required is not None:
            if not required and type(source) is str and source[:1] == "{":
                # jsonb's text form of an object starts with "{": no parse to know it is one.
                if not self.plain:
                    values[ARGS_BUILD] = self.build
                return
            data = parse_json_text(source) if type(source) is str else source
            if type(data) is dict and (not required or data.keys() >= required):
                values[ARGS_SOURCE] = data
                if not self.plain:
                    values[ARGS_BUILD] = self.build
                return
        else:
            data = parse_json_text(source) if type(source) is str else source
        job.args = decode_args(self.args_type, data)  # built now, or the error saying why
