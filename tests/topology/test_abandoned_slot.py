"""An abandoned replication slot pins the xmin horizon (issue 46's matrix scenario
replication_slot_pinned): a standby with hot_standby_feedback streamed through a physical
slot and is gone.  The exporter gives the inactive slot an age in seconds -- how long it has
seen it inactive with that xmin -- so AwaXminHorizonPinned can fire for it (PostgreSQL
records no time for a slot's xmin); `diagnose mvcc-horizon` names it with the command."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from awa_ops.exporter import DatabaseCollector
from support.polling import wait_until
from support.standby import ReplicaPair
from topology.test_standby import _checks, _ops

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.xdist_group("standby")]
SLOT = "standby_gone"


def _slot_age(collector: DatabaseCollector) -> float | None:
    """One scrape through the exporter's own path (its event loop thread)."""
    families = {m.name: m for m in collector.collect()}
    ages = {s.labels["awa_db_xmin_source"]: s.value
            for s in families["awa_db_xmin_horizon_age_seconds"].samples}
    return ages.get("replication_slot")


def _slot_wal(collector: DatabaseCollector) -> dict[tuple[str, str], float]:
    """awa_db_replication_slot_retained_wal_bytes by (slot, active), from one scrape."""
    families = {m.name: m for m in collector.collect()}
    return {(s.labels["awa_db_replication_slot"], s.labels["awa_db_replication_slot_active"]):
            s.value for s in families["awa_db_replication_slot_retained_wal_bytes"].samples}


def test_an_abandoned_slot_has_a_horizon_age_and_is_named(test_engine):
    with ReplicaPair(hot_standby_feedback=True, engine=test_engine, slot=SLOT) as pair:
        with psycopg.connect(pair.primary_url, autocommit=True) as conn:
            wait_until(lambda: conn.execute(
                "SELECT xmin IS NOT NULL FROM pg_replication_slots WHERE slot_name = %s",
                (SLOT,)).fetchone()[0], timeout=60, message="the slot's feedback xmin")
            collector = DatabaseCollector(pair.primary_url)
            try:
                assert _slot_age(collector) is None  # active: its consumer moves it
                assert set(_slot_wal(collector)) == {(SLOT, "true")}
                assert pair.standby is not None
                pair.standby.stop("immediate")  # the standby's host is gone; the slot stays
                wait_until(lambda: not conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                    (SLOT,)).fetchone()[0], timeout=30, message="the slot inactive")
                first = _slot_age(collector)
                assert first is not None and first < 5
                time.sleep(1.5)
                later = _slot_age(collector)
                assert later is not None and later >= first + 1
                findings = _checks(_ops("diagnose", "mvcc-horizon", "--database-url",
                                        pair.primary_url, "--json"))["mvcc-horizon"]["findings"]
                named = [f for f in findings if f"replication slot {SLOT}" in f["summary"]]
                assert named and named[0]["severity"] == "warning"
                assert "INACTIVE" in named[0]["summary"]
                assert f"pg_drop_replication_slot('\\''{SLOT}'\\'')" in named[0]["next_step"]
                conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
                assert _slot_age(collector) is None  # dropped: nothing holds the horizon

                # A slot that never had a consumer pins no rows, but keeps WAL from its
                # reservation on: named as a disk risk, not as a horizon holder.
                conn.execute("SELECT pg_create_physical_replication_slot('wal_only', true)")
                conn.execute("CREATE TABLE wal_filler AS SELECT g, repeat('x', 200) AS pad "
                             "FROM generate_series(1, 20000) g")
                findings = _checks(_ops("diagnose", "mvcc-horizon", "--database-url",
                                        pair.primary_url, "--json"))["mvcc-horizon"]["findings"]
                kept = [f for f in findings if "replication slot wal_only" in f["summary"]]
                assert len(kept) == 1 and kept[0]["severity"] == "warning", findings
                assert "pins no rows but retains" in kept[0]["summary"]
                assert "MiB of WAL" in kept[0]["summary"]
                # the exporter's series, which AwaReplicationSlotRetainingWal reads: the WAL
                # written since the slot reserved it (the 20,000 rows above, > 4 MiB)
                kept_bytes = _slot_wal(collector)
                assert set(kept_bytes) == {("wal_only", "false")}
                assert kept_bytes[("wal_only", "false")] > 4 * 2**20
                assert "pg_drop_replication_slot" in kept[0]["next_step"]
                conn.execute("SELECT pg_drop_replication_slot('wal_only')")
                assert _slot_wal(collector) == {}  # no slot, no series
            finally:
                assert collector._loop is not None
                asyncio.run_coroutine_threadsafe(collector.close(), collector._loop).result(10)
