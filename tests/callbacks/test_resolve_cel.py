"""resolve_callback: filter → on_fail → on_complete → default, and the fail-open rules."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

import awa
from awa import callbacks
from support.rows import job_row


@pytest.fixture
def registered(pool, running_job):
    async def make(**cel) -> tuple[int, str]:
        job_id, lease = running_job()
        token = await callbacks.register_callback(pool, job_id, lease, 60, **cel)
        return job_id, token.id
    return make


RULES = {"filter": 'payload.kind == "charge"',
         "on_fail": 'payload.status == "declined"',
         "on_complete": 'payload.status == "paid"',
         "transform": '{"amount": double(payload.cents) / 100.0, "ref": payload.ref}'}


async def test_filter_comes_first_and_ignores_without_a_change(db, client, registered):
    job_id, cid = await registered(**RULES)
    result = await client.resolve_callback(cid, {"kind": "refund", "status": "declined"})
    assert result.is_ignored() and "filter did not match" in result.reason
    row = job_row(db, job_id)
    assert row["state"] == "running" and str(row["callback_id"]) == cid
    assert callbacks.RESULT_KEY not in row["metadata"]


async def test_on_fail_is_checked_before_on_complete(db, client, registered):
    job_id, cid = await registered(on_fail="payload.n > 1", on_complete="payload.n > 0")
    result = await client.resolve_callback(cid, {"n": 2}, default_action="complete")
    assert result.is_failed() and result.reason.startswith("on_fail matched: payload.n > 1")
    row = job_row(db, job_id)
    assert row["state"] == "failed"
    assert row["errors"][0]["error"].startswith("callback failed: on_fail matched")
    with pytest.raises(awa.CallbackNotFound, match="already resolved"):
        await client.resolve_callback(cid, {"n": 1}, default_action="complete")


async def test_on_complete_applies_the_transform(db, client, registered):
    job_id, cid = await registered(**RULES)
    payload = {"kind": "charge", "status": "paid", "cents": 1250, "ref": "ch_1"}
    result = await client.resolve_callback(cid, payload)
    assert result.is_completed() and result.payload == {"amount": 12.5, "ref": "ch_1"}
    row = job_row(db, job_id)
    assert row["state"] == "completed"
    assert row["metadata"][callbacks.RESULT_KEY] == {"amount": 12.5, "ref": "ch_1"}


@pytest.mark.parametrize("default_action, state, outcome", [
    ("ignore", "running", "ignored"),
    ("complete", "completed", "completed"),
    ("fail", "failed", "failed"),
])
async def test_default_action_when_nothing_matches(db, client, registered, default_action,
                                                   state, outcome):
    job_id, cid = await registered(**RULES)
    result = await client.resolve_callback(cid, {"kind": "charge", "status": "pending",
                                                 "cents": 1, "ref": "r"},
                                           default_action=default_action)
    assert result.outcome == outcome
    assert f"default_action={default_action}" in result.reason
    assert job_row(db, job_id)["state"] == state


async def test_no_expressions_uses_the_default(db, client, registered):
    job_id, cid = await registered()
    result = await client.resolve_callback(cid, {"anything": 1}, default_action="complete")
    assert result.is_completed() and result.payload == {"anything": 1}


async def test_fail_open_filter_error_lets_the_payload_through(db, client, registered):
    job_id, cid = await registered(filter="payload.kind == 'charge'", on_complete="true")
    result = await client.resolve_callback(cid, {"no_kind_here": 1})
    assert result.is_completed()
    assert "CEL filter" in result.reason and "fail-open" in result.reason
    assert job_row(db, job_id)["state"] == "completed"


async def test_fail_open_condition_errors_fall_through_to_the_default(db, client, registered):
    job_id, cid = await registered(on_fail="payload.error.code > 500",
                                   on_complete="payload.status")  # not a boolean
    result = await client.resolve_callback(cid, {"status": "paid"}, default_action="ignore")
    assert result.is_ignored()
    assert "CEL on_fail" in result.reason and "CEL on_complete" in result.reason
    assert "returned str, not a boolean" in result.reason
    assert job_row(db, job_id)["state"] == "running"


async def test_fail_open_transform_error_completes_with_the_raw_payload(db, client, registered):
    job_id, cid = await registered(on_complete="true", transform="payload.missing.field")
    result = await client.resolve_callback(cid, {"status": "paid"})
    assert result.is_completed() and result.payload == {"status": "paid"}
    assert "untransformed payload" in result.reason
    assert job_row(db, job_id)["metadata"][callbacks.RESULT_KEY] == {"status": "paid"}


async def test_resolve_input_errors(client, registered):
    _, cid = await registered()
    with pytest.raises(awa.ValidationError, match="default_action must be one of"):
        await client.resolve_callback(cid, {}, default_action="maybe")
    with pytest.raises(awa.SerializationError, match="not JSON-serializable"):
        await client.resolve_callback(cid, {"when": object()})
    with pytest.raises(awa.CallbackNotFound):
        await client.resolve_callback(str(uuid.uuid4()), {})


def test_importing_awa_leaves_cel_python_unloaded_until_an_expression_compiles():
    # cel-python costs a third of `import awa`; producers and CLI commands never need it.
    probe = ("import sys, awa; print('celpy' in sys.modules); "
             "awa.cel.compile_expression('payload.ok'); print('celpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]
