"""What an engine installs is what its ``.sql`` files say: every function and view.

For each engine a ``Source`` names its files in install order (for canonical: the numbered
migrations in ``awa/schema/``, where a later ``CREATE OR REPLACE`` supersedes an earlier one)
and how they name the engine's schema.  The check, on a database ``awa migrate`` laid out for
the engine:

* every function and view in the engine's schemas is defined in the files, and every
  definition in the files is installed;
* each definition, run again from its file inside a transaction that is rolled back, leaves
  ``pg_get_functiondef`` / ``pg_get_viewdef`` exactly as they were: PostgreSQL itself
  normalises both sides, so a changed body, signature, attribute or view query shows as a
  difference.

Queue storage's files are the canonical migrations (the tables both engines share), then its
own in ``awa/storage/queue_storage/sql/`` in ``procedures.FILES`` order (``jobs_view.sql``
replaces the ``awa.jobs`` view).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from awa.schema import catalogue
from awa.schema.layout import QUEUE_STORAGE_LAYOUT_VERSION
from awa.storage.queue_storage import procedures

SCHEMA_DIR = Path(catalogue.__file__).parent
QUEUE_STORAGE_SQL = Path(procedures.__file__).parent / "sql"


@dataclass(frozen=True)
class Source:
    """An engine's SQL: its files in install order and the schemas its objects live in."""

    files: tuple[Path, ...]
    schemas: tuple[str, ...] = ("awa",)


