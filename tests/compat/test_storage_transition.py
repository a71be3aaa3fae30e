"""awa-pg 0.6.9's storage-transition client members on this distribution's engines.

``storage_status`` describes the live engine with the reference's keys;
``install_queue_storage`` switches a drained canonical database to queue
storage (and the client keeps working on the new engine at once);
``prepare_queue_storage_schema`` validates only.  Fast: no reference SDK here
(the differential scenarios in test_compat.py compare with it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

import awa
from awa.testing import AwaTestClient

# The keys of awa-pg 0.6.9's storage_status document, in its order.
REFERENCE_KEYS = [
    "current_engine", "active_engine", "prepared_engine", "state", "transition_epoch",
    "details", "entered_at", "updated_at", "finalized_at", "canonical_live_backlog",
    "prepared_queue_storage_schema", "prepared_schema_ready", "live_runtime_capability_counts",
    "can_enter_mixed_transition", "enter_mixed_transition_blockers", "can_finalize",
    "finalize_blockers"]


@dataclass
class Ping:
    n: int = 0


@pytest.fixture
async def client(database_url: str):
    c = awa.AsyncClient(database_url)
    yield c
    await c.close()


@pytest.mark.engine("canonical")  # the switch starts from a canonical database
async def test_install_queue_storage_switches_a_drained_canonical_database(client):
    status = json.loads(await client.storage_status())
    assert list(status) == REFERENCE_KEYS
    assert (status["current_engine"], status["active_engine"], status["state"]) == (
        "canonical", "canonical", "canonical")
    assert status["canonical_live_backlog"] == 0 and status["entered_at"].endswith("Z")
    await client.insert(Ping(1), queue="before")
    assert json.loads(await client.storage_status())["canonical_live_backlog"] == 1
    with pytest.raises(awa.ValidationError, match="canonical job tables hold jobs"):
        await client.install_queue_storage()
    await AwaTestClient(client).clean()  # drained: nothing left in the canonical tables

    assert await client.install_queue_storage() == ()  # as 0.6.9 (annotated None)
    status = json.loads(await client.storage_status())
    assert list(status) == REFERENCE_KEYS
    assert (status["current_engine"], status["active_engine"], status["state"]) == (
        "queue_storage", "queue_storage", "active")
    assert status["details"] == {"schema": "awa"}
    assert status["prepared_queue_storage_schema"] == "awa" and status["prepared_schema_ready"]
    # The same client now writes through the queue-storage engine.
    after = await client.insert(Ping(2), queue="after")
    got = await client.get_job(after.id)
    assert got.state is awa.JobState.Available and got.queue == "after"
    assert await client.install_queue_storage() == ()  # idempotent


@pytest.mark.engine("canonical")
async def test_install_queue_storage_into_a_schema_of_its_own(client, db):
    assert await client.install_queue_storage(schema="awa_qs") == ()
    status = json.loads(await client.storage_status())
    assert status["details"] == {"schema": "awa_qs"}
    assert status["prepared_queue_storage_schema"] == "awa_qs"
    job = await client.insert(Ping(1), queue="own")
    assert db.execute("SELECT count(*) AS n FROM awa_qs.ready_entries WHERE job_id = %s",
                      (job.id,)).fetchone()["n"] == 1
    assert (await client.get_job(job.id)).state is awa.JobState.Available
    assert await client.install_queue_storage(schema="awa_qs") == ()  # idempotent, stays put


@pytest.mark.engine("queue_storage")  # laid out in schema awa
async def test_install_and_prepare_validate_their_arguments(client):
    with pytest.raises(awa.ValidationError,
                       match="queue storage is in schema 'awa', not 'awa_qs'") as info:
        await client.install_queue_storage(schema="awa_qs")
    assert "\n" not in str(info.value)
    with pytest.raises(awa.ValidationError, match="identifier"):
        await client.install_queue_storage(schema="Bad-Name")
    with pytest.raises(ValueError, match="slot counts"):
        await client.install_queue_storage(queue_slot_count=0)
    with pytest.raises(awa.ValidationError, match="identifier"):
        await client.prepare_queue_storage_schema(schema="Not An Identifier")
    # Nothing to prepare ahead here: any plain schema name is accepted, nothing changes.
    before = json.loads(await client.storage_status())["current_engine"]
    assert await client.prepare_queue_storage_schema(schema="awa_qs_compat") == ()
    assert json.loads(await client.storage_status())["current_engine"] == before
    # reset=True empties queue storage, as awa-pg 0.6.9's reset (its test fixtures' call).
    await client.insert(Ping(1), queue="own")
    assert await client.install_queue_storage(reset=True) == ()
    assert await client.list_jobs(queue="own") == []


@pytest.mark.engine("queue_storage")  # a database laid out for queue storage
async def test_storage_status_describes_queue_storage(client):
    status = json.loads(await client.storage_status())
    assert list(status) == REFERENCE_KEYS
    assert (status["current_engine"], status["state"], status["transition_epoch"]) == (
        "queue_storage", "active", 1)
    assert status["finalized_at"] is not None and status["can_finalize"] is False


def test_the_blocking_client_has_them_too(database_url):
    c = awa.Client(database_url)
    try:
        assert list(json.loads(c.storage_status())) == REFERENCE_KEYS
        assert c.prepare_queue_storage_schema() == ()
    finally:
        c.close()
