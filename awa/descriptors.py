"""Queue and job-kind descriptors: the catalogue an operator reads.

``client.queue_descriptor(...)`` / ``client.job_kind_descriptor(...)`` declare
display name, description, owner, docs URL, tags and extra fields next to the
worker code.  As in awa-pg 0.6.9, ``start()`` catalogues every queue it runs and
every kind it has a handler for (a bare descriptor where none was declared),
before it returns and again every snapshot tick (``last_seen_at``; ``updated_at``
moves only when the descriptor changed).

Each descriptor's hash is the Rust core's: BLAKE3 (hex) of the descriptor as
``serde_json`` writes it -- keys sorted, compact, non-ASCII as UTF-8, floats in
Rust's shortest form -- so a Python runtime and a Rust-core runtime declaring
the same descriptor agree, and only real drift shows in the runtimes' reported
hashes (``runtime_instances.descriptor_hashes``:
``{"queues": {queue: hash}, "kinds": {kind: hash}}``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import blake3

from awa.job import AwaError, DatabaseError, ValidationError

DESCRIPTOR_FIELDS = ("display_name", "description", "owner", "docs_url", "tags", "extra")

# The catalogue tables' CHECK constraints in awa-pg 0.6.9 (what its start() failed on), in
# the order PostgreSQL tests them (by name): (constraint suffix, field, what is checked).
_LIMITS = (("description_len", "description", 2000), ("display_length", "display_name", 200),
           ("docs_url_length", "docs_url", 2048), ("{key}_length", "name", 200),
           ("{key}_nonempty", "name", 0), ("owner_length", "owner", 200),
           ("tags_count", "tags", 20))

_I64 = (-(2 ** 63), 2 ** 63 - 1)


# --- the Rust core's JSON and hash ------------------------------------------------------
def _rust_float(x: float) -> str:
    """A float as serde_json writes it (Rust's shortest round-trip digits; positional
    between 1e-5 and 1e16, else ``1.5e+20`` / ``1e-7``); NaN and infinities are null."""
    if not math.isfinite(x):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if x == 0:
        return sign + "0.0"
    _, digit_tuple, exponent = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    exp = int(exponent)
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    point = len(digits) + exp  # the value is 0.<digits> * 10**point
    if exp >= 0 and point <= 16:
        return f"{sign}{digits}{'0' * exp}.0"
    if 0 < point <= 16:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -5 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    e = point - 1
    mantissa = digits if len(digits) == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def rust_json(value: Any) -> str:
    """``value`` (already checked by ``json_value``) as the Rust core serialises it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value) if _I64[0] <= value <= _I64[1] else _rust_float(float(value))
    if isinstance(value, float):
        return _rust_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{rust_json(value[k])}"
                              for k in sorted(value)) + "}"
    return "[" + ",".join(rust_json(v) for v in value) + "]"


def descriptor_hash(fields: Mapping[str, Any]) -> str:
    """BLAKE3 (hex) of the descriptor as the Rust core hashes it (see the module doc)."""
    body = {k: fields.get(k) for k in DESCRIPTOR_FIELDS}
    body["tags"] = list(body["tags"] or [])
    if body["extra"] is None:
        body["extra"] = {}
    return blake3.blake3(rust_json(body).encode()).hexdigest()


# --- declaring ------------------------------------------------------------------------
def _not_str(value: Any) -> ValidationError:
    return ValidationError(f"'{type(value).__name__}' object is not an instance of 'str'")


def _text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _not_str(value)
    return value


