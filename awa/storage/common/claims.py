"""Claimed rows decoded into running ``Job`` objects, the same for every engine.

Each engine's claim returns tuple rows in one column order (``CLAIM_COLUMNS``, selected as
``claim_select`` writes them); the hot path decodes them positionally, with jsonb read as
text, never through dict rows.  The args come as JSON text (``args::text``): the driver
does not parse them, and the job parses them on their first read (``awa.job.claimed_job``),
so a handler that never reads its args never pays for them.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import JsonbLoader

from awa.job import claimed_job, parse_json_text


class ClaimJsonbLoader(JsonbLoader):
    """jsonb for claimed rows: most metadata is ``{}``, and decoding text skips
    the encoding sniffing ``json.loads`` does on bytes (measurable per job)."""

    def load(self, data: Any) -> Any:
        if data == b"{}":
            return {}
        return parse_json_text(bytes(data).decode())


# Columns the claim hands to the executor, in this order (tuple rows).
CLAIM_COLUMNS = (
    "id", "kind", "queue", "args", "priority", "attempt", "max_attempts", "run_at",
    "deadline_at", "attempted_at", "created_at", "errors", "metadata", "tags",
    "run_lease", "progress",
)


def claim_select(alias: str = "") -> str:
    """``CLAIM_COLUMNS`` as a select list over ``alias`` (a relation name, or none), the
    args as their JSON text."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{c}::text AS {c}" if c == "args" else prefix + c
                     for c in CLAIM_COLUMNS)


# A claimed tuple row (``CLAIM_COLUMNS``) as a running ``Job``: positional, no dict row;
# built by ``awa.job.claimed_job``, which owns the Job's layout (one call per claimed job).
job_from_claim = claimed_job
