"""Statements read by name from ``.sql`` files (``awa.statements.named_statements``).

One loader reads every file of named queries: the storage transition's, queue storage's
reads, admin, maintenance and rings, the engine-neutral core's, the canonical engine's.  Each
file gives whole statements, its description comments left out, and a name used twice is
refused.
"""

from __future__ import annotations

import sys

import pytest

from awa.statements import named_statements

FILES = [
    ("awa.storage.transition", "transition.sql"),
    *(("awa.storage.queue_storage", f"sql/{name}.sql")
      for name in ("reads", "admin", "maintenance", "rings")),
    *(("awa.storage.common", f"sql/{name}.sql")
      for name in ("reads", "admin", "cron", "maintenance")),
    *(("awa.storage.canonical", f"sql/{name}.sql")
      for name in ("admin", "adopt", "batch_operations", "callbacks", "cron_admin", "enqueue",
                   "execution", "maintenance", "reads")),
]


@pytest.mark.parametrize(("package", "path"), FILES)
def test_every_file_gives_whole_statements(package, path):
    found = named_statements(package, path)
    assert found
    for name, statement in found.items():
        assert statement.strip(), name
        assert not any(line.startswith("--") for line in statement.splitlines()), name
        # A statement is one statement: a name line lost would run two together.
        assert "-- name:" not in statement, name


def test_a_name_used_twice_is_refused(tmp_path, monkeypatch):
    package = tmp_path / "named_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "q.sql").write_text("-- name: one\nSELECT 1\n\n-- name: one\nSELECT 2\n")
    (package / "ok.sql").write_text(
        "-- header\n\n-- name: one\n-- what it does\nSELECT 1\n  -- kept: inside\n\n"
        "-- name: two\nSELECT 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ValueError, match="two statements named 'one'"):
            named_statements("named_probe", "q.sql")
        assert named_statements("named_probe", "ok.sql") == {
            "one": "SELECT 1\n  -- kept: inside", "two": "SELECT 2"}
    finally:
        sys.modules.pop("named_probe", None)