def json_value(value: Any) -> Any:
    """``value`` as the JSON data awa-pg 0.6.9 made of it -- an int beyond 64 bits becomes
    a float, NaN and infinities null -- or refused as it did: a ``TypeError``
    (``ValidationError``) naming what cannot be converted."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if _I64[0] <= value <= _I64[1]:
            return int(value)
        try:
            return float(value)
        except OverflowError:
            raise ValidationError(f"int {value} is too large for JSON") from None
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _not_str(k)
            out[k] = json_value(v)
        return out
    if isinstance(value, list):
        return [json_value(v) for v in value]
    raise ValidationError(f"Cannot convert {type(value).__name__} to JSON")


def _tags(tags: Any) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
        raise ValidationError(f"Can't extract `{type(tags).__name__}` to `Vec`")
    out = list(tags)
    for t in out:
        if not isinstance(t, str):
            raise _not_str(t)
    return out


def _descriptor(name: Any, display_name: Any, description: Any, owner: Any, docs_url: Any,
                tags: Any, extra: Any) -> dict[str, Any]:
    fields = {"display_name": _text(display_name), "description": _text(description),
              "owner": _text(owner), "docs_url": _text(docs_url), "tags": _tags(tags),
              "extra": {} if extra is None else json_value(extra)}
    if not isinstance(name, str):
        raise _not_str(name)
    return {"name": name, **fields, "descriptor_hash": descriptor_hash(fields)}


def bare(name: str) -> dict[str, Any]:
    """The descriptor of a queue or kind nobody described (as awa-pg 0.6.9 catalogued it)."""
    return _descriptor(name, None, None, None, None, None, None)


class DescriptorMixin:
    """Descriptor declarations of the client; the runtime syncs them to the database."""

    @property
    def _queue_descriptors(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.__dict__.setdefault("_awa_queue_descriptors", {})
        return found

    @property
    def _kind_descriptors(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.__dict__.setdefault("_awa_kind_descriptors", {})
        return found

    def queue_descriptor(self, queue: str, *, display_name: str | None = None,
                         description: str | None = None, owner: str | None = None,
                         docs_url: str | None = None, tags: list[str] | None = None,
                         extra: dict[str, Any] | None = None) -> None:
        """Describe a queue this client runs (a later call replaces the earlier one)."""
        _refuse_after_start(self, "queue_descriptor")
        d = _descriptor(queue, display_name, description, owner, docs_url, tags, extra)
        self._queue_descriptors[queue] = d

    def job_kind_descriptor(self, kind: str, *, display_name: str | None = None,
                            description: str | None = None, owner: str | None = None,
                            docs_url: str | None = None, tags: list[str] | None = None,
                            extra: dict[str, Any] | None = None) -> None:
        """Describe a job kind (a later call replaces the earlier one)."""
        _refuse_after_start(self, "job_kind_descriptor")
        d = _descriptor(kind, display_name, description, owner, docs_url, tags, extra)
        self._kind_descriptors[kind] = d


def _refuse_after_start(client: Any, method: str) -> None:
    """Descriptors are published when start() runs; a later change would never reach
    the catalogue (awa-pg 0.6.9 refused it too, in these words)."""
    if getattr(client, "_runtime", None) is not None:
        raise AwaError(f"{method}() must be called before start()")


def undeclared_queue_error(declared: Iterable[str], running: Iterable[str]) -> AwaError | None:
    """awa-pg 0.6.9's refusal of a queue descriptor for a queue start() does not run."""
    unknown = sorted(set(declared) - set(running))
    if not unknown:
        return None
    return ValidationError(f"queue descriptor declared for unknown queue {unknown[0]!r}")


def check_limits(queues: Iterable[dict[str, Any]], kinds: Iterable[dict[str, Any]]) -> None:
    """What the catalogue tables of awa-pg 0.6.9 refused at start(), refused with its
    message (a ``DatabaseError``): empty or long names, long texts, more than 20 tags."""
    for table, key, descriptors in (("queue_descriptors", "queue", queues),
                                    ("job_kind_descriptors", "kind", kinds)):
        for d in descriptors:
            for suffix, field, limit in _LIMITS:
                size = len(d.get(field) or ())
                bad = size == 0 if field == "name" and limit == 0 else size > limit
                if bad:
                    constraint = f"{table}_{suffix.format(key=key)}"
                    raise DatabaseError(f"error returned from database: new row for relation "
                                        f"\"{table}\" violates check constraint "
                                        f"\"{constraint}\"")


def catalogue(client: Any, running: Iterable[str] | None = None
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The queue and kind descriptors this client publishes: what it declared, and, while
    it runs (or for the ``running`` queues), a bare one for each queue it runs and each
    kind it has a handler for."""
    queues = dict(client._queue_descriptors)
    kinds = dict(client._kind_descriptors)
    runtime = getattr(client, "_runtime", None)
    if running is None and runtime is not None:
        running = getattr(runtime, "queues", {})
    if running is not None:
        for q in running:
            queues.setdefault(q, bare(q))
        for k in getattr(client, "_handlers", {}):
            kinds.setdefault(k, bare(k))
    return list(queues.values()), list(kinds.values())


def descriptor_hashes(client: Any) -> dict[str, dict[str, str]]:
    """What the runtime snapshot writes into ``runtime_instances.descriptor_hashes``."""
    return hashes_of(*catalogue(client))


def hashes_of(queues: Iterable[Mapping[str, Any]], kinds: Iterable[Mapping[str, Any]]
              ) -> dict[str, dict[str, str]]:
    """A catalogue's hashes by name (``catalogue``'s queues and kinds)."""
    return {"queues": {d["name"]: d["descriptor_hash"] for d in queues},
            "kinds": {d["name"]: d["descriptor_hash"] for d in kinds}}
