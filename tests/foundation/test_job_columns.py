"""The job's column list has one source, ``awa.job.JOB_COLUMNS`` (Job's fields); its copies
in SQL, which released migrations keep for good, are checked against it here, so a column
added to one and not the others fails this test instead of a write at run time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from awa.job import JOB_COLUMNS

ROOT = Path(__file__).resolve().parents[2] / "awa"
CANONICAL = ROOT / "schema" / "0001_canonical.sql"
QUEUE_STORAGE_LAYOUT = ROOT / "storage" / "queue_storage" / "sql" / "layout.sql"
VIEW_WRITES = [ROOT / "schema" / "0002_jobs_view_writes.sql",
               ROOT / "schema" / "0006_jobs_view_update_guard.sql"]
DLQ_TAIL = ("dlq_reason", "dlq_at", "original_run_lease")


def table_columns(sql: str, table: str) -> list[str]:
    """The columns a ``CREATE TABLE`` names, in order (constraints, keys and ``LIKE`` left
    out; columns added later by ``ALTER TABLE`` are not the job's list)."""
    found = re.search(rf"CREATE TABLE IF NOT EXISTS {re.escape(table)} \((.*?)\n\)",
                      sql, re.S)
    assert found, f"no CREATE TABLE {table}"
    names = [line.split()[0] for line in found.group(1).splitlines() if line.strip()]
    return [n for n in names if n.upper() not in ("CONSTRAINT", "PRIMARY", "LIKE", "UNIQUE")]


def names(listed: str, pattern: str) -> list[str]:
    """The column names of a comma-separated list whose items match ``pattern``."""
    items = [item.strip() for item in listed.split(",")]
    out = []
    for item in items:
        m = re.fullmatch(pattern, item)
        assert m, f"not a column item: {item!r}"
        out.append(m.group(1))
    return out


def view_write_lists(sql: str) -> dict[str, list[list[str]]]:
    """Every column list of the view's write triggers: the UPDATEs' SET lists, the INSERTs'
    column lists and their VALUES (``NEW.<column>``)."""
    sets = [names(m.group(1), r"(\w+) = NEW\.\1")  # each column its own NEW value
            for m in re.finditer(r"^\s+SET (\w+ = NEW\..*?)\n\s*WHERE", sql, re.S | re.M)]
    inserts = [names(m.group(1), r"(\w+)")
               for m in re.finditer(r"INSERT INTO awa\.\w+ \((.*?)\)\s*\n", sql)]
    values = [names(m.group(1), r"NEW\.(\w+)")
              for m in re.finditer(r"VALUES \((NEW\..*?)\);", sql, re.S)]
    return {"SET": sets, "INSERT": inserts, "VALUES": values}


def test_the_job_tables_of_migration_0001_have_the_columns():
    sql = CANONICAL.read_text()
    assert table_columns(sql, "awa.jobs_hot") == list(JOB_COLUMNS)
    # The DLQ keeps the job's columns under its own key name, then why and when.
    assert table_columns(sql, "awa.dlq_entries") == ["job_id", *JOB_COLUMNS[1:], *DLQ_TAIL]


def test_queue_storages_done_entries_have_the_columns():
    sql = QUEUE_STORAGE_LAYOUT.read_text()
    assert table_columns(sql, "awa.done_entries") == ["ready_slot", *JOB_COLUMNS]


@pytest.mark.parametrize("path", VIEW_WRITES, ids=lambda p: p.name)
def test_the_view_write_triggers_name_every_column(path: Path):
    lists = view_write_lists(path.read_text())
    # Each function moves a row within its table (two UPDATEs) or across (two INSERTs).
    assert {kind: len(found) for kind, found in lists.items()} == {
        "SET": 2, "INSERT": 2, "VALUES": 2}
    for kind, found in lists.items():
        for listed in found:
            assert listed == list(JOB_COLUMNS), f"{path.name} {kind}"


def test_a_drifted_copy_fails():
    """The parsers see a column missing from a copy (so the checks above can fail)."""
    sql = CANONICAL.read_text().replace("    progress             jsonb,\n", "", 1)
    assert table_columns(sql, "awa.jobs_hot") != list(JOB_COLUMNS)
    writes = VIEW_WRITES[0].read_text().replace(", NEW.progress)", ")", 1)
    assert any(listed != list(JOB_COLUMNS) for listed in view_write_lists(writes)["VALUES"])
