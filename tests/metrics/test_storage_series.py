"""Queue-storage series: the leader's ring rotation / prune metrics and the exporter's ring
state, each equal to what the database holds (awa.queue_ring_state and the partitions)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from awa import instruments, metrics
from awa.runtime.maintenance.retention import RingTracker
from awa.storage.engine import PRUNE_BLOCKERS, PruneReport, RingPass
from awa_ops.exporter import DatabaseCollector

from .conftest import scrape, value

TABLES = {"queue": ("ready_entries", "ready_tombstones", "done_entries"),
          "claim": ("lease_claims", "lease_claim_closures", "lease_claim_closure_batches"),
          "lease": ("leases",)}
SHORT = {"poll_interval_ms": 50, "promote_interval_ms": 50, "leader_election_interval_ms": 200,
         "snapshot_interval_ms": 200, "queue_health_interval_ms": 200,
         "cleanup_interval_ms": 300,
         # the queue ring writes a slot for retention / (slots - 2): half a second
         "completed_retention_hours": 1 / 3600}


def P(name: str) -> str:  # noqa: N802 - reads like the series name it returns
    return metrics.by_name(name).prometheus


def database_rings(db) -> dict[str, dict]:
    """Each ring as the database holds it, with the slots whose partitions hold rows."""
    out = {}
    for r in db.execute("SELECT ring, current_slot, slot_count, generation, "
                        "EXTRACT(EPOCH FROM now() - rotated_at)::float8 AS age "
                        "FROM awa.queue_ring_state").fetchall():
        occupied = [s for s in range(r["slot_count"]) if any(
            db.execute(f"SELECT EXISTS (SELECT 1 FROM awa.{t}_{s}) AS x").fetchone()["x"]
            for t in TABLES[r["ring"]])]
        out[r["ring"]] = {**r, "occupied": occupied}
    return out


def test_blocker_names_are_the_catalogue_s():
    assert PRUNE_BLOCKERS == metrics.PRUNE_BLOCKERS


@pytest.mark.engine("queue_storage")
async def test_leader_ring_series_match_the_database(client, db):
    queue, idle = f"rg_{uuid.uuid4().hex[:8]}", f"rgidle_{uuid.uuid4().hex[:8]}"

    @client.task(dict, kind="rg_ok", queue=queue)
    async def ok(job):
        return None

    # counters are per process and ring labels are shared: count from what is there now
    counters = ("awa.maintenance.rotate.attempts", "awa.maintenance.rotate.skipped",
                "awa.maintenance.rotate.duration", "awa.maintenance.prune.duration",
                "awa.maintenance.prune.attempts", "awa.maintenance.prune.truncated",
                "awa.maintenance.prune.skipped")
    baseline = {}
    for name in counters:
        store = getattr(instruments.METRICS, metrics.by_name(name).attribute_name)
        for key, got in store.snapshot().items():
            n = got.count if isinstance(got, instruments.HistogramPoint) else got
            for labels in {key[:1], key[:2]}:  # (ring,) and (ring, blocker)
                baseline[(name, labels)] = baseline.get((name, labels), 0) + n
    # jobs of a queue nobody works stay claimable in the slot they were written to
    await client.insert_many([{}] * 3, kind="rg_idle", queue=idle)
    await client.start([{"name": queue, "max_workers": 4}], metrics_addr="127.0.0.1:0", **SHORT)
    try:
        url = client.runtime.metrics_endpoint.url
        await client.insert_many([{}] * 20, kind="rg_ok", queue=queue)
        # the idle jobs' slot is sealed, and held by them, after the queue ring rotates once
        deadline = time.monotonic() + 20
        while True:
            series = await asyncio.to_thread(scrape, url)
            if value(series, P("awa.storage.blocked_slots"), awa_ring="queue",
                     awa_prune_blocker="ready") >= 1 \
                    and value(series, P("awa.maintenance.rotate.skipped"), awa_ring="queue",
                              awa_prune_blocker="ready") \
                    > baseline.get(("awa.maintenance.rotate.skipped", ("queue", "ready")), 0) \
                    and value(series, P("awa.maintenance.rotate.attempts"),
                              awa_ring="lease") >= 3:
                break
            assert time.monotonic() < deadline, "the queue ring never sealed the idle jobs"
            await asyncio.sleep(0.1)
        # the leader keeps ticking: read the database between two scrapes that agree
        for _ in range(50):
            before = await asyncio.to_thread(scrape, url)
            rings = database_rings(db)
            after = await asyncio.to_thread(scrape, url)

            def ring_values(s):
                return {(r, n): value(s, P(n), awa_ring=r) for r in TABLES
                        for n in ("awa.ring.current_slot", "awa.ring.generation",
                                  "awa.ring.occupied_slots",
                                  "awa.maintenance.rotate.attempts",
                                  # a scrape can read a tick's attempt before its skip
                                  # (the scraper is a thread): both must hold still
                                  "awa.maintenance.rotate.skipped")}
            settled = ring_values(after)
            # a tick between the scrapes, or one that committed its rotation but had not
            # recorded it yet when the database was read: look again
            if ring_values(before) == settled and all(
                    settled[(r, "awa.ring.generation")] == rings[r]["generation"]
                    and settled[(r, "awa.ring.occupied_slots")] == len(rings[r]["occupied"])
                    for r in TABLES):
                series = after
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the leader's ring gauges never held still for a scrape")
    finally:
        await client.shutdown()

    def v(name, suffix="", **labels):
        got = value(series, P(name) + suffix, **labels)
        if name in counters and "awa_ring" in labels:
            key = (labels["awa_ring"],) + tuple(
                labels[k] for k in ("awa_prune_blocker",) if k in labels)
            got -= baseline.get((name, key), 0)
        return got

    for ring, r in rings.items():
        assert v("awa.ring.current_slot", awa_ring=ring) == r["current_slot"], ring
        assert v("awa.ring.generation", awa_ring=ring) == r["generation"], ring
        assert v("awa.ring.slot_count", awa_ring=ring) == r["slot_count"], ring
        assert v("awa.ring.occupied_slots", awa_ring=ring) == len(r["occupied"]), ring
        # one rotation attempt per due rotation; each either moved the ring or was skipped
        attempts = v("awa.maintenance.rotate.attempts", awa_ring=ring)
        assert attempts >= 3
        assert attempts == r["generation"] + v("awa.maintenance.rotate.skipped", awa_ring=ring)
        assert v("awa.maintenance.rotate.duration", "_count", awa_ring=ring) == attempts
        # prune runs every tick, also those where the queue ring's rotation was not yet due
        assert v("awa.maintenance.prune.duration", "_count", awa_ring=ring) >= attempts
        # every sealed slot prune looked at was truncated or skipped with a blocker
        assert v("awa.maintenance.prune.attempts", awa_ring=ring) == \
            v("awa.maintenance.prune.truncated", awa_ring=ring) + \
            v("awa.maintenance.prune.skipped", awa_ring=ring), ring
    # the claim ring's receipts were all closed: it rotated and truncated
    assert rings["claim"]["generation"] >= 1 and v("awa.maintenance.prune.truncated",
                                                   awa_ring="claim") >= 1
    # the idle jobs hold the queue slot they were written to: blocked by "ready", for a while
    sealed_queue = [s for s in rings["queue"]["occupied"] if s != rings["queue"]["current_slot"]]
    idle_slot = db.execute("SELECT ready_slot FROM awa.ready_entries WHERE queue = %s LIMIT 1",
                           (idle,)).fetchone()["ready_slot"]
    assert idle_slot in sealed_queue
    assert v("awa.storage.blocked_slots", awa_ring="queue") == len(sealed_queue)
    assert v("awa.storage.blocked_slots", awa_ring="queue", awa_prune_blocker="ready") >= 1
    assert v("awa.storage.prune_blocked_age", awa_ring="queue",
             awa_prune_blocker="ready") > 0
    assert v("awa.maintenance.prune.skipped", awa_ring="queue", awa_prune_blocker="ready") >= 1
    # the queue ring wrapped onto the idle jobs' slot: its rotation was skipped, blocked by them
    assert v("awa.maintenance.rotate.skipped", awa_ring="queue", awa_prune_blocker="ready") >= 1
    assert rings["queue"]["current_slot"] == (idle_slot - 1) % rings["queue"]["slot_count"]
    assert v("awa.storage.info", awa_storage_engine="queue_storage") == 1
    blockers = {s.labels["awa_prune_blocker"] for s in series[P("awa.maintenance.prune.skipped")]}
    assert blockers <= set(metrics.PRUNE_BLOCKERS)


def _exporter_samples(url: str) -> dict[str, dict]:
    async def run():
        collector = DatabaseCollector(url)
        try:
            return await collector.scrape()
        finally:
            await collector.close()

    out: dict[str, dict] = {}
    for family in asyncio.run(run()):
        out.setdefault(family.name, {})
        for s in family.samples:
            out[family.name][s.labels.get("awa_ring")] = s.value
    return out


@pytest.mark.engine("queue_storage")
def test_exporter_reports_rings_from_the_database(database_url, db):
    from awa import Client

    client = Client(database_url)
    try:
        client.insert_many([{}] * 5, kind="rx", queue="rx")
    finally:
        client.close()
    # An old rotation of the lease ring, set by the engine's function for it.
    assert db.execute("SELECT awa.qs_arrange_rotated_at('lease', now() - interval '90 seconds') "
                      "AS found").fetchone()["found"]
    samples = _exporter_samples(database_url)
    rings = database_rings(db)
    assert set(samples["awa_db_ring_current_slot"]) == set(rings) == {"queue", "claim", "lease"}
    for ring, r in rings.items():
        assert samples["awa_db_ring_current_slot"][ring] == r["current_slot"]
        assert samples["awa_db_ring_generation"][ring] == r["generation"]
        assert samples["awa_db_ring_slot_count"][ring] == r["slot_count"]
        assert samples["awa_db_ring_occupied_slots"][ring] == len(r["occupied"])
    assert rings["queue"]["occupied"] == [rings["queue"]["current_slot"]]  # the 5 jobs
    assert 90 <= samples["awa_db_ring_rotation_age_seconds"]["lease"] < 120


@pytest.mark.engine("canonical")
def test_exporter_reports_no_ring_on_canonical(database_url):
    """Canonical has no rings (checked on its layout, which this test needs)."""
    samples = _exporter_samples(database_url)
    for spec in metrics.DATABASE_METRICS:
        if spec.name.startswith("awa.db.ring."):
            assert samples[spec.prometheus] == {}, spec.name
    assert samples["awa_db_exporter_scrape_success"][None] == 1.0


def test_blocked_age_runs_from_the_first_blocked_tick_and_resets_when_truncated():
    tracker = RingTracker()
    ring = RingPass("queue", current_slot=1, slot_count=4, generation=1, occupied=(0, 1))

    def tick(blockers, now):
        tracker.record(PruneReport(attempted=list(blockers), blockers=dict(blockers),
                                   rings=[ring]), now=now)

    tick({("queue", 0): "ready"}, now=100.0)
    tick({("queue", 0): "lease"}, now=130.0)  # the same slot, now held by a lease
    gauge = instruments.METRICS.storage_prune_blocked_age
    if instruments.recording_live():
        assert gauge.value(("queue", "lease")) == 30.0
        assert gauge.value(("queue", "ready")) == 0.0  # published before, gone now
    assert tracker.blocked_since == {("queue", 0): 100.0}
    tick({}, now=140.0)  # truncated
    assert tracker.blocked_since == {} and tracker.published == set()
    tick({("queue", 0): "ready"}, now=150.0)
    assert tracker.blocked_since == {("queue", 0): 150.0}


@pytest.mark.engine("queue_storage")
async def test_a_rotation_not_yet_due_is_no_attempt_and_no_skip(client, db):
    """The queue ring moves once per slot span (hours by default): the ticks in between are
    neither rotation attempts nor skips, so a healthy fresh database shows no wrap pressure
    (AwaRingWrapPressure once fired 15 minutes after `awa migrate`)."""
    queue = f"rgnd_{uuid.uuid4().hex[:8]}"

    @client.task(dict, kind="rgnd", queue=queue)
    async def ok(job):
        return None

    def counted(name: str, ring: str) -> float:
        store = getattr(instruments.METRICS, metrics.by_name(name).attribute_name)
        return sum(v for k, v in store.snapshot().items() if k[0] == ring)

    before = {(n, r): counted(n, r) for n in ("awa.maintenance.rotate.attempts",
                                               "awa.maintenance.rotate.skipped")
              for r in ("queue", "lease")}
    short = {k: v for k, v in SHORT.items() if k != "completed_retention_hours"}
    await client.start([{"name": queue, "max_workers": 2}], metrics_addr="127.0.0.1:0", **short)
    try:
        await client.insert_many([{}] * 5, kind="rgnd", queue=queue)
        url = client.runtime.metrics_endpoint.url
        deadline = time.monotonic() + 20
        while value(await asyncio.to_thread(scrape, url), P("awa.maintenance.rotate.attempts"),
                    awa_ring="lease") < before[("awa.maintenance.rotate.attempts", "lease")] + 3:
            assert time.monotonic() < deadline, "the leader never ticked three times"
            await asyncio.sleep(0.1)
    finally:
        await client.shutdown()
    assert counted("awa.maintenance.rotate.attempts", "queue") == \
        before[("awa.maintenance.rotate.attempts", "queue")]
    assert counted("awa.maintenance.rotate.skipped", "queue") == \
        before[("awa.maintenance.rotate.skipped", "queue")]
    assert database_rings(db)["queue"]["generation"] == 0