MIGRATIONS = tuple(sorted(SCHEMA_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")))
SOURCES = {
    "canonical": Source(MIGRATIONS),
    "queue_storage": Source(MIGRATIONS
                            + tuple(QUEUE_STORAGE_SQL / name for name in procedures.FILES)),
}

_CREATE = re.compile(r"\bCREATE\s+OR\s+REPLACE\s+(FUNCTION|VIEW)\s+([a-z_][a-z0-9_]*)\."
                     r"([a-z_][a-z0-9_]*)", re.IGNORECASE)
_DOLLAR = re.compile(r"\$([A-Za-z_]*)\$")


@dataclass(frozen=True)
class Definition:
    kind: str  # function | view
    name: str  # schema.name
    sql: str  # the CREATE OR REPLACE statement as the file writes it
    origin: str  # file:line


def _statement_end(text: str, start: int, kind: str) -> int:
    """Where the statement starting at ``start`` ends (just past its ``;``).

    A function's body is dollar-quoted: the statement ends at the first ``;`` after the
    quote closes.  A view's query holds no dollar quote and ends at its first ``;``.
    """
    at = start
    if kind == "function":
        opened = _DOLLAR.search(text, start)
        assert opened is not None, f"function without a dollar-quoted body at {start}"
        closing = text.index(opened.group(0), opened.end())
        at = closing + len(opened.group(0))
    return text.index(";", at) + 1


def definitions(source: Source) -> dict[tuple[str, str], Definition]:
    """The last definition of each function and view in ``source``'s files."""
    found: dict[tuple[str, str], Definition] = {}
    for path in source.files:
        text = path.read_text()
        for match in _CREATE.finditer(text):
            kind = match.group(1).lower()
            name = f"{match.group(2)}.{match.group(3)}".lower()
            sql = text[match.start():_statement_end(text, match.start(), kind)]
            line = text.count("\n", 0, match.start()) + 1
            found[(kind, name)] = Definition(kind, name, sql, f"{path.name}:{line}")
    return found


INSTALLED = """
SELECT 'function' AS kind, n.nspname || '.' || p.proname AS name, p.oid::regprocedure::text
       AS ident
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = ANY(%(schemas)s)
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
UNION ALL
SELECT 'view', schemaname || '.' || viewname, schemaname || '.' || viewname
  FROM pg_views WHERE schemaname = ANY(%(schemas)s)"""
FUNCTION_DEFS = """
SELECT p.oid::regprocedure::text AS ident, pg_get_functiondef(p.oid) AS def
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname || '.' || p.proname = %s ORDER BY 1"""
VIEW_DEF = "SELECT pg_get_viewdef(%s::regclass, true) AS def"


def installed(conn: psycopg.Connection, source: Source) -> set[tuple[str, str]]:
    rows = conn.execute(INSTALLED, {"schemas": list(source.schemas)}).fetchall()
    return {(kind, name) for kind, name, _ in rows}


def _installed_text(conn: psycopg.Connection, d: Definition) -> list[tuple[str, str]]:
    if d.kind == "view":
        row = conn.execute(VIEW_DEF, (d.name,)).fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        return [(d.name, row[0])]
    return [tuple(r) for r in conn.execute(FUNCTION_DEFS, (d.name,)).fetchall()]


def differences(conn: psycopg.Connection, defs: dict[tuple[str, str], Definition]
                ) -> Iterator[str]:
    """Each definition whose file text would change what is installed, with both texts."""
    for d in defs.values():
        before = _installed_text(conn, d)
        with conn.transaction():
            conn.execute(d.sql)
            after = _installed_text(conn, d)
            raise psycopg.Rollback()
        if after != before:
            yield (f"{d.kind} {d.name} ({d.origin}) differs from what is installed:\n"
                   f"--- installed\n{before}\n--- from the file\n{after}")


@pytest.mark.parametrize("engine_name", sorted(SOURCES))
def test_installed_functions_and_views_are_the_files(engine_name, database_url):
    source = SOURCES[engine_name]
    defs = definitions(source)
    with psycopg.connect(database_url, autocommit=True) as conn:
        have = installed(conn, source)
        assert have == set(defs), (
            f"installed but in no file: {sorted(have - set(defs))}; "
            f"in a file but not installed: {sorted(set(defs) - have)}")
        assert list(differences(conn, defs)) == []


# Per engine: a function, and an edit of its body that changes nothing it does.
_EDITS = {
    "canonical": ("awa.notify_available", "PERFORM pg_notify", "PERFORM  pg_notify"),
    "queue_storage": ("awa.qs_heartbeat", "UPDATE awa.leases l SET heartbeat_at = now()",
                      "UPDATE awa.leases l SET heartbeat_at  = now()"),
}


@pytest.mark.parametrize("engine_name", sorted(_EDITS))
def test_a_file_that_differs_from_the_installed_function_is_caught(engine_name, database_url):
    """The check itself: a changed body and a changed view query are each reported."""
    defs = definitions(SOURCES[engine_name])
    name, old, new = _EDITS[engine_name]
    function = defs[("function", name)]
    view = defs[("view", "awa.jobs")]
    changed = {
        ("function", function.name): Definition(
            function.kind, function.name, function.sql.replace(old, new), function.origin),
        ("view", view.name): Definition(
            view.kind, view.name,
            view.sql.replace("UNION ALL", "UNION"), view.origin),
    }
    assert all(c.sql != defs[k].sql for k, c in changed.items())
    with psycopg.connect(database_url, autocommit=True) as conn:
        found = list(differences(conn, changed))
        assert [f.split(" (")[0] for f in found] == [f"function {name}", "view awa.jobs"]
        # Rolled back: what is installed is untouched.
        assert list(differences(conn, {k: defs[k] for k in changed})) == []


def test_the_queue_storage_layout_version_is_the_codes():
    """``sql/layout_version.sql`` installs the version ``awa.schema.layout`` requires."""
    text = (QUEUE_STORAGE_SQL / "layout_version.sql").read_text()
    assert f"$$ SELECT {QUEUE_STORAGE_LAYOUT_VERSION} $$" in text


# Statements calling the open-receipt rule and the attempt steps built on it, as the
# attempt-ending functions and the callback registration do.
_RULE_CALLS = {
    "qs_receipt_is_open": """
SELECT c.job_id, o.is_open FROM awa.lease_claims c
  CROSS JOIN LATERAL awa.qs_receipt_is_open(c.claim_slot, c.job_id, c.run_lease,
                                            c.receipt_id) o
 WHERE c.job_id = 1 AND c.run_lease = 1""",
    "qs_attempt_receipt": """
SELECT u.*, c.* FROM unnest('{1,2}'::bigint[], '{1,1}'::bigint[]) AS u(id, lease)
 CROSS JOIN LATERAL awa.qs_attempt_receipt(u.id, u.lease) c""",
    "qs_attempts": """
SELECT * FROM awa.qs_attempts('{1,2}', '{1,1}', '{}', '{}', '{}', '{}', '{}')""",
}


def _plan_nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _plan_nodes(child)


def _calls_and_relations(conn: psycopg.Connection, statement: str) -> tuple[set, set]:
    """The functions the plan calls, and the relations it reads."""
    row = conn.execute("EXPLAIN (FORMAT JSON) " + statement).fetchone()
    assert row is not None
    nodes = list(_plan_nodes(row[0][0]["Plan"]))
    return ({n["Function Name"] for n in nodes if "Function Name" in n},
            {n["Relation Name"] for n in nodes if "Relation Name" in n})


@pytest.mark.parametrize("engine_name", ["queue_storage"])
def test_the_open_receipt_rule_is_inlined_where_it_is_used(engine_name, database_url):
    """awa.qs_receipt_is_open is the rule's one copy, and awa.qs_attempt_receipt and
    awa.qs_attempts (a batch's attempts over it) the one ``att`` step, only because the
    planner inlines them: the caller's plan probes the claim and closure tables itself, with
    no function call per receipt.  The same function made VOLATILE (in a rolled-back
    transaction) shows the call."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name, statement in _RULE_CALLS.items():
            calls, relations = _calls_and_relations(conn, statement)
            assert name not in calls, (name, calls)
            assert any(r.startswith("lease_claim_closure_batches") for r in relations), name
            with conn.transaction():
                conn.execute(f"ALTER FUNCTION awa.{name} VOLATILE")
                assert name in _calls_and_relations(conn, statement)[0], name
                raise psycopg.Rollback()


def test_the_open_receipt_rule_is_written_once():
    """No statement of the engine spells out the closure probes but the rule itself."""
    engine = Path(procedures.__file__).parent
    probe = re.compile(r"NOT EXISTS \(SELECT 1 FROM awa\.lease_claim_closure_batches")
    found = {str(p.relative_to(engine)): len(probe.findall(p.read_text()))
             for p in [*engine.glob("*.py"), *engine.glob("sql/*.sql")]}
    assert {k: n for k, n in found.items() if n} == {"sql/open_receipts.sql": 1}
