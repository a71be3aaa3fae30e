"""The HTTP worker against a real local endpoint that calls the real receiver back."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import httpx
import pytest

import awa
from awa import callback_contract, callbacks
from awa.callback_server import CallbackApp
from awa.callback_server import serve_in_thread as serve
from awa.http_worker import HttpWorker, HttpWorkerConfig, HttpWorkerMode
from support.polling import eventually
from support.rows import job_row

from .test_runtime_callbacks import FAST, state_is

SECRET = secrets.token_bytes(32)


class Endpoint:
    """A tiny serverless-function stand-in: answers per ``behaviour`` and may call back."""

    def __init__(self) -> None:
        self.behaviour = "later"
        self.requests: list[dict[str, Any]] = []
        self.callback_status: list[int] = []
        self._tasks: set[asyncio.Task] = set()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append({"headers": headers, "body": body})
        status = 202
        if self.behaviour == "early":
            await self._call_back(body)
        elif self.behaviour == "later":
            task = asyncio.create_task(self._call_back(body, delay=0.2))
            self._tasks.add(task)
        elif self.behaviour == "slow":
            await asyncio.sleep(1)
        elif self.behaviour.startswith("status:"):
            status = int(self.behaviour.split(":")[1])
        response_headers = [(b"content-type", b"application/json")]
        if status == 429:
            response_headers.append((b"retry-after", b"120"))
        payload = json.dumps({"accepted": status < 300}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": response_headers})
        await send({"type": "http.response.body", "body": payload})

    async def _call_back(self, body: dict[str, Any], delay: float = 0.0) -> None:
        await asyncio.sleep(delay)
        async with httpx.AsyncClient() as http:
            r = await http.post(body["callback_url"],
                                json={"payload": {"charged": body["job"]["args"]["cents"]}},
                                headers={callback_contract.SIGNATURE_HEADER:
                                         body["callback_signature"]})
        self.callback_status.append(r.status_code)


@pytest.fixture
def endpoint():
    app = Endpoint()
    with serve(app) as base:
        app.url = base + "/charge"
        yield app


@pytest.fixture
def receiver_base(database_url):
    with serve(CallbackApp(database_url=database_url, secret=SECRET)) as base:
        yield base


async def start_http_worker(client, endpoint, receiver_base, **overrides) -> HttpWorker:
    cfg = HttpWorkerConfig(url=endpoint.url, callback_base_url=receiver_base, secret=SECRET,
                           **overrides)
    worker = HttpWorker(cfg).register(client, kind="remote_charge", queue="http")
    await client.start([("http", 2)], **FAST)
    return worker


@pytest.mark.parametrize("behaviour", ["later", "early"])
async def test_round_trip_parks_then_completes_by_signed_callback(db, client, endpoint,
                                                                  receiver_base, behaviour):
    endpoint.behaviour = behaviour
    worker = await start_http_worker(client, endpoint, receiver_base)
    job = await client.insert({"cents": 1250}, kind="remote_charge", queue="http")
    if behaviour == "later":  # parked between the 202 and the callback
        await eventually(state_is(db, job.id, "waiting_external"), message="parked")
    await eventually(state_is(db, job.id, "completed"), message="completed by callback")
    await worker.aclose()

    [request] = endpoint.requests
    body, headers = request["body"], request["headers"]
    cid = body["callback_id"]
    assert body["job"]["id"] == job.id and body["job"]["args"] == {"cents": 1250}
    assert body["callback_url"] == f"{receiver_base}/api/callbacks/{cid}/complete"
    assert set(body["callback_urls"]) == {"complete", "fail", "heartbeat", "resume", "resolve"}
    assert callback_contract.verify(SECRET, cid, headers["x-awa-signature"])
    assert headers["x-awa-signature"] == body["callback_signature"]
    await eventually(lambda: endpoint.callback_status, message="the receiver's answer")
    assert endpoint.callback_status == [200]
    row = job_row(db, job.id)
    assert str(row["callback_id"]) == cid and row["attempt"] == 1
    assert row["metadata"][callbacks.RESULT_KEY] == {"charged": 1250}


@pytest.mark.parametrize("behaviour, state, error", [
    ("status:503", "retryable", "returned HTTP 503"),
    ("status:500", "retryable", "returned HTTP 500"),
    ("slow", "retryable", "timed out after 0.5s"),
    ("status:400", "failed", "returned HTTP 400"),
    ("status:404", "failed", "returned HTTP 404"),
])
async def test_response_status_decides_the_attempt(db, client, endpoint, receiver_base,
                                                   behaviour, state, error):
    endpoint.behaviour = behaviour
    worker = await start_http_worker(client, endpoint, receiver_base,
                                     request_timeout_seconds=0.5)
    job = await client.insert({"cents": 1}, kind="remote_charge", queue="http", max_attempts=3)
    await eventually(state_is(db, job.id, state), message=state)
    await worker.aclose()
    row = job_row(db, job.id)
    [entry] = row["errors"]
    assert error in entry["error"] and entry["attempt"] == 1
    assert bool(entry.get("terminal")) is (state == "failed")
    # The callback registered for the failed attempt cannot resolve the job any more.
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(endpoint.requests[0]["body"]["callback_id"], {})
    assert job_row(db, job.id)["state"] == state


async def test_too_many_requests_retries_after_the_servers_delay(db, client, endpoint,
                                                                 receiver_base):
    endpoint.behaviour = "status:429"
    worker = await start_http_worker(client, endpoint, receiver_base)
    job = await client.insert({"cents": 1}, kind="remote_charge", queue="http", max_attempts=3)
    await eventually(state_is(db, job.id, "retryable"), message="retryable")
    await worker.aclose()
    delay = db.execute("SELECT extract(epoch FROM run_at - now()) AS s FROM awa.jobs "
                       "WHERE id = %s", (job.id,)).fetchone()["s"]
    assert 100 < delay <= 120  # Retry-After: 120, not the exponential backoff
    assert "returned HTTP 429" in job_row(db, job.id)["metadata"]["http_worker_last_response"]


async def test_unreachable_endpoint_is_retryable(db, client, receiver_base):
    cfg = HttpWorkerConfig(url="http://127.0.0.1:9/nothing", callback_base_url=receiver_base,
                           secret=SECRET)
    HttpWorker(cfg).register(client, kind="remote_charge", queue="http")
    await client.start([("http", 1)], **FAST)
    job = await client.insert({"cents": 1}, kind="remote_charge", queue="http", max_attempts=3)
    await eventually(state_is(db, job.id, "retryable"), message="retryable")
    assert "ConnectError" in job_row(db, job.id)["errors"][0]["error"]


async def test_sync_mode_completes_on_2xx(db, client, endpoint):
    endpoint.behaviour = "status:200"
    worker = HttpWorker(HttpWorkerConfig(url=endpoint.url, mode=HttpWorkerMode.SYNC))
    worker.register(client, kind="ping", queue="http")
    await client.start([("http", 1)], **FAST)
    job = await client.insert({"cents": 0}, kind="ping", queue="http")
    await eventually(state_is(db, job.id, "completed"), message="completed")
    await worker.aclose()
    assert "callback_id" not in endpoint.requests[0]["body"]


@pytest.mark.parametrize("kwargs, message", [
    ({"url": "ftp://x"}, r"url must be an http\(s\) URL"),
    ({"url": "http://x"}, "needs callback_base_url"),
    ({"url": "http://x", "callback_base_url": "http://cb"}, "needs the receiver's secret"),
    ({"url": "http://x", "callback_base_url": "http://cb", "secret": "12"}, "64 hex"),
    ({"url": "http://x", "mode": "sync", "request_timeout_seconds": 0}, "must be positive"),
])
def test_config_mistakes_are_one_line_errors(kwargs, message):
    with pytest.raises(awa.ValidationError, match=message):
        HttpWorkerConfig(**kwargs)
