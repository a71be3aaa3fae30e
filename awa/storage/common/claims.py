"""Claimed rows decoded into running ``Job`` objects, the same for every engine.

Each engine's claim returns tuple rows in one column order (canonical's ``CLAIM_COLUMNS``); the
hot path decodes them positionally, with jsonb read as text, never through dict rows.
"""

from __future__ import annotations

import json
from typing import Any

from psycopg.types.json import JsonbLoader

from awa.job import claimed_job

_decode_json = json.JSONDecoder().decode


class ClaimJsonbLoader(JsonbLoader):
    """jsonb for claimed rows: most metadata is ``{}``, and decoding text skips
    the encoding sniffing ``json.loads`` does on bytes (measurable per job)."""

    def load(self, data: Any) -> Any:
        if data == b"{}":
            return {}
        return _decode_json(bytes(data).decode())


# A claimed tuple row (``CLAIM_COLUMNS``) as a running ``Job``: positional, no dict row;
# built by ``awa.job.claimed_job``, which owns the Job's layout (one call per claimed job).
job_from_claim = claimed_job
