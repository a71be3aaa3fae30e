"""Small wording helpers shared by the checks."""

from __future__ import annotations

import os
from contextvars import ContextVar

from awa import db

ENV_REF = '"$DATABASE_URL"'
# The database the running check reads (``diagnose.run_check`` sets it): suggested commands
# name it, so they act on the database the tool used, not whatever $DATABASE_URL says.
USING: ContextVar[str | None] = ContextVar("awa_ops_database_url", default=None)


def db_ref() -> str:
    """``"$DATABASE_URL"`` when that variable names the database in use, else the URL in
    use exactly as the operator gave it, quoted: a suggested command must run as printed,
    and a masked password (``***``) would make it fail."""
    url = USING.get()
    if url is None or os.environ.get(db.DATABASE_URL_ENV) == url:
        return ENV_REF
    return shell_quote(url)


def secs(value: float | None) -> str:
    if value is None:
        return "never"
    value = float(value)
    if abs(value) < 120:
        return f"{value:.1f}s"
    if abs(value) < 3600:
        return f"{value / 60:.1f}m"
    if abs(value) < 172800:
        return f"{value / 3600:.1f}h"
    return f"{value / 86400:.1f}d"


def awa(command: str) -> str:
    return f"awa --database-url {db_ref()} {command}"


def ops(command: str) -> str:
    return f"awa-ops diagnose {command} --database-url {db_ref()}"


def psql(statement: str) -> str:
    return f"psql {db_ref()} -c {shell_quote(statement)}"


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"
