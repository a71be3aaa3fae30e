"""Descriptor catalogue: declaration, BLAKE3 hashes, sync and refresh."""

from __future__ import annotations

import blake3
import pytest

from awa import ValidationError
from awa.descriptors import descriptor_hashes
from awa.runtime.maintenance.descriptors import sync_descriptors
from awa.serialization import canonical_json


async def test_declared_descriptors_sync_with_hash_and_refresh(client, db):
    client.queue_descriptor("email", display_name="Email", owner="growth",
                            docs_url="https://wiki/email", tags=["customer"])
    client.job_kind_descriptor("send_email", description="Sends one email",
                               extra={"sla": "5m"})
    pool = await client._get_pool()
    assert await sync_descriptors(pool, client) == 2
    q = db.execute("SELECT * FROM awa.queue_descriptors").fetchone()
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
    await sync_descriptors(pool, client)
    q2 = db.execute("SELECT *, now() - last_seen_at < interval '1 minute' AS fresh "
                    "FROM awa.queue_descriptors").fetchone()
    assert q2["fresh"] and q2["descriptor_hash"] != expected


def test_bad_descriptor_is_rejected_with_one_line(client):
    with pytest.raises(ValidationError, match="tags must be a list of strings"):
        client.queue_descriptor("q", tags=[1])
    with pytest.raises(ValidationError, match="extra is not JSON-serializable"):
        client.job_kind_descriptor("k", extra={"x": object()})
    assert client._queue_descriptors == {} and client._kind_descriptors == {}
