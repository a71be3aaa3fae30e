"""awa_ops.storage's table lists say whose they are: ours, or only the Rust core's."""

from __future__ import annotations

import pytest

from awa_ops.storage import QUEUE_STORAGE_TABLES, RUST_CORE_QUEUE_STORAGE_TABLES, render

OWN_SCHEMA = "awa_qs"


@pytest.mark.engine(f"queue_storage@{OWN_SCHEMA}")
def test_our_queue_storage_layout_has_exactly_the_tables_listed_as_ours(db):
    present = {name: db.execute("SELECT to_regclass(%s) IS NOT NULL AS present",
                                (f"{OWN_SCHEMA}.{name}",)).fetchone()["present"]
               for name in QUEUE_STORAGE_TABLES + RUST_CORE_QUEUE_STORAGE_TABLES}
    assert [n for n in QUEUE_STORAGE_TABLES if not present[n]] == []
    assert [n for n in RUST_CORE_QUEUE_STORAGE_TABLES if present[n]] == []


def test_render_moves_both_lists_into_the_queue_storage_schema():
    text = render("open_lease_claims", schema=OWN_SCHEMA)
    assert f'"{OWN_SCHEMA}".lease_claims' in text and "awa.lease_claims" not in text
