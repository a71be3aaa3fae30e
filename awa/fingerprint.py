"""Error fingerprints: one poison bug is one group, whatever file, id or value it names.

A stored error text is normalized by masking what varies between occurrences of
the same cause -- quoted literals, paths and file names, UUIDs, hex values,
numbers -- and hashed.  Pure functions only: the DLQ read model, the CLI's bulk
commands (awa.bulk_selection, ``--fingerprint``) and
``diagnose dlq`` group their rows with ``group_errors`` (issue 17, item 4).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

MAX_TEXT = 500  # longer messages are cut before hashing: the head names the cause

# Order matters: each mask runs on the output of the previous ones.
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"'(?:[^'\\]|\\.)*'"), "'?'"),
    (re.compile(r'"(?:[^"\\]|\\.)*"'), '"?"'),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
     "<uuid>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?"), "<path>"),  # /srv/app/x.py
    (re.compile(r"(?<![\w.])[\w+-]+(?:\.[\w+-]+)*\.[a-z][a-z0-9]{0,4}\b(?![\w.(])"), "<file>"),
    (re.compile(r"\b0[xX][0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"[-+]?\d+(?:[.,:]\d+)*"), "<n>"),  # inside words too (e.g. "user42")
    (re.compile(r"\s+"), " "),
)


def normalize(error: str | None) -> str:
    """The error text with its variable parts masked; only the first line counts
    (the rest is usually a traceback or a payload)."""
    text = (error or "").strip().splitlines()[0] if (error or "").strip() else ""
    text = text[:MAX_TEXT]
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text.strip()


def fingerprint(error: str | None, kind: str | None = None) -> str:
    """A short stable id of the cause: kind (when given) plus the normalized text."""
    key = f"{kind or ''}\x00{normalize(error)}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


@dataclass
class ErrorGroup:
    """Every error of one cause: how many, when, where, and which jobs."""

    fingerprint: str
    pattern: str  # the normalized text
    example: str  # one original error text
    count: int = 0
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    kinds: set[str] = field(default_factory=set)
    queues: set[str] = field(default_factory=set)
    job_ids: list[int] = field(default_factory=list)


def group_errors(rows: Iterable[dict[str, Any]], *, error_key: str = "last_error",
                 at_key: str = "dlq_at", id_key: str = "job_id",
                 by_kind: bool = False) -> list[ErrorGroup]:
    """Rows (e.g. DLQ entries) grouped by fingerprint, the biggest group first.

    ``by_kind`` keeps the same text from different kinds apart.
    """
    groups: dict[str, ErrorGroup] = {}
    for row in rows:
        error = row.get(error_key)
        print_ = fingerprint(error, row.get("kind") if by_kind else None)
        group = groups.get(print_)
        if group is None:
            group = groups[print_] = ErrorGroup(print_, normalize(error), str(error or ""))
        group.count += 1
        at = row.get(at_key)
        if isinstance(at, datetime):
            group.first_seen = at if group.first_seen is None else min(group.first_seen, at)
            group.last_seen = at if group.last_seen is None else max(group.last_seen, at)
        if row.get("kind"):
            group.kinds.add(str(row["kind"]))
        if row.get("queue"):
            group.queues.add(str(row["queue"]))
        if row.get(id_key) is not None:
            group.job_ids.append(int(row[id_key]))
    return sorted(groups.values(), key=lambda g: (-g.count, g.pattern))
