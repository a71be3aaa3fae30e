"""schemathesis hooks for tests/api/test_fuzz.py and benchmarks/api_fuzz.py.

Every check runs, and every failure counts, except three kinds.  A read-only server's 503
for a write (the reference's status, documented on every write route) is the answer due,
not a server error.  ``GET /api/dlq/{id}`` answering 200 ``null`` after a ``DELETE`` (a
"deleted resource still available", ST301) is the reference's answer for an id not in the
DLQ, not the entry.  And a "schema-valid request rejected" (ST202) that is a 400 for one
of two reasons JSON Schema cannot state:

* a queue name of at most 59 characters but more than 59 UTF-8 bytes (``maxLength``
  counts characters; the rule is awa's, ``validate_queue``);
* the reference's 400 for an unknown batch operation, one that cannot be cancelled, or
  an unknown cron schedule to trigger (docs/api.md: kept for compatibility).
"""

from __future__ import annotations

from typing import Any

import schemathesis

EXPLAINED_400 = ("fit the LISTEN channel", "validation error: batch operation not found",
                 "validation error: batch operation cannot be cancelled",
                 "validation error: cron job not found")


READ_ONLY = "awa serve is connected to a read-only database; admin actions are disabled"


@schemathesis.hook
def filter_failure(ctx: Any, failure: Any, case: Any, response: Any) -> bool:
    code = getattr(failure, "code", None)
    if code == "ST101" and response.status_code == 503:
        return READ_ONLY not in response.text
    if code == "ST301":
        return not (response.status_code == 200 and response.text.strip() == "null")
    if code != "ST202" or response.status_code != 400:
        return True
    return not any(reason in response.text for reason in EXPLAINED_400)
