"""Small wording helpers shared by the checks."""

from __future__ import annotations

DB = '"$DATABASE_URL"'


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
    return f"awa --database-url {DB} {command}"


def ops(command: str) -> str:
    return f"awa-ops diagnose {command} --database-url {DB}"


def psql(statement: str) -> str:
    return f"psql {DB} -c {shell_quote(statement)}"


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"
