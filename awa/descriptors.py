"""Queue and job-kind descriptors: the catalogue an operator reads.

``client.queue_descriptor(...)`` / ``client.job_kind_descriptor(...)`` declare
display name, description, owner, docs URL, tags and extra fields next to the
worker code.  Each descriptor's hash is BLAKE3 over its canonical JSON, so
runtimes that disagree about a descriptor (drift during a deploy) show it in
``runtime_instances.descriptor_hashes``:
``{"queues": {queue: hash}, "kinds": {kind: hash}}``.
"""

from __future__ import annotations

from typing import Any

import blake3

from awa.job import ValidationError
from awa.serialization import canonical_json, require_json

DESCRIPTOR_FIELDS = ("display_name", "description", "owner", "docs_url", "tags", "extra")


def descriptor_hash(fields: dict[str, Any]) -> str:
    """BLAKE3 (hex) of the descriptor's canonical JSON (sorted keys, compact)."""
    body = {k: fields.get(k) for k in DESCRIPTOR_FIELDS}
    return blake3.blake3(canonical_json(body).encode()).hexdigest()


def _descriptor(what: str, name: str, display_name: str | None, description: str | None,
                owner: str | None, docs_url: str | None, tags: list[str] | None,
                extra: dict[str, Any] | None) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise ValidationError(f"{what} descriptor needs a non-empty {what} name")
    for label, value in (("display_name", display_name), ("description", description),
                         ("owner", owner), ("docs_url", docs_url)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"{what} descriptor {name!r}: {label} must be a string")
    tags = list(tags) if tags is not None else []
    if not all(isinstance(t, str) for t in tags):
        raise ValidationError(f"{what} descriptor {name!r}: tags must be a list of strings")
    extra = dict(extra) if extra is not None else {}
    require_json(extra, f"{what} descriptor {name!r}: extra")
    fields = {"display_name": display_name, "description": description, "owner": owner,
              "docs_url": docs_url, "tags": tags, "extra": extra}
    return {"name": name, **fields, "descriptor_hash": descriptor_hash(fields)}


class DescriptorMixin:
    """Descriptor declarations of the client; the runtime syncs them to the database."""

    @property
    def _queue_descriptors(self) -> dict[str, dict[str, Any]]:
        return self.__dict__.setdefault("_awa_queue_descriptors", {})

    @property
    def _kind_descriptors(self) -> dict[str, dict[str, Any]]:
        return self.__dict__.setdefault("_awa_kind_descriptors", {})

    def queue_descriptor(self, queue: str, *, display_name: str | None = None,
                         description: str | None = None, owner: str | None = None,
                         docs_url: str | None = None, tags: list[str] | None = None,
                         extra: dict[str, Any] | None = None) -> None:
        _refuse_after_start(self)
        self._queue_descriptors[queue] = _descriptor("queue", queue, display_name,
                                                     description, owner, docs_url, tags, extra)

    def job_kind_descriptor(self, kind: str, *, display_name: str | None = None,
                            description: str | None = None, owner: str | None = None,
                            docs_url: str | None = None, tags: list[str] | None = None,
                            extra: dict[str, Any] | None = None) -> None:
        _refuse_after_start(self)
        self._kind_descriptors[kind] = _descriptor("kind", kind, display_name, description,
                                                   owner, docs_url, tags, extra)


def _refuse_after_start(client: Any) -> None:
    """Descriptors are published when start() runs; a later change would never reach
    the catalogue (awa-pg 0.6.9 refused it too)."""
    if getattr(client, "_runtime", None) is not None:
        from awa.job import AwaError
        raise AwaError("descriptors are fixed once start() ran: declare them before start()")


def descriptor_hashes(client: Any) -> dict[str, dict[str, str]]:
    """What the runtime snapshot writes into ``runtime_instances.descriptor_hashes``."""
    return {
        "queues": {q: d["descriptor_hash"] for q, d in client._queue_descriptors.items()},
        "kinds": {k: d["descriptor_hash"] for k, d in client._kind_descriptors.items()},
    }
