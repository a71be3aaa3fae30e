"""Descriptor catalogue: declaration, BLAKE3 hashes, sync and refresh."""

from __future__ import annotations

import blake3
import pytest

from awa import ValidationError
from awa.descriptors import catalogue, descriptor_hashes
from awa.runtime.maintenance.descriptors import sync_descriptors
from awa.serialization import canonical_json


async def test_declared_descriptors_sync_with_hash_and_refresh(client, db):
    client.queue_descriptor("email", display_name="Email", owner="growth",
                            docs_url="https://wiki/email", tags=["customer"])
    client.job_kind_descriptor("send_email", description="Sends one email",
                               extra={"sla": "5m"})
    pool = await client._get_pool()
    assert await sync_descriptors(pool, catalogue(client)) == 2
    q = db.execute("SELECT * FROM awa.queue_descriptors").fetchone()
    # The Rust core's hash: BLAKE3 of serde_json's bytes (sorted keys, compact, UTF-8).
    expected = blake3.blake3(canonical_json({
        "display_name": "Email", "description": None, "owner": "growth",
        "docs_url": "https://wiki/email", "tags": ["customer"], "extra": {}}).encode()).hexdigest()
    assert q["queue"] == "email" and q["owner"] == "growth"
    assert q["descriptor_hash"] == expected
    k = db.execute("SELECT * FROM awa.job_kind_descriptors").fetchone()
    assert k["extra"] == {"sla": "5m"}
    hashes = descriptor_hashes(client)
    assert hashes == {"queues": {"email": expected},
                      "kinds": {"send_email": k["descriptor_hash"]}}
    # A later tick refreshes last_seen_at; a changed declaration changes the hash.
    db.execute("UPDATE awa.queue_descriptors SET last_seen_at = now() - interval '1 day'")
    client.queue_descriptor("email", display_name="E-mail", owner="growth")
    await sync_descriptors(pool, catalogue(client))
    q2 = db.execute("SELECT *, now() - last_seen_at < interval '1 minute' AS fresh "
                    "FROM awa.queue_descriptors").fetchone()
    assert q2["fresh"] and q2["descriptor_hash"] != expected


def test_bad_descriptor_is_rejected_with_one_line(client):
    # awa-pg 0.6.9's TypeErrors and wording (ValidationError is also a TypeError).
    with pytest.raises(TypeError, match="'int' object is not an instance of 'str'"):
        client.queue_descriptor("q", tags=[1])
    with pytest.raises(ValidationError, match="Cannot convert object to JSON"):
        client.job_kind_descriptor("k", extra={"x": object()})
    assert client._queue_descriptors == {} and client._kind_descriptors == {}


# Hashes the real awa-pg 0.6.9 (Rust core) wrote into awa.queue_descriptors /
# job_kind_descriptors for these declarations (read back from its tables).
RUST_CORE_HASHES = [
    ({}, "98814589427c8cd1487aad76a869406c82a4e9f81d96b635df78745848e09443"),
    ({"description": "only this", "tags": []},
     "360ee4d2bd5ba61b6ccf76d14c0e1c8b41cde34796ab7d45252677dec0d8de01"),
    ({"display_name": "Zürich ✓", "description": 'a\nb "q"',
      "extra": {"ü": "é", "emoji": "🚀", "big": 12345678901234, "neg": -0.5,
                "nested": {"b": 1, "a": [True, None]}}},
     "13e1841521eae3e3cd29b2d37472c49763628585702da5722af15344fa4c4b93"),
    ({"extra": {"v": 1e20}}, "2886e239631a67c6c4699ad75b876cacc98f79bb918411d875e0ef32c645ba45"),
    ({"extra": {"v": 1e16}}, "dc77903325aad7303d18d1b59f4783a3362db71462d4f3b3f55de27a56a818cf"),
    ({"extra": {"v": 1e15}}, "d018ad5a16ec1d3c33753d5f0de41b6cd75e7a20c999748d2e0a02dbea4b2b43"),
    ({"extra": {"v": 1e-7}}, "beb28d07b133826ac8307b9b337a4acdbd6374d944a3f736ac0e28675a7f6d16"),
    ({"extra": {"v": 1e-5}}, "32fb53b60f1e31eca13c1844b3373a410f79884ff740b47c1706c8c7ca307024"),
    ({"extra": {"v": -0.0}}, "4250944b511d2b9429bc3b8bab6aca20e5254bac2023c48f24c9853346dccdb6"),
    ({"extra": {"v": 2 ** 64 - 1}},
     "62e69bc684d41b0928185eb59bb5205806e648eba883b025676dcdc9dffeca19"),
    ({"extra": {"n": float("nan")}},
     "8cabb5351f64de057c088cc8e87370748e48154a7a7ad91e34281f59b0279230"),
    ({"extra": 5}, "5ef05c581629338031d510e6dd4586770488ab295b4a70a0e3f867de9114c275"),
    ({"owner": "ö", "tags": ("z", "a", "é")},
     "5e5ef28687f60f936632b1e8803b82843df787a09fbfdd95efcdf26a8fa7f990"),
]


@pytest.mark.parametrize(("fields", "want"), RUST_CORE_HASHES)
def test_hash_equals_the_rust_cores(client, fields, want):
    client.queue_descriptor("q", **fields)
    assert client._queue_descriptors["q"]["descriptor_hash"] == want
